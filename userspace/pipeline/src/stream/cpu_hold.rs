//! CPU samples kept only while a request needs them (the agent). `profile?seconds=N` waits N
//! seconds from its start and reads the samples taken since, as Go's endpoint profiles from
//! the request on: no sample taken before a request began is ever read. So with
//! [`AggregatorConfig::cpu_on_request`](super::AggregatorConfig::cpu_on_request) a request
//! holds the buckets from its start ([`Aggregator::hold_cpu`]) until it is answered
//! ([`Aggregator::release_cpu`]) or its hold runs out (a client that went away), and samples no
//! hold covers go into no bucket (the process counters count them all the same). A rolling
//! window of every sample (120 s in the agent before) made the agent's memory follow how
//! many distinct stacks ran lately, and rebuilt a bucket's table every second.
use super::aggregate::Aggregator;

/// The pending requests' holds: (from, until), host monotonic ns.
#[derive(Debug, Default)]
pub(crate) struct CpuHolds(Vec<(u64, u64)>);

impl CpuHolds {
    /// How many holds are pending.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// Most holds pending at once: a request beyond it is answered all the same, from what the
/// others hold (its own samples may then be missing).
const MAX_HOLDS: usize = 64;

impl Aggregator {
    /// A request reads the CPU samples taken from `from_ns` on: keep them until it is
    /// answered ([`Self::release_cpu`]) or until `until_ns` (sources' clock), whichever comes
    /// first.
    pub fn hold_cpu(&mut self, from_ns: u64, until_ns: u64) {
        if self.cpu_holds.0.len() < MAX_HOLDS {
            self.cpu_holds.0.push((from_ns, until_ns));
        } else {
            *self.health.lost.entry("cpu-holds-full").or_insert(0) += 1;
        }
    }

    /// The request that held from `from_ns` was answered: its samples may go.
    pub fn release_cpu(&mut self, from_ns: u64) {
        if let Some(i) = self.cpu_holds.0.iter().position(|h| h.0 == from_ns) {
            self.cpu_holds.0.swap_remove(i);
        }
        self.drop_unheld_buckets();
    }

    /// Whether a CPU sample taken at `t` goes into a bucket: always without
    /// `cpu_on_request`, else when a pending request holds its second.
    pub(crate) fn cpu_wanted(&mut self, t: u64) -> bool {
        if !self.cfg.cpu_on_request {
            return true;
        }
        let now = self.now_ns;
        let before = self.cpu_holds.0.len();
        self.cpu_holds.0.retain(|h| h.1 > now);
        if self.cpu_holds.0.len() != before {
            self.drop_unheld_buckets();
        }
        let len = self.cfg.bucket_ns.max(1);
        self.cpu_holds.0.iter().any(|h| t / len * len >= h.0 / len * len)
    }

    /// Drops the buckets no pending request reads (all of them when none is pending).
    fn drop_unheld_buckets(&mut self) {
        if !self.cfg.cpu_on_request {
            return;
        }
        let len = self.cfg.bucket_ns.max(1);
        match self.cpu_holds.0.iter().map(|h| h.0 / len * len).min() {
            Some(from) => {
                while self.cpu.front().is_some_and(|b| b.start_ns < from) {
                    self.cpu.pop_front();
                }
            }
            None => self.cpu = Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::stream::{Aggregator, AggregatorConfig, Record, StackRecord};

    const S: u64 = 1_000_000_000;

    fn cpu(t: u64, leaf: u64) -> Record {
        Record::Cpu(StackRecord { pid: 7, tid: 8, comm: "w".into(), time_ns: t, kernel: Arc::from(vec![]), user: Arc::from(vec![leaf]), count: 1 })
    }

    fn kept(a: &Aggregator) -> Vec<u64> {
        a.cpu.iter().flat_map(|b| b.samples.keys().map(|k| k.4[0])).collect()
    }

    #[test]
    fn without_a_request_no_sample_is_kept_and_with_one_its_seconds_are() {
        let mut a = Aggregator::new(AggregatorConfig { cpu_on_request: true, ..AggregatorConfig::default() });
        a.absorb(cpu(10 * S, 1));
        assert!(kept(&a).is_empty(), "nobody asked");
        a.hold_cpu(11 * S + S / 2, 30 * S);
        // Its own second is kept whole (a profile reads whole buckets), earlier ones are not.
        for r in [cpu(11 * S - 1, 2), cpu(11 * S + 1, 3), cpu(12 * S, 4)] {
            a.absorb(r);
        }
        assert_eq!(kept(&a), vec![3, 4]);
        a.release_cpu(11 * S + S / 2);
        assert!(a.cpu.is_empty(), "answered: its buckets go");
        a.absorb(cpu(13 * S, 5));
        a.absorb(Record::Tick { time_ns: 14 * S });
        assert!(a.cpu.is_empty(), "no bucket, not even an empty one, without a request");
    }

    #[test]
    fn a_hold_nobody_answers_runs_out_and_the_other_holds_keep_theirs() {
        let mut a = Aggregator::new(AggregatorConfig { cpu_on_request: true, ..AggregatorConfig::default() });
        a.hold_cpu(10 * S, 15 * S);
        a.hold_cpu(12 * S, 40 * S);
        for r in [cpu(10 * S, 1), cpu(12 * S, 2), cpu(14 * S, 3)] {
            a.absorb(r);
        }
        assert_eq!(kept(&a), vec![1, 2, 3]);
        // The first hold's client went away: past its end, its second goes.
        a.absorb(cpu(16 * S, 4));
        assert_eq!(kept(&a), vec![2, 3, 4]);
        a.release_cpu(12 * S);
        assert!(a.cpu.is_empty());
    }

    #[test]
    fn a_rolling_window_keeps_every_sample_without_requests() {
        let mut a = Aggregator::new(AggregatorConfig::default());
        a.absorb(cpu(10 * S, 1));
        assert_eq!(kept(&a), vec![1]);
    }
}
