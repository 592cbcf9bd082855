//! Pairing ContentionStart/Stop per thread. The wait is ContentionStop_V1's DurationNs when
//! present, else the time between the two events (runtimes before .NET 5 have no duration).
use std::{collections::HashMap, sync::Arc};

use hdrhistogram::Histogram;

#[derive(Debug)]
pub struct Wait {
    /// When the wait began (ContentionStart's time, source clock).
    pub start_ns: u64,
    pub stack: Arc<[u64]>,
    pub owner: Option<u64>,
    pub duration_ns: f64,
}

#[derive(Debug)]
struct Open {
    start_ns: u64,
    stack: Arc<[u64]>,
    owner: Option<u64>,
}

#[derive(Debug)]
pub struct Waits {
    open: HashMap<(u32, u64), Open>,
    /// Wait durations in microseconds.
    pub histogram: Histogram<u64>,
    pub total_ns: f64,
    pub count: u64,
    /// Stops without a start (session began mid-wait).
    pub unmatched_stops: u64,
}

impl Default for Waits {
    fn default() -> Self {
        Self {
            open: HashMap::new(),
            histogram: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds"),
            total_ns: 0.0,
            count: 0,
            unmatched_stops: 0,
        }
    }
}

impl Waits {
    pub fn start(&mut self, pid: u32, tid: u64, time_ns: u64, stack: &[u64], owner: Option<u64>) {
        self.open.insert((pid, tid), Open { start_ns: time_ns, stack: Arc::from(stack), owner });
    }

    pub fn stop(&mut self, pid: u32, tid: u64, time_ns: u64, duration_ns: Option<f64>) -> Option<Wait> {
        let Some(open) = self.open.remove(&(pid, tid)) else {
            self.unmatched_stops += 1;
            return None;
        };
        let d = duration_ns.filter(|d| *d > 0.0).unwrap_or_else(|| time_ns.saturating_sub(open.start_ns) as f64);
        self.total_ns += d;
        self.count += 1;
        let _ = self.histogram.record(((d / 1000.0).round() as u64).max(1));
        Some(Wait { start_ns: open.start_ns, stack: open.stack, owner: open.owner, duration_ns: d })
    }
}
