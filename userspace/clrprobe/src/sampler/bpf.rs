//! The BPF sampler: a perf_event program per CPU aggregating (pid, tid, stacks) → count in a
//! kernel hash map, drained periodically (read and delete each key).
use std::{collections::HashMap, sync::Arc};

use aya::maps::{MapData, StackTraceMap};
use clrprobe_common::names;

use super::{RawSample, Sampler, SamplerError, SamplerKind, SamplerStats};
use crate::bpf::{BpfError, Loaded};

pub struct BpfSampler {
    bpf: Loaded,
    /// Stack ids are stable while the map is not cleared: resolve each once.
    stacks: HashMap<i32, Arc<[u64]>>,
    empty: Arc<[u64]>,
    /// Samples lost between reading a key and deleting it are not counted here: the window
    /// is a few microseconds per key per drain.
    drained: u64,
}

impl BpfSampler {
    pub fn start(pids: &[u32], freq: u64) -> Result<Self, SamplerError> {
        Self::start_with(pids, Some(freq))
    }

    /// Loads the BPF object for `pids`; samples CPU at `freq` Hz when given (without it, only
    /// the other programs — sched_switch, uprobes — are attached later).
    pub fn start_with(pids: &[u32], freq: Option<u64>) -> Result<Self, SamplerError> {
        let mut bpf = Loaded::load()?;
        bpf.add_targets(pids)?;
        if let Some(freq) = freq {
            bpf.attach_sampler(freq)?;
        }
        Ok(Self { bpf, stacks: HashMap::new(), empty: Arc::from(Vec::new()), drained: 0 })
    }

    /// The loaded BPF object (to attach more programs to it).
    pub fn loaded(&mut self) -> &mut Loaded {
        &mut self.bpf
    }

    fn stack(&mut self, id: i32) -> Result<Arc<[u64]>, BpfError> {
        if id < 0 {
            return Ok(self.empty.clone());
        }
        if let Some(s) = self.stacks.get(&id) {
            return Ok(s.clone());
        }
        let name = names::STACKS;
        let map = self.bpf.ebpf.map(name).ok_or(BpfError::NoMap { name })?;
        let traces: StackTraceMap<&MapData> =
            StackTraceMap::try_from(map).map_err(|source| BpfError::Map { name, source })?;
        let frames: Arc<[u64]> = match traces.get(&(id as u32), 0) {
            Ok(t) => t.frames().iter().map(|f| f.ip).take_while(|&ip| ip != 0).collect(),
            Err(_) => self.empty.clone(),
        };
        self.stacks.insert(id, frames.clone());
        Ok(frames)
    }
}

impl BpfSampler {
    /// Off-CPU time recorded since the last call: `count` is nanoseconds.
    pub fn drain_offcpu(&mut self) -> Result<Vec<RawSample>, SamplerError> {
        let entries = self.bpf.drain_offcpu()?;
        let mut out = Vec::with_capacity(entries.len());
        for (k, ns) in entries {
            out.push(RawSample {
                pid: k.pid,
                tid: k.tid,
                comm: String::from_utf8_lossy(k.comm_bytes()).into_owned(),
                kernel: self.stack(k.kernel_stack_id)?,
                user: self.stack(k.user_stack_id)?,
                time_ns: k.time << 10,
                count: ns,
            });
        }
        Ok(out)
    }
}

impl Sampler for BpfSampler {
    fn kind(&self) -> SamplerKind {
        SamplerKind::Bpf
    }

    fn drain(&mut self) -> Result<Vec<RawSample>, SamplerError> {
        self.bpf.poll_logs();
        let name = names::SAMPLE_COUNTS;
        let entries = self.bpf.drain_counts(name)?;
        let mut samples = Vec::with_capacity(entries.len());
        for (k, count) in entries {
            self.drained += count;
            samples.push(RawSample {
                pid: k.pid,
                tid: k.tid,
                comm: String::from_utf8_lossy(k.comm_bytes()).into_owned(),
                kernel: self.stack(k.kernel_stack_id)?,
                user: self.stack(k.user_stack_id)?,
                time_ns: k.time << 10,
                count,
            });
        }
        Ok(samples)
    }

    fn stats(&self) -> SamplerStats {
        let s = self.bpf.stats().unwrap_or_default();
        SamplerStats {
            samples: s.samples,
            lost_samples: s.dropped_map_full,
            lost_user_stacks: s.user_stack_errors,
            lost_kernel_stacks: s.kernel_stack_errors,
        }
    }

    fn add_pids(&mut self, pids: &[u32]) -> Result<(), SamplerError> {
        Ok(self.bpf.add_targets(pids)?)
    }

    fn as_bpf(&mut self) -> Option<&mut BpfSampler> {
        Some(self)
    }
}
