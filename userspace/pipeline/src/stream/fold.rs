//! A long host-wide recording (`record --all`) lets each followed process go once it has
//! exited and its last records have arrived: its profile (every kind, at their times) and its
//! completed event report are taken out, and every piece of state held for it goes (its CPU
//! samples in the buckets, its timed samples, its events), so memory follows the processes
//! running, not every process seen.
use clrprobe_profile::{Profile, ProfileError};

use super::{
    aggregate::Aggregator,
    combined::CombinedOptions,
    records::ProcessInfo,
    snapshot::Namer,
};
use crate::EventReport;

/// A process let go: what a recording keeps of it.
pub struct Taken {
    pub info: ProcessInfo,
    /// Every kind of its samples, at their times, as [`Aggregator::combined_profile`] has them.
    pub profile: Profile,
    /// Its event report, completed over `window_ns` (see [`Aggregator::completed_event_reports`]).
    pub report: EventReport,
    /// Events read, events the runtime dropped, JIT methods.
    pub events: u64,
    pub dropped_events: u64,
    pub jit_methods: u64,
}

/// A process's last records have all arrived this long after its exit (the sources read its
/// stream to its end before they announce the exit; its timed samples are checked against
/// its GC pauses at the first tick a second after it).
const SETTLED_NS: u64 = 1_000_000_000;

impl Aggregator {
    /// Followed processes that exited long enough ago that every record of theirs has arrived.
    pub fn settled_exits(&self) -> Vec<u32> {
        let now = self.now_ns;
        self.procs.values().filter(|p| p.exited_at.is_some_and(|x| now >= x.saturating_add(SETTLED_NS))).map(|p| p.info.pid).collect()
    }

    /// Takes `pid` out (None: not followed): its profile named by `namer`, its report
    /// completed over `window_ns`; forgets everything held for it.
    pub fn take_process(&mut self, pid: u32, o: &CombinedOptions, window_ns: u64, namer: &mut dyn Namer) -> Result<Option<Taken>, ProfileError> {
        let Some(p) = self.procs.get_mut(&pid) else { return Ok(None) };
        // Its event samples' threads named as the recording's end names them.
        for (tid, t) in &p.threads {
            p.events.threads.set_name(pid, u64::from(*tid), t.0.to_string());
        }
        for k in self.times.cpu.keys().iter().chain(self.times.offcpu.keys()).filter(|k| k.0 == pid) {
            if p.events.threads.name(pid, u64::from(k.1)).is_none() {
                p.events.threads.set_name(pid, u64::from(k.1), k.2.to_string());
            }
        }
        let profile = self.combined_of(o, namer, Some(pid))?;
        let Some(p) = self.procs.remove(&pid) else { return Ok(None) };
        let report = super::window::completed_report(&p, window_ns);
        for b in &mut self.cpu {
            b.samples.retain(|k, _| k.0 != pid);
        }
        self.times.cpu.remove_pid(pid);
        self.times.offcpu.remove_pid(pid);
        let c = &p.counters;
        Ok(Some(Taken { profile, report, events: c.events, dropped_events: c.dropped_events, jit_methods: c.jit_methods, info: p.info }))
    }
}

impl Aggregator {
    /// Takes the CPU samples of processes that are not followed (exited: every sample of
    /// theirs has arrived) out of the buckets, summed per stack key.
    pub fn take_unfollowed(&mut self, pids: &std::collections::HashSet<u32>) -> Vec<(super::StackKey, u64)> {
        let mut taken: std::collections::HashMap<super::StackKey, u64> = std::collections::HashMap::new();
        for b in &mut self.cpu {
            for (k, n) in b.samples.extract_if(|k, _| pids.contains(&k.0) && !self.procs.contains_key(&k.0)) {
                *taken.entry(k).or_insert(0) += n;
            }
        }
        let mut out: Vec<_> = taken.into_iter().collect();
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use clrprobe_profile::{Frame, FrameKind};

    use crate::stream::{Aggregator, AggregatorConfig, CombinedOptions, ProcessInfo, Record, StackRecord, TestNames as Names};

    fn sample(pid: u32, t: u64, leaf: u64) -> Record {
        Record::Cpu(StackRecord { pid, tid: pid + 1, comm: "main".into(), time_ns: t, kernel: Arc::from(vec![]), user: Arc::from(vec![leaf]), count: 1 })
    }

    #[test]
    fn an_exited_process_is_taken_out_with_its_samples_and_the_others_stay() {
        let cfg = AggregatorConfig { keep_times: true, buckets: usize::MAX, exited_grace_ns: u64::MAX, ..AggregatorConfig::default() };
        let mut a = Aggregator::new(cfg);
        for pid in [7, 8] {
            a.absorb(Record::Started(ProcessInfo { pid, name: format!("app{pid}"), ..ProcessInfo::default() }));
        }
        for r in [sample(7, 2_000, 1), sample(8, 2_100, 2), sample(7, 2_200, 1), sample(9, 2_300, 3), Record::Exited { pid: 7, time_ns: 3_000 }, Record::Tick { time_ns: 3_000 }] {
            a.absorb(r);
        }
        assert!(a.settled_exits().is_empty(), "not a second after its exit yet");
        a.absorb(Record::Tick { time_ns: 1_000_003_000 });
        assert_eq!(a.settled_exits(), vec![7]);
        let o = CombinedOptions { start_mono_ns: 1_000, start_unix_ns: 5, duration_ns: 3_000, cpu: true, offcpu: false, gc_root: Frame::new("GC", "", FrameKind::Synthetic), thread_roots: false };
        let before = a.combined_profile(&o, &mut Names).unwrap();
        let t = a.take_process(7, &o, 3_000, &mut Names).unwrap().expect("followed");
        assert_eq!(t.info.name, "app7");
        let times: Vec<Option<u64>> = t.profile.samples().map(|s| s.timestamp_ns).collect();
        assert_eq!(times, vec![Some(1_000), Some(1_200)], "its samples at their times, only its own");
        assert!(!a.follows(7) && a.settled_exits().is_empty());
        assert_eq!(a.timed_cpu().count(), 1, "the other process's timed sample stays");
        let after = a.combined_profile(&o, &mut Names).unwrap();
        let pids = |p: &clrprobe_profile::Profile| p.samples().map(|s| p.labels(s.labels).unwrap().pid.unwrap()).collect::<Vec<_>>();
        assert_eq!(pids(&before).iter().filter(|&&p| p != 7).count(), pids(&after).len());
        assert!(!pids(&after).contains(&7));
        assert!(a.take_process(7, &o, 3_000, &mut Names).unwrap().is_none());
        // Not followed: its samples taken out summed, a followed one's stay.
        let taken = a.take_unfollowed(&[9, 8].into());
        assert_eq!(taken.iter().map(|(k, n)| (k.0, *n)).collect::<Vec<_>>(), vec![(9, 1)]);
        assert_eq!(pids(&a.combined_profile(&o, &mut Names).unwrap()), vec![8]);
    }
}
