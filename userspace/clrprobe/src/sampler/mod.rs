//! CPU samplers: where (thread, stack) samples come from. The BPF sampler aggregates in the
//! kernel; the perf_event fallback reads a ring buffer per thread. Both hand out the same
//! [`RawSample`]s, so everything after them is shared.
mod bpf;
mod perf;

pub use bpf::{BpfSampler, set_offcpu_copies};
pub use perf::PerfSampler;

use std::sync::Arc;

use serde::Serialize;

/// One aggregated sample: a thread seen `count` times with these stacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSample {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// Kernel frames, leaf first (empty when the sample was taken in user mode).
    pub kernel: Arc<[u64]>,
    /// User frames, leaf first: the sampled IP, then return addresses.
    pub user: Arc<[u64]>,
    pub count: u64,
    /// CLOCK_MONOTONIC ns of the sample when the sampler records times (one sample per
    /// entry then), else 0.
    pub time_ns: u64,
}

/// The pipeline's record of a sample (the agent's sources, `record --save-raw`).
impl From<RawSample> for clrprobe_pipeline::stream::StackRecord {
    fn from(s: RawSample) -> Self {
        Self { pid: s.pid, tid: s.tid, comm: std::sync::Arc::from(s.comm), time_ns: s.time_ns, kernel: s.kernel, user: s.user, count: s.count }
    }
}

/// What a sampler recorded and lost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SamplerStats {
    pub samples: u64,
    /// Samples not recorded (aggregation map full, ring buffer overrun).
    pub lost_samples: u64,
    /// User stacks that could not be captured (stack-map collision or full).
    pub lost_user_stacks: u64,
    pub lost_kernel_stacks: u64,
}

/// Which sampler ran, named in the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SamplerKind {
    Bpf,
    PerfEvent,
}

impl std::fmt::Display for SamplerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SamplerKind::Bpf => "bpf (in-kernel aggregation)",
            SamplerKind::PerfEvent => "perf_event ring buffer (fallback)",
        })
    }
}

/// A source of CPU samples.
pub trait Sampler {
    fn kind(&self) -> SamplerKind;
    /// Samples gathered since the last drain.
    fn drain(&mut self) -> Result<Vec<RawSample>, SamplerError>;
    fn stats(&self) -> SamplerStats;
    /// Adds processes to sample (new .NET processes found while recording).
    fn add_pids(&mut self, pids: &[u32]) -> Result<(), SamplerError>;
    /// Reads what arrived since the last call without handing it out (stack copies are
    /// unwound while the processes are as they were); called every 100 ms.
    fn poll(&mut self) {}
    /// What the userspace unwinder of copied stacks did (None: frame pointers only).
    fn unwind_summary(&self) -> Option<crate::unwind::UnwindSummary> {
        None
    }
    /// The BPF sampler, to attach more programs (sched_switch, uprobes) to its object.
    fn as_bpf(&mut self) -> Option<&mut BpfSampler> {
        None
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    #[error(transparent)]
    Bpf(#[from] crate::bpf::BpfError),
    #[error("perf_event_open for {what}: {source} (run `clrprobe doctor`)")]
    Perf { what: String, #[source] source: std::io::Error },
}

pub use crate::cli::SamplerChoice;

/// Starts the chosen sampler on `pids` at `freq` Hz. With `Auto`, a BPF failure falls back to
/// perf_event and the reason is returned beside the sampler.
/// As [`start`]; without `stack_copies` the BPF sampler walks frame pointers only.
pub fn start_with_copies(
    choice: SamplerChoice,
    pids: &[u32],
    freq: u64,
    stack_copies: bool,
) -> Result<(Box<dyn Sampler>, Option<String>), SamplerError> {
    if stack_copies || choice == SamplerChoice::Perf {
        return start(choice, pids, freq);
    }
    match BpfSampler::start_fp_only(pids, freq) {
        Ok(s) => Ok((Box::new(s), None)),
        Err(e) if choice == SamplerChoice::Auto => {
            let why = format!("BPF sampler unavailable ({e}); using the perf_event fallback");
            Ok((Box::new(PerfSampler::start(pids, freq)?), Some(why)))
        }
        Err(e) => Err(e),
    }
}

pub fn start(
    choice: SamplerChoice,
    pids: &[u32],
    freq: u64,
) -> Result<(Box<dyn Sampler>, Option<String>), SamplerError> {
    match choice {
        SamplerChoice::Bpf => Ok((Box::new(BpfSampler::start(pids, freq)?), None)),
        SamplerChoice::Perf => Ok((Box::new(PerfSampler::start(pids, freq)?), None)),
        SamplerChoice::Auto => match BpfSampler::start(pids, freq) {
            Ok(s) => Ok((Box::new(s), None)),
            Err(e) => {
                let why = format!("BPF sampler unavailable ({e}); using the perf_event fallback");
                Ok((Box::new(PerfSampler::start(pids, freq)?), Some(why)))
            }
        },
    }
}
