//! The streaming pipeline's OS-independent part: sources send plain-data [`Record`]s (no
//! handles), one [`Aggregator`] absorbs them and owns every piece of per-process state, and
//! sinks take what they need from it — Prometheus text ([`Aggregator::metrics_text`]) or a
//! profile of one kind over a time window ([`Aggregator::profile`]). Nothing here reads a
//! clock or the OS: time comes from the records, names from a [`Namer`], so the same records
//! give the same bytes (the replay tests rely on it).
mod aggregate;
mod clr_stream;
mod counters;
mod cpu_hold;
mod metrics;
pub mod raw;
mod combined;
mod fold;
mod payload;
mod records;
mod replay;
mod snapshot;
mod wanted;
mod window;

pub use aggregate::{AllocSlices, Aggregator, AggregatorConfig, Health, StackKey, is_gc_thread};
pub use counters::{Counters, PAUSE_BUCKETS_S};
pub use records::{ClrRecord, Payload, ProcessInfo, Record, Shares, StackRecord};
pub use snapshot::{ProfileKind, Namer};
pub use combined::CombinedOptions;
pub use fold::Taken;
pub use clr_stream::{COUNTERS_PROVIDER, ClrStream, StreamItem};
pub use replay::{Replay, ReplayError, ReplayStats};
pub use wanted::{allocation, wanted};
pub use window::CpuWindow;

/// The unit tests' namer: each address its own frame `f_ADDR`, each process `procPID`.
#[cfg(test)]
pub(crate) struct TestNames;

#[cfg(test)]
impl Namer for TestNames {
    fn stack(&mut self, _pid: u32, kernel: &[u64], user: &[u64]) -> Vec<clrprobe_profile::Frame> {
        kernel.iter().chain(user.iter()).rev().map(|a| clrprobe_profile::Frame::new(format!("f_{a:x}"), "m", clrprobe_profile::FrameKind::Jit)).collect()
    }
    fn process_name(&mut self, pid: u32) -> String {
        format!("proc{pid}")
    }
}
