//! What sources send: plain data, no handles. Times are host CLOCK_MONOTONIC nanoseconds
//! (BPF's `bpf_ktime_get_ns`; EventPipe times shifted by the session's origin).
use std::sync::Arc;

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

/// An event's payload bytes: a range of a buffer shared by the events read with it (a live
/// source reads a batch's payloads into one buffer, which the records then share without a
/// copy: one allocation on the reader's thread per batch, not per event, and the buffer can go
/// back to the reader once the last record is dropped, see [`Payload::into_buffer`]). An empty
/// payload made by [`Payload::EMPTY`] (or `Default`) holds no buffer: no allocation, no count
/// to raise or lower. Compares and prints as its bytes.
#[derive(Clone)]
pub struct Payload {
    buf: Option<Arc<Vec<u8>>>,
    start: u32,
    end: u32,
}

impl Payload {
    /// No bytes, no buffer.
    pub const EMPTY: Payload = Payload { buf: None, start: 0, end: 0 };

    /// `buf[start..end]`; None when the range is not within `buf`.
    pub fn shared(buf: &Arc<Vec<u8>>, start: usize, end: usize) -> Option<Self> {
        if start > end || end > buf.len() {
            return None;
        }
        Some(Payload { buf: Some(Arc::clone(buf)), start: u32::try_from(start).ok()?, end: u32::try_from(end).ok()? })
    }

    /// The capacity of the buffer this payload is a range of (0 without one).
    pub fn buffer_capacity(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.capacity())
    }

    /// The buffer this payload is a range of, when this is its last owner (the other records
    /// that shared it dropped): to be filled again.
    pub fn into_buffer(self) -> Option<Vec<u8>> {
        Arc::try_unwrap(self.buf?).ok()
    }
}

impl Default for Payload {
    fn default() -> Self {
        Payload::EMPTY
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // In range by construction (`shared` checks it; the others cover the whole buffer).
        match &self.buf {
            Some(b) => &b[self.start as usize..self.end as usize],
            None => &[],
        }
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Payload {}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl From<&[u8]> for Payload {
    /// A buffer of its own.
    fn from(b: &[u8]) -> Self {
        Payload::from(b.to_vec())
    }
}

impl From<Vec<u8>> for Payload {
    /// `b` itself, not copied.
    fn from(b: Vec<u8>) -> Self {
        // NetTrace sizes are u32: a longer buffer is not an event's (its first 4 GiB kept).
        let end = u32::try_from(b.len()).unwrap_or(u32::MAX);
        Payload { buf: Some(Arc::new(b)), start: 0, end }
    }
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
