//! What sources send: plain data, no handles. Times are host CLOCK_MONOTONIC nanoseconds
//! (BPF's `bpf_ktime_get_ns`; EventPipe times shifted by the session's origin).
use std::sync::Arc;

pub use super::payload::{Payload, Shares};

/// One thread seen `count` times with these stacks (CPU samples), or off CPU for `count`
/// nanoseconds (off-CPU intervals).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackRecord {
    pub pid: u32,
    pub tid: u32,
    pub comm: Arc<str>,
    /// When it was taken (0: the source has no per-sample times).
    pub time_ns: u64,
    /// Kernel frames, leaf first.
    pub kernel: Arc<[u64]>,
    /// User frames, leaf first.
    pub user: Arc<[u64]>,
    pub count: u64,
}

/// One runtime event as the transport delivered it, undecoded (decoding is the aggregator's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClrRecord {
    pub pid: u32,
    pub tid: u64,
    pub time_ns: u64,
    pub provider: Arc<str>,
    pub event_id: u16,
    pub version: u8,
    pub pointer_size: u8,
    pub payload: Payload,
    /// Instruction pointers, leaf first (empty when the event has no stack).
    pub stack: Arc<[u64]>,
}

/// A .NET process as discovery describes it; the labels of its metrics.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProcessInfo {
    pub pid: u32,
    pub name: String,
    /// Empty outside containers.
    pub container_id: String,
    /// Empty when unknown.
    pub runtime_version: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Cpu(StackRecord),
    OffCpu(StackRecord),
    Clr(ClrRecord),
    /// Runtime events of one process read together, in order (a live source sends a block's
    /// events at once: one message and one wake-up of the aggregator's per batch, not per event).
    ClrBatch(Vec<ClrRecord>),
    /// One value of a runtime EventCounter (System.Runtime's `EventCounters` event): the
    /// mean of a polling counter, or the increment of an incrementing one over its interval,
    /// rounded (the thread-pool counters are whole numbers).
    Counter { pid: u32, name: Arc<str>, value: u64 },
    /// A .NET process is followed from now on.
    Started(ProcessInfo),
    /// It exited (its series end once [`crate::stream::AggregatorConfig::exited_grace_ns`] passed).
    Exited { pid: u32, time_ns: u64 },
    /// A thread's total CPU time so far (user + system), from the OS.
    ThreadCpu { pid: u32, tid: u32, comm: Arc<str>, cpu_ns: u64 },
    /// A process's total CPU time so far.
    ProcessCpu { pid: u32, user_ns: u64, system_ns: u64 },
    /// Events the runtime dropped (EventPipe buffer full), samples the kernel side lost:
    /// increments, by source ("eventpipe", "bpf-samples", …), for one process or none.
    Lost { pid: Option<u32>, source: &'static str, count: u64 },
    /// The allocation events of `pid` are sampled in slices (the agent's duty cycle): a slice
    /// opened (`on`) or closed at `time_ns`. Every event of a slice arrives before its close.
    /// The allocs profile is scaled by the time followed over the time covered.
    AllocSampling { pid: u32, time_ns: u64, on: bool },
    /// The sources' clock reached `time_ns`, and every CPU sample taken before it has been
    /// sent: windows roll, timed samples are checked, exited processes are let go.
    Tick { time_ns: u64 },
}
