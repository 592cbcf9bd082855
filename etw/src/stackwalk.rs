//! Attaching stacks to the events they belong to.
//!
//! ETW delivers a stack as a separate event that follows the one it belongs to:
//! * the CLR's ClrStackWalk (runtime event 82, Stack keyword) right after the CLR event, on the
//!   same thread, with no reference to it: it belongs to the latest CLR event of that thread
//!   that has not yet been followed by another event of that thread;
//! * the kernel's StackWalk (opcode 32) after a SampledProfile (or any event with stack tracing
//!   on), naming the thread and the raw timestamp of its event. A stack walked in two parts
//!   (kernel, then user) arrives as two StackWalk events with the same timestamp; their frames
//!   are concatenated (leaf first).
//!
//! Events are held in arrival order until their stack can no longer arrive (an event newer by
//! more than [`CorrelatorConfig::hold_100ns`], or more than `max_pending` held), then released
//! in that order, so the pipeline still sees each thread's events in order.

use std::collections::VecDeque;

use crate::kernel::{self, KernelStackWalk, SampledProfile};
use crate::providers;
use crate::record::EtwRecord;

/// Converts a raw QPC timestamp (StackWalk's EventTimeStamp) to the header clock (FILETIME).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawClock {
    pub qpc_frequency: u64,
    /// A QPC reading and the FILETIME taken at the same moment.
    pub qpc_anchor: u64,
    pub filetime_anchor: i64,
}

impl RawClock {
    pub fn to_filetime(&self, qpc: u64) -> i64 {
        let f = self.qpc_frequency.max(1) as i128;
        let delta = qpc as i128 - self.qpc_anchor as i128;
        let t = self.filetime_anchor as i128 + delta * 10_000_000 / f;
        t.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CorrelatorConfig {
    /// `None`: kernel StackWalk timestamps are already in the header clock.
    pub clock: Option<RawClock>,
    /// Largest |header time − stack's event time| (100 ns units) accepted as a match.
    pub tolerance_100ns: i64,
    /// How long (100 ns units of header time) an event waits for its stack.
    pub hold_100ns: i64,
    pub max_pending: usize,
}

impl Default for CorrelatorConfig {
    fn default() -> Self {
        CorrelatorConfig { clock: None, tolerance_100ns: 0, hold_100ns: 100_000, max_pending: 65_536 }
    }
}

/// An event with the stack that was found for it (empty when none), leaf first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Correlated {
    pub record: EtwRecord,
    pub stack: Vec<u64>,
    /// The process a kernel StackWalk named (SampledProfile headers may not say).
    pub stack_process: Option<u32>,
}

/// Counts of what the correlator could not use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CorrelatorStats {
    /// Stack events with no event to attach to.
    pub orphan_stacks: u64,
    /// Stack events whose payload did not decode.
    pub bad_stacks: u64,
}

#[derive(Debug)]
struct Pending {
    item: Correlated,
    /// The thread the event is about (SampledProfile: the sampled thread).
    thread: u32,
    /// A later event of the same thread arrived: no ClrStackWalk can belong to this one.
    followed: bool,
}

#[derive(Debug, Default)]
pub struct StackCorrelator {
    config: CorrelatorConfig,
    pending: VecDeque<Pending>,
    newest: i64,
    pub stats: CorrelatorStats,
}

impl StackCorrelator {
    pub fn new(config: CorrelatorConfig) -> Self {
        StackCorrelator { config, pending: VecDeque::new(), newest: i64::MIN, stats: CorrelatorStats::default() }
    }

    /// Feeds one record; returns the events that are now complete, in arrival order.
    pub fn push(&mut self, rec: EtwRecord) -> Vec<Correlated> {
        self.newest = self.newest.max(rec.timestamp);
        if rec.provider == providers::RUNTIME && rec.event_id == kernel::CLR_STACK_WALK_ID {
            self.attach_clr(&rec);
        } else if rec.provider == providers::KERNEL_STACK_WALK && rec.opcode == kernel::OPCODE_STACK_WALK {
            self.attach_kernel(&rec);
        } else {
            let thread = subject_thread(&rec);
            for p in self.pending.iter_mut().filter(|p| p.thread == thread && p.item.record.pid == rec.pid) {
                p.followed = true;
            }
            let stack = rec.stack.clone().unwrap_or_default();
            self.pending.push_back(Pending { item: Correlated { record: rec, stack, stack_process: None }, thread, followed: false });
        }
        self.release(false)
    }

    /// Releases every held event.
    pub fn finish(&mut self) -> Vec<Correlated> {
        self.release(true)
    }

    fn attach_clr(&mut self, rec: &EtwRecord) {
        let frames = match kernel::decode_clr_stack_walk(&rec.payload, rec.pointer_size) {
            Ok(f) => f,
            Err(e) => {
                log::debug!("ClrStackWalk on thread {}: {e}", rec.tid);
                self.stats.bad_stacks += 1;
                return;
            }
        };
        let target = self.pending.iter_mut().rev().find(|p| {
            p.thread == rec.tid && p.item.record.pid == rec.pid && !p.followed && p.item.record.is_clr()
        });
        match target {
            Some(p) if p.item.stack.is_empty() => {
                p.item.stack = frames;
                p.followed = true;
            }
            _ => self.stats.orphan_stacks += 1,
        }
    }

    fn attach_kernel(&mut self, rec: &EtwRecord) {
        let walk = match KernelStackWalk::decode(&rec.payload, rec.pointer_size) {
            Ok(w) => w,
            Err(e) => {
                log::debug!("StackWalk: {e}");
                self.stats.bad_stacks += 1;
                return;
            }
        };
        let at = match self.config.clock {
            Some(c) => c.to_filetime(walk.event_timestamp),
            None => i64::try_from(walk.event_timestamp).unwrap_or(i64::MAX),
        };
        let tol = self.config.tolerance_100ns;
        let best = self
            .pending
            .iter_mut()
            .filter(|p| p.thread == walk.thread && (walk.process == 0 || pid_matches(p, walk.process)))
            .map(|p| ((p.item.record.timestamp - at).abs(), p))
            .filter(|(d, _)| *d <= tol)
            .min_by_key(|(d, _)| *d);
        match best {
            Some((_, p)) => {
                p.item.stack.extend_from_slice(&walk.frames);
                if walk.process != 0 && walk.process != u32::MAX {
                    p.item.stack_process = Some(walk.process);
                }
            }
            None => self.stats.orphan_stacks += 1,
        }
    }

    fn release(&mut self, all: bool) -> Vec<Correlated> {
        let mut out = Vec::new();
        while let Some(front) = self.pending.front() {
            let expired = self.newest.saturating_sub(front.item.record.timestamp) > self.config.hold_100ns;
            if !(all || expired || self.pending.len() > self.config.max_pending) {
                break;
            }
            if let Some(p) = self.pending.pop_front() {
                out.push(p.item);
            }
        }
        out
    }
}

/// Kernel events carry the sampled thread in the payload; the header may say -1.
fn subject_thread(rec: &EtwRecord) -> u32 {
    if rec.provider == providers::KERNEL_PERF_INFO
        && rec.opcode == kernel::OPCODE_SAMPLED_PROFILE
        && let Ok(s) = SampledProfile::decode(&rec.payload, rec.pointer_size)
    {
        return s.thread_id;
    }
    rec.tid
}

/// SampledProfile headers do not always carry the process id; such events match any process.
fn pid_matches(p: &Pending, pid: u32) -> bool {
    let h = p.item.record.pid;
    h == pid || h == 0 || h == u32::MAX
}

#[cfg(test)]
mod tests {
    use super::*;
    use clr_events::Guid;

    fn rec(provider: Guid, id: u16, opcode: u8, pid: u32, tid: u32, ts: i64, payload: Vec<u8>) -> EtwRecord {
        EtwRecord { provider, event_id: id, opcode, version: 0, pid, tid, timestamp: ts, payload, pointer_size: 8, stack: None }
    }
    fn clr_event(tid: u32, ts: i64) -> EtwRecord {
        rec(providers::RUNTIME, 80, 1, 1, tid, ts, vec![1, 2, 3])
    }
    fn clr_walk(tid: u32, ts: i64, frames: &[u64]) -> EtwRecord {
        let mut p = vec![0u8; 4];
        p.extend_from_slice(&(frames.len() as u32).to_le_bytes());
        for f in frames {
            p.extend_from_slice(&f.to_le_bytes());
        }
        rec(providers::RUNTIME, kernel::CLR_STACK_WALK_ID, 82, 1, tid, ts, p)
    }
    fn sample(tid: u32, ts: i64) -> EtwRecord {
        let mut p = 0x1000u64.to_le_bytes().to_vec();
        p.extend_from_slice(&tid.to_le_bytes());
        p.extend_from_slice(&[1, 0, 0, 0]);
        rec(providers::KERNEL_PERF_INFO, 0, kernel::OPCODE_SAMPLED_PROFILE, u32::MAX, u32::MAX, ts, p)
    }
    fn kwalk(pid: u32, tid: u32, event_ts: u64, frames: &[u64]) -> EtwRecord {
        let mut p = event_ts.to_le_bytes().to_vec();
        p.extend_from_slice(&pid.to_le_bytes());
        p.extend_from_slice(&tid.to_le_bytes());
        for f in frames {
            p.extend_from_slice(&f.to_le_bytes());
        }
        rec(providers::KERNEL_STACK_WALK, 0, kernel::OPCODE_STACK_WALK, pid, tid, event_ts as i64 + 3, p)
    }
    fn run(c: &mut StackCorrelator, recs: Vec<EtwRecord>) -> Vec<Correlated> {
        let mut out = Vec::new();
        for r in recs {
            out.extend(c.push(r));
        }
        out.extend(c.finish());
        out
    }

    #[test]
    fn clr_stack_walk_attaches_to_the_preceding_event_of_its_thread() {
        let mut c = StackCorrelator::new(CorrelatorConfig::default());
        let out = run(
            &mut c,
            vec![
                clr_event(7, 100),
                clr_event(8, 101),           // another thread in between
                clr_walk(8, 102, &[0x80]),   // thread 8's stack
                clr_walk(7, 103, &[0x70, 0x71]), // thread 7's stack, after thread 8's event
                clr_event(7, 104),
                clr_event(7, 105),           // 104 is followed by 105: the next walk is 105's
                clr_walk(7, 106, &[0x75]),
            ],
        );
        let got: Vec<(u32, i64, Vec<u64>)> = out.iter().map(|c| (c.record.tid, c.record.timestamp, c.stack.clone())).collect();
        assert_eq!(
            got,
            vec![(7, 100, vec![0x70, 0x71]), (8, 101, vec![0x80]), (7, 104, vec![]), (7, 105, vec![0x75])]
        );
        assert_eq!(c.stats, CorrelatorStats::default());
    }

    #[test]
    fn a_walk_with_nothing_to_attach_to_is_counted_not_misattached() {
        let mut c = StackCorrelator::new(CorrelatorConfig::default());
        let out = run(&mut c, vec![clr_walk(7, 1, &[1]), clr_event(7, 2), clr_event(7, 3), clr_walk(9, 4, &[2])]);
        assert!(out.iter().all(|c| c.stack.is_empty()));
        assert_eq!(c.stats.orphan_stacks, 2);
        // A corrupt walk (count beyond the bytes) is counted as bad.
        let mut bad = clr_walk(7, 5, &[1]);
        bad.payload[4] = 200;
        let _ = run(&mut c, vec![clr_event(7, 4), bad]);
        assert_eq!(c.stats.bad_stacks, 1);
    }

    #[test]
    fn kernel_walks_match_by_thread_and_timestamp_and_concatenate_parts() {
        let mut c = StackCorrelator::new(CorrelatorConfig::default());
        let out = run(
            &mut c,
            vec![
                sample(20, 1000),
                sample(21, 1000),
                kwalk(5, 21, 1000, &[0xfff0]),       // kernel part of 21's sample
                kwalk(5, 20, 1000, &[0x20]),
                kwalk(5, 21, 1000, &[0x21, 0x22]),   // user part of 21's sample
                sample(20, 2000),
                kwalk(5, 20, 1500, &[0xbad]),        // no event of thread 20 at 1500
                kwalk(5, 20, 2000, &[0x23]),
            ],
        );
        let got: Vec<Vec<u64>> = out.iter().map(|c| c.stack.clone()).collect();
        assert_eq!(got, vec![vec![0x20], vec![0xfff0, 0x21, 0x22], vec![0x23]]);
        assert_eq!(c.stats.orphan_stacks, 1);
    }

    #[test]
    fn raw_clock_conversion_with_tolerance() {
        // QPC at 10 MHz anchored at FILETIME 5_000: QPC 1_000 ↔ 5_000, QPC 3_000 ↔ 7_000.
        let clock = RawClock { qpc_frequency: 10_000_000, qpc_anchor: 1_000, filetime_anchor: 5_000 };
        assert_eq!(clock.to_filetime(3_000), 7_000);
        let mut c = StackCorrelator::new(CorrelatorConfig { clock: Some(clock), tolerance_100ns: 5, ..Default::default() });
        let out = run(&mut c, vec![sample(3, 7_003), kwalk(0, 3, 3_000, &[1]), sample(3, 7_100), kwalk(0, 3, 3_090, &[2])]);
        assert_eq!(out[0].stack, vec![1]);
        assert_eq!(out[1].stack, Vec::<u64>::new(), "10 units off is beyond the tolerance");
        assert_eq!(c.stats.orphan_stacks, 1);
    }

    #[test]
    fn events_are_released_in_order_once_their_stack_cannot_come() {
        let mut c = StackCorrelator::new(CorrelatorConfig { hold_100ns: 50, ..Default::default() });
        assert!(c.push(clr_event(1, 0)).is_empty());
        assert!(c.push(clr_event(2, 40)).is_empty());
        let out = c.push(clr_event(3, 80));
        assert_eq!(out.iter().map(|c| c.record.tid).collect::<Vec<_>>(), vec![1]);
        let out = c.finish();
        assert_eq!(out.iter().map(|c| c.record.tid).collect::<Vec<_>>(), vec![2, 3]);
        let mut c = StackCorrelator::new(CorrelatorConfig { max_pending: 1, ..Default::default() });
        assert!(c.push(clr_event(1, 0)).is_empty());
        assert_eq!(c.push(clr_event(2, 0)).len(), 1);
    }
}
