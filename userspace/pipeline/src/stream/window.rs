//! What a live view (`clrprobe top`) reads from the aggregator once a second: the CPU samples
//! of the one-second buckets completed since it last asked (every sample taken before a
//! bucket's end has arrived once a tick past it came), and each process's event report.
use std::sync::Arc;

use super::aggregate::Aggregator;

/// (pid, kernel stack, user stack, count), stacks leaf first.
pub type CpuStack = (u32, Arc<[u64]>, Arc<[u64]>, u64);

/// CPU samples of buckets completed after a given one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuWindow {
    /// The newest complete bucket's start (None: none yet; ask again with the last one seen).
    pub last_start_ns: Option<u64>,
    /// Complete buckets covered (seconds with `bucket_ns` of 1 s), counting seconds without
    /// samples between the first and the last.
    pub buckets: u64,
    /// (pid, kernel stack, user stack, count), leaf first, samples of every thread summed.
    pub samples: Vec<CpuStack>,
}

impl Aggregator {
    /// A recording ends at `end_ns` (host monotonic): CPU samples and off-CPU intervals
    /// stamped later are left out, and runtime events stamped later make no samples (their
    /// method names still count: the rundown comes after the end).
    pub fn end_samples_at(&mut self, end_ns: u64) {
        self.samples_end_ns = Some(end_ns);
        self.cfg.events_end_ns = Some(end_ns);
        for p in self.procs.values_mut() {
            p.events.end_mono_ns = Some(end_ns.min(i64::MAX as u64) as i64);
        }
    }

    /// Each followed process's event report with its GC figures completed as `record` completes
    /// them: the window (`window_ns`, for the paused share) and the GC CPU from the CPU times
    /// the sources read from /proc since they first did (dedicated GC threads, the process)
    /// and the CPU samples inside the process's own GC pauses (user threads).
    pub fn completed_event_reports(&self, window_ns: u64) -> Vec<(u32, crate::EventReport)> {
        self.procs.values().map(|p| (p.info.pid, completed_report(p, window_ns))).collect()
    }

    /// The CPU samples of the complete buckets that start after `after_ns` (None: every
    /// complete bucket kept). A bucket is complete once a tick at or past its end arrived.
    pub fn complete_cpu(&self, after_ns: Option<u64>) -> CpuWindow {
        let len = self.cfg.bucket_ns.max(1);
        // The bucket holding the last tick is still filling.
        let open_start = self.sampled_ns / len * len;
        type Key<'a> = (u32, &'a Arc<[u64]>, &'a Arc<[u64]>);
        let mut merged: std::collections::HashMap<Key<'_>, u64> = Default::default();
        let mut first = None;
        let mut last = None;
        for b in self.cpu.iter().filter(|b| b.start_ns < open_start && after_ns.is_none_or(|a| b.start_ns > a)) {
            first.get_or_insert(b.start_ns);
            last = Some(b.start_ns);
            for ((pid, _, _, kernel, user), n) in &b.samples {
                *merged.entry((*pid, kernel, user)).or_insert(0) += n;
            }
        }
        // Seconds with no sample have no bucket: they are covered all the same.
        let from = match after_ns {
            Some(a) => a.saturating_add(len),
            None => first.unwrap_or(open_start),
        };
        let buckets = open_start.saturating_sub(from) / len;
        let mut samples: Vec<_> = merged.into_iter().map(|((p, k, u), n)| (p, k.clone(), u.clone(), n)).collect();
        samples.sort_unstable();
        CpuWindow { last_start_ns: Some(open_start.saturating_sub(len)).filter(|_| buckets > 0).or(after_ns).or(last), buckets, samples }
    }
}

/// The event report of `p` completed as [`Aggregator::completed_event_reports`] says.
pub(crate) fn completed_report(p: &super::aggregate::Proc, window_ns: u64) -> crate::EventReport {
    let mut r = p.events.report();
    r.gc.set_window(window_ns);
    if p.cpu_first_ns.is_some() {
        let used = |t: &(Arc<str>, u64, u64)| t.2.saturating_sub(t.1);
        let mut gc: Vec<(u64, String, u64)> =
            p.threads.iter().filter(|(_, t)| super::is_gc_thread(&t.0)).map(|(tid, t)| (u64::from(*tid), t.0.to_string(), used(t))).collect();
        gc.sort();
        let cpu = crate::GcCpu {
            source: "/proc task stat".into(),
            gc_threads_ns: gc.iter().map(|t| t.2).sum(),
            user_thread_gc_ns: p.counters.user_threads_gc_cpu_ns,
            // Over the same window as the GC threads' times (from the first read).
            process_ns: (p.counters.cpu_user_ns + p.counters.cpu_system_ns).saturating_sub(p.cpu_first_ns.unwrap_or(0)),
            threads: gc,
        };
        r.gc.cpu_proc = Some(cpu.clone());
        r.gc.cpu = Some(cpu);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{AggregatorConfig, Record, StackRecord};

    fn cpu(t: u64, leaf: u64) -> Record {
        Record::Cpu(StackRecord { pid: 7, tid: 8, comm: "w".into(), time_ns: t, kernel: Arc::from(vec![]), user: Arc::from(vec![leaf]), count: 1 })
    }

    #[test]
    fn samples_after_a_recordings_end_are_left_out() {
        let mut a = Aggregator::new(AggregatorConfig::default());
        a.end_samples_at(1_500);
        for r in [cpu(1_000, 1), cpu(1_500, 2), cpu(1_501, 3), cpu(0, 4)] {
            a.absorb(r);
        }
        let kept: Vec<u64> = a.cpu.iter().flat_map(|b| b.samples.keys().map(|k| k.4[0])).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        assert_eq!(kept, vec![1, 2, 4], "untimed samples are kept, later ones are not");
    }

    #[test]
    fn off_cpu_intervals_count_up_to_a_recordings_end() {
        let mut a = Aggregator::new(AggregatorConfig::default());
        a.absorb(Record::Started(crate::stream::ProcessInfo { pid: 7, ..Default::default() }));
        a.end_samples_at(1_500);
        let off = |t: u64, ns: u64| Record::OffCpu(StackRecord { pid: 7, tid: 8, comm: "w".into(), time_ns: t, kernel: Arc::from(vec![]), user: Arc::from(vec![1]), count: ns });
        for r in [off(1_000, 200), off(1_400, 400), off(1_600, 100)] {
            a.absorb(r);
        }
        assert_eq!(a.procs[&7].counters.offcpu_ns, 200 + 100, "the second cut at the end, the third left out");
    }

    #[test]
    fn each_complete_second_is_read_once_and_the_filling_one_waits() {
        const S: u64 = 1_000_000_000;
        let mut a = Aggregator::new(AggregatorConfig::default());
        // Seconds 10 and 11 have samples, 12 is filling when the tick says 12.5 s.
        for r in [cpu(10 * S + 1, 1), cpu(10 * S + 2, 1), cpu(11 * S, 2), cpu(12 * S + 3, 3), Record::Tick { time_ns: 12 * S + S / 2 }] {
            a.absorb(r);
        }
        let w = a.complete_cpu(None);
        assert_eq!((w.last_start_ns, w.buckets), (Some(11 * S), 2));
        assert_eq!(w.samples.iter().map(|s| (s.2[0], s.3)).collect::<Vec<_>>(), vec![(1, 2), (2, 1)]);
        // Nothing new until the next tick passes the end of second 12.
        let again = a.complete_cpu(w.last_start_ns);
        assert_eq!((again.last_start_ns, again.buckets, again.samples.len()), (Some(11 * S), 0, 0));
        // Second 13 had no sample: counted as covered.
        a.absorb(Record::Tick { time_ns: 14 * S + 1 });
        let next = a.complete_cpu(again.last_start_ns);
        assert_eq!((next.last_start_ns, next.buckets), (Some(13 * S), 2));
        assert_eq!(next.samples.iter().map(|s| (s.2[0], s.3)).collect::<Vec<_>>(), vec![(3, 1)]);
    }
}
