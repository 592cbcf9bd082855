//! Transport-independent event → profile pipeline. A source (the Linux EventPipe session, the
//! Windows ETW session, or a recorded file) feeds decoded CLR events with their thread, time
//! and stack; this crate turns them into samples of the kinds `alloc-bytes`, `alloc-count`,
//! `exceptions`, `contention-ns` and `contention-count`, plus a report (counts by exception type
//! and message, wait-time histogram, allocations by type), and the GC timeline ([`GcTimeline`]:
//! every collection with its pauses, sizes and condemn reasons; [`GcReport`]). Symbolization is
//! the caller's, through [`FrameSource`].
mod alloc;
mod contention;
mod exceptions;
mod gc;
mod gc_report;
pub mod heap;
pub mod http;
mod profiles;
mod report;
mod threads;
mod timed;
pub mod stream;

pub use gc::{GcRecord, GcTimeline, pause_mode_name};
pub use gc_report::{GcCpu, GcReport};
pub use alloc::{AllocEstimate, estimate_tick, estimate_sampled};
pub use profiles::{EventProfiles, Kinds, MAX_TIMED_EVENTS, PendingSample};
pub use report::{ContentionReport, EventReport, ExceptionCount};
pub use threads::ThreadTable;

use clr_events::ClrEvent;
use clrprobe_profile::Frame;

/// One decoded event as any source delivers it.
#[derive(Debug, Clone, Copy)]
pub struct EventInput<'a, 'e> {
    pub pid: u32,
    /// OS thread id of the thread the event is about (EventPipe's thread id on Linux).
    pub tid: u64,
    /// Event time in nanoseconds on the source's clock (only differences are used here).
    pub time_ns: u64,
    pub event: &'a ClrEvent<'e>,
    /// Instruction pointers of the event's stack, leaf first (empty when none).
    pub stack: &'a [u64],
}

/// Names the addresses of a stack: returns frames root → leaf.
pub trait FrameSource {
    fn frames(&mut self, pid: u32, stack: &[u64]) -> Vec<Frame>;
}
