//! Per-process counters behind `/metrics`, each the sum of what the runtime's events say:
//! exceptions by type (ExceptionThrown), collections by condemned generation (GCStart),
//! pause time (GCSuspendEEBegin → GCRestartEEEnd of the suspending thread, from the GC
//! timeline), allocated bytes (the runtime's `alloc-rate` counter, or AllocationTick
//! amounts), lock contentions (ContentionStart) and their wait (ContentionStop), JIT-compiled
//! methods (MethodLoad or MethodLoadVerbose).
use std::collections::BTreeMap;

use clr_events::ClrEvent;

/// Upper bounds of the GC pause histogram, seconds.
pub const PAUSE_BUCKETS_S: [f64; 12] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    pub exceptions: BTreeMap<String, u64>,
    /// Condemned generation → collections.
    pub gc_collections: BTreeMap<u32, u64>,
    pub gc_pause_ns: u64,
    /// Pauses per bucket of [`PAUSE_BUCKETS_S`] (not cumulative), then +Inf.
    pub gc_pause_buckets: [u64; PAUSE_BUCKETS_S.len() + 1],
    pub gc_pauses: u64,
    /// Sum of AllocationTick amounts (100 KB granularity; a sample only when allocation
    /// events are duty-cycled).
    pub alloc_bytes: u64,
    /// Sum of the runtime's `alloc-rate` increments (`GC.GetTotalAllocatedBytes()` over each
    /// counter interval): exact bytes allocated while followed, up to the last poll.
    pub alloc_counter_bytes: u64,
    pub contentions: u64,
    pub contention_ns: u64,
    pub jit_methods: u64,
    /// From the OS (cumulative since the process started).
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    /// CPU time of the dedicated GC threads while followed.
    pub gc_threads_cpu_ns: u64,
    /// CPU samples of user threads inside their own GC pauses (workstation / foreground GC),
    /// as nanoseconds (samples × period).
    pub user_threads_gc_cpu_ns: u64,
    pub offcpu_ns: u64,
    pub cpu_samples: u64,
    pub dropped_events: u64,
    /// Thread-pool threads and queued work items at the runtime's last counter poll
    /// (System.Runtime `threadpool-thread-count`, `threadpool-queue-length`).
    pub thread_pool_threads: Option<u64>,
    pub thread_pool_queue: Option<u64>,
    /// Work items completed while followed (sum of `threadpool-completed-items-count`).
    pub thread_pool_completed: u64,
    pub events: u64,
    pub decode_errors: u64,
    /// An exception's type decoded, kept for the next (not a counter: equal whatever it
    /// holds).
    type_name: Scratch,
}

/// A reusable buffer that every other one equals (so [`Counters`] compare by their values):
/// the last exception type decoded and its UTF-16 bytes (a busy app throws the same type
/// again: not decoded again).
#[derive(Debug, Clone, Default)]
struct Scratch {
    raw: Vec<u8>,
    name: String,
}

impl PartialEq for Scratch {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Counters {
    pub fn on_event(&mut self, event: &ClrEvent<'_>) {
        self.events += 1;
        match event {
            ClrEvent::ExceptionThrown(e) => {
                // A known type is looked up through a buffer kept for the next event.
                let Scratch { raw, name: ty } = &mut self.type_name;
                if raw[..] != *e.exception_type.as_bytes() {
                    raw.clear();
                    raw.extend_from_slice(e.exception_type.as_bytes());
                    ty.clear();
                    e.exception_type.push_lossy(ty);
                }
                match self.exceptions.get_mut(ty.as_str()) {
                    Some(n) => *n += 1,
                    None => {
                        self.exceptions.insert(ty.clone(), 1);
                    }
                }
            }
            ClrEvent::GcStart(s) => *self.gc_collections.entry(s.depth.unwrap_or(0)).or_insert(0) += 1,
            ClrEvent::AllocationTick(t) => self.alloc_bytes += t.allocation_amount64.unwrap_or(u64::from(t.allocation_amount)),
            ClrEvent::ContentionStart(_) => self.contentions += 1,
            // The runtime sends one of the two per method: Verbose while any session asks for
            // the provider at Verbose (the allocation slices), else the one without names.
            ClrEvent::MethodLoadVerbose(_) | ClrEvent::MethodLoad(_) => self.jit_methods += 1,
            _ => {}
        }
    }

    /// One EventCounter value (the counters the metrics use; others are ignored).
    pub fn on_counter(&mut self, name: &str, v: u64) {
        match name {
            "threadpool-thread-count" => self.thread_pool_threads = Some(v),
            "threadpool-queue-length" => self.thread_pool_queue = Some(v),
            "threadpool-completed-items-count" => self.thread_pool_completed += v,
            "alloc-rate" => self.alloc_counter_bytes += v,
            _ => {}
        }
    }

    pub fn on_pause(&mut self, ns: u64) {
        self.gc_pause_ns += ns;
        self.gc_pauses += 1;
        let s = ns as f64 / 1e9;
        let i = PAUSE_BUCKETS_S.iter().position(|&b| s <= b).unwrap_or(PAUSE_BUCKETS_S.len());
        self.gc_pause_buckets[i] += 1;
    }
}
