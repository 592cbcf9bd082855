//! A recording without CPU samples (`record --alloc`, `--exceptions`, `--offcpu`…): BPF only
//! for what needs it (off-CPU time, the `__cxa_throw` uprobe, per-thread CPU time), none at
//! all for event kinds only (allocations, contention).
use crate::sampler::{BpfSampler, RawSample, Sampler, SamplerError, SamplerKind, SamplerStats};

/// No sampler: the recording's events come from EventPipe, CPU times from /proc.
pub struct NoSampler;

impl Sampler for NoSampler {
    fn kind(&self) -> SamplerKind {
        // Never shown: a recording without CPU samples names no sampler.
        SamplerKind::Bpf
    }
    fn drain(&mut self) -> Result<Vec<RawSample>, SamplerError> {
        Ok(Vec::new())
    }
    fn stats(&self) -> SamplerStats {
        SamplerStats::default()
    }
    fn add_pids(&mut self, _pids: &[u32]) -> Result<(), SamplerError> {
        Ok(())
    }
}

/// The sampler of a recording without CPU samples: BPF without the CPU clock when off-CPU
/// time or exceptions (the `__cxa_throw` uprobe) are asked for, else none. BPF that does not
/// load leaves a line and no sampler (the events are recorded all the same).
pub fn sampler(targets: &[u32], bpf_wanted: bool) -> (Box<dyn Sampler>, Option<String>) {
    if !bpf_wanted {
        return (Box::new(NoSampler), None);
    }
    match BpfSampler::start_with(targets, None) {
        Ok(s) => (Box::new(s), None),
        Err(e) => (Box::new(NoSampler), Some(format!("BPF unavailable ({e}): no off-CPU profile or __cxa_throw count"))),
    }
}
