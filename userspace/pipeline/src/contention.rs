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
            // Grows to the longest wait recorded: one sized for an hour up front held 188 KB
            // per process, twice (the live collector and its replacement), 7 MB of a
            // `record --all` with 20 processes, most of which never contend.
            histogram: Histogram::new(3).expect("valid histogram precision"),
            total_ns: 0.0,
            count: 0,
            unmatched_stops: 0,
        }
    }
}

impl Waits {
    /// Waits started and not stopped yet.
    pub fn open_len(&self) -> usize {
        self.open.len()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_histogram_grows_with_the_waits_and_answers_as_one_sized_for_an_hour() {
        let mut w = Waits::default();
        assert!(w.histogram.distinct_values() < 4096, "{} counts before any wait", w.histogram.distinct_values());
        let mut sized: Histogram<u64> = Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Waits from 1 µs to ~17 min, spread over the magnitudes.
            let ns = 1_000 + (x % (1u64 << (10 + i % 30)));
            w.start(1, i, 0, &[1], None);
            w.stop(1, i, ns, Some(ns as f64));
            sized.record(((ns as f64 / 1000.0).round() as u64).max(1)).unwrap();
        }
        for q in [0.5, 0.9, 0.99, 1.0] {
            assert_eq!(w.histogram.value_at_quantile(q), sized.value_at_quantile(q), "q {q}");
        }
        assert_eq!(w.histogram.max(), sized.max());
    }
}
