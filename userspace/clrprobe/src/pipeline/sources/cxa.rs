//! `record --cxa-throw` (and exceptions without EventPipe) on the pipeline: a uprobe on each
//! followed .NET process's `__cxa_throw` counts its throws in the kernel, priced once before
//! the first is placed ([`crate::record::cxa`]).
use std::collections::BTreeMap;

use crate::sampler::BpfSampler;

/// The uprobes placed so far.
#[derive(Debug, Default)]
pub struct CxaProbes {
    /// Processes whose `__cxa_throw` is counted.
    pub probed: Vec<u32>,
    /// One uprobe hit's cost, measured before the first was placed.
    pub cost_ns: Option<u64>,
    priced: bool,
}

/// What the uprobes counted, for `record`'s summary.
#[derive(Debug, Default, Clone)]
pub struct CxaReport {
    pub probed: Vec<u32>,
    pub throws: BTreeMap<u32, u64>,
    pub cost_ns: Option<u64>,
}

impl CxaProbes {
    /// Counts the throws of `pid` (a .NET process just set up); problems go to `warn`.
    pub fn place(&mut self, b: &mut BpfSampler, pid: u32, mut warn: impl FnMut(String)) {
        if !self.priced {
            self.priced = true;
            match crate::record::cxa::price(b.loaded()) {
                Ok(d) => self.cost_ns = Some(d.as_nanos() as u64),
                Err(e) => warn(format!("uprobe self-test: {e}")),
            }
        }
        match crate::record::cxa::attach(b.loaded(), pid) {
            Ok(()) => self.probed.push(pid),
            Err(e) => warn(format!("no __cxa_throw count for {pid}: {e}")),
        }
    }

    /// Lets the uprobes of exited processes go (their counts stay).
    pub fn detach_exited(&self, b: &mut BpfSampler) {
        for pid in b.loaded().uprobed_pids().into_iter().filter(|&p| !crate::record::alive(p)) {
            b.loaded().detach_uprobes(pid);
        }
    }

    /// The counts so far.
    pub fn report(&self, b: Option<&mut BpfSampler>) -> CxaReport {
        let throws = match b {
            Some(b) if !self.probed.is_empty() => b.loaded().cxa_throws().unwrap_or_default().into_iter().collect(),
            _ => BTreeMap::new(),
        };
        CxaReport { probed: self.probed.clone(), throws, cost_ns: self.cost_ns }
    }
}
