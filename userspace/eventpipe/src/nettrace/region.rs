//! Buffering and timestamp-sorting of the events of one sequence-point region.

/// One parsed event waiting to be handed out. Payload and stack are ranges into arenas.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    pub timestamp: i64,
    pub metadata_id: u32,
    pub sequence_number: u32,
    pub thread_id: u64,
    pub capture_thread_id: u64,
    pub processor_number: u32,
    pub payload_start: u32,
    pub payload_len: u32,
    pub stack_start: u32,
    pub stack_len: u32,
    /// 1 + index of the event's (activity, related activity) ids in [`Region::activities`];
    /// 0 when both are zero (most events), which keeps the record at 56 bytes.
    pub activity: u32,
}

/// A sorted run of not-yet-released events: `order[next..end]`.
#[derive(Debug, Clone, Copy)]
struct Run {
    next: u32,
    end: u32,
    /// Timestamp of the run's last event (what the next event must not be below to extend it).
    last: i64,
}

/// Most runs kept before they are collapsed into one (bounds the per-flush cost on input
/// that alternates timestamps).
const MAX_RUNS: usize = 64;

/// Up to this many runs a flush merges them head by head; more are sorted together.
const MERGE_SCAN_MAX: usize = 16;

/// The events of the current region in stream order, the not-yet-released ones as sorted runs
/// (each capture thread writes its events in time order, so the runs are long), and the
/// release order (`out`, indexes into `events`).
///
/// Releasing merges the runs' released prefixes: every run is sorted by (timestamp, index),
/// so a stable sort of their concatenation merges them (it finds the runs and merges
/// them pairwise, O(n log k)); a single run is copied as it is.
#[derive(Default)]
pub(crate) struct Region {
    pub(crate) events: Vec<Pending>,
    /// Timestamps of `events`, dense: what sorting and merging read.
    ts: Vec<i64>,
    /// Event indexes; runs are ranges of it.
    order: Vec<u32>,
    runs: Vec<Run>,
    /// (timestamp, index) of the events being released by a flush over many runs.
    scratch: Vec<(i64, u32)>,
    /// The run heads of a flush over a few runs, sorted.
    heads: Vec<((i64, u32), u32, u32, u32)>,
    /// The highest timestamp an IsSorted event vouched for since the last flush.
    watermark: Option<i64>,
    pub(crate) out: Vec<u32>,
    pub(crate) out_pos: usize,
    /// Payload bytes of every event in `events` (event block bodies, appended whole).
    pub(crate) payloads: Vec<u8>,
    /// Non-zero (activity, related activity) ids of the events.
    pub(crate) activities: Vec<([u8; 16], [u8; 16])>,
}

impl Region {
    /// The `activity` field for an event with these ids.
    #[inline]
    pub(crate) fn activity(&mut self, ids: ([u8; 16], [u8; 16])) -> u32 {
        if ids == ([0; 16], [0; 16]) {
            return 0;
        }
        if self.activities.last() != Some(&ids) {
            self.activities.push(ids);
        }
        // Bounded by the event count, which push() keeps below 4 G.
        u32::try_from(self.activities.len()).unwrap_or(u32::MAX)
    }

    /// The (activity, related activity) ids of an event.
    #[inline]
    pub(crate) fn activity_ids(&self, p: &Pending) -> &([u8; 16], [u8; 16]) {
        static NONE: ([u8; 16], [u8; 16]) = ([0; 16], [0; 16]);
        match p.activity {
            0 => &NONE,
            i => self.activities.get(i as usize - 1).unwrap_or(&NONE),
        }
    }

    /// Adds an event; false if the region already holds 4 G events.
    #[inline(always)]
    pub(crate) fn push(&mut self, p: Pending) -> bool {
        let (Ok(idx), Ok(_)) = (u32::try_from(self.events.len()), u32::try_from(self.order.len() + 1)) else {
            return false;
        };
        let ts = p.timestamp;
        let pos = self.order.len();
        match self.runs.last_mut() {
            // The usual case: the event extends the last run (its thread's, in time order).
            Some(r) if r.end as usize == pos && r.last <= ts => {
                r.end += 1;
                r.last = ts;
                self.order.push(idx);
            }
            _ => self.start_run(ts, idx),
        }
        self.events.push(p);
        self.ts.push(ts);
        true
    }

    /// Puts event `idx` (timestamp `ts`) in a new run, collapsing the runs first when there
    /// are too many.
    #[cold]
    #[inline(never)]
    fn start_run(&mut self, ts: i64, idx: u32) {
        if self.runs.len() >= MAX_RUNS {
            self.collapse();
            let pos = self.order.len();
            if let Some(r) = self.runs.last_mut().filter(|r| r.end as usize == pos && r.last <= ts) {
                r.end += 1;
                r.last = ts;
                self.order.push(idx);
                return;
            }
        }
        let pos = self.order.len() as u32;
        self.runs.push(Run { next: pos, end: pos + 1, last: ts });
        self.order.push(idx);
    }

    /// Merges every run into one: their remaining indexes, sorted, appended to `order`.
    fn collapse(&mut self) {
        let start = self.order.len();
        for r in std::mem::take(&mut self.runs) {
            self.order.extend_from_within(r.next as usize..r.end as usize);
        }
        let ts = &self.ts;
        self.order[start..].sort_by_key(|&i| (ts[i as usize], i));
        let end = self.order.len() as u32;
        if let Some(&i) = self.order[start..].last() {
            let last = self.ts[i as usize];
            self.runs.push(Run { next: start as u32, end, last });
        }
    }

    pub(crate) fn has_pending(&self) -> bool {
        !self.runs.is_empty()
    }

    /// Next ready event (index into `events`), in order.
    #[inline]
    pub(crate) fn next_ready(&mut self) -> Option<usize> {
        let i = *self.out.get(self.out_pos)?;
        self.out_pos += 1;
        Some(i as usize)
    }

    /// Called when every ready event was handed out: frees what nobody can reference any more.
    pub(crate) fn recycle(&mut self) {
        self.out.clear();
        self.out_pos = 0;
        if self.runs.is_empty() {
            self.events.clear();
            self.ts.clear();
            self.order.clear();
            self.payloads.clear();
            self.activities.clear();
        }
    }

    /// An IsSorted event at `ts`: nothing later in the stream is earlier. The release waits for
    /// [`Region::flush_sorted`] (the end of the block), which is what a release per event
    /// would hand out, merged once.
    #[inline]
    pub(crate) fn sorted_upto(&mut self, ts: i64) {
        self.watermark = Some(self.watermark.map_or(ts, |w| w.max(ts)));
    }

    /// Releases up to the watermark of the IsSorted events seen since the last flush.
    pub(crate) fn flush_sorted(&mut self) {
        if let Some(w) = self.watermark.take() {
            self.flush_upto(w);
        }
    }

    /// Makes every pending event ready (sequence point or end of stream).
    pub(crate) fn flush_all(&mut self) {
        self.watermark = None;
        self.flush_upto(i64::MAX);
    }

    /// Makes ready every pending event with a timestamp <= `watermark` (an IsSorted event
    /// guarantees no later event is earlier than it), merging the runs. Ties go to the event
    /// earlier in the stream.
    pub(crate) fn flush_upto(&mut self, watermark: i64) {
        let (order, ts) = (&self.order, &self.ts);
        // The released prefix of each run (runs are sorted, so a binary search finds it).
        let released = |r: &Run| -> u32 {
            let run = &order[r.next as usize..r.end as usize];
            r.next + run.partition_point(|&i| ts[i as usize] <= watermark) as u32
        };
        let mut nonempty = 0;
        let mut only = 0;
        for (k, r) in self.runs.iter().enumerate() {
            if released(r) > r.next {
                nonempty += 1;
                only = k;
            }
        }
        if nonempty == 1 {
            let r = &mut self.runs[only];
            let upto = released(r);
            self.out.extend_from_slice(&order[r.next as usize..upto as usize]);
            r.next = upto;
        } else if nonempty > 1 && self.runs.len() <= MERGE_SCAN_MAX {
            // k-way merge over the run heads kept sorted by (timestamp, index): the first run
            // hands out events while they sort before the second head (one comparison per
            // event), then its new head is moved to its place among the others.
            let key = |p: u32| (ts[order[p as usize] as usize], order[p as usize]);
            // (head key, head position, end of the released prefix, run)
            let heads = &mut self.heads;
            heads.clear();
            for (k, r) in self.runs.iter().enumerate() {
                let upto = released(r);
                if upto > r.next {
                    heads.push((key(r.next), r.next, upto, k as u32));
                }
            }
            heads.sort_unstable();
            let total: usize = heads.iter().map(|h| (h.2 - h.1) as usize).sum();
            self.out.reserve(total);
            while let Some(&(_, from, upto, k)) = heads.first() {
                let mut p = from + 1;
                // The key of the event at `p` once the stretch ends before `upto`.
                let mut next_key = None;
                match heads.get(1) {
                    Some(&(limit, ..)) => {
                        // Events one by one: a leading stretch is a few events on average,
                        // too short for a copy call to pay.
                        self.out.push(order[from as usize]);
                        for &i in &order[p as usize..upto as usize] {
                            let k = (ts[i as usize], i);
                            if k >= limit {
                                next_key = Some(k);
                                break;
                            }
                            self.out.push(i);
                            p += 1;
                        }
                    }
                    None => {
                        p = upto;
                        self.out.extend_from_slice(&order[from as usize..p as usize]);
                    }
                }
                self.runs[k as usize].next = p;
                if p == upto {
                    heads.remove(0);
                } else {
                    let head = (next_key.unwrap_or_else(|| key(p)), p, upto, k);
                    // Its new place: after every head that sorts before it.
                    let mut at = 0;
                    while at + 1 < heads.len() && heads[at + 1].0 < head.0 {
                        heads[at] = heads[at + 1];
                        at += 1;
                    }
                    heads[at] = head;
                }
            }
        } else if nonempty > 1 {
            self.scratch.clear();
            for r in &mut self.runs {
                let upto = released(r);
                self.scratch.extend(order[r.next as usize..upto as usize].iter().map(|&i| (ts[i as usize], i)));
                r.next = upto;
            }
            // Stable sort: finds the sorted runs in the concatenation and merges them.
            self.scratch.sort();
            self.out.extend(self.scratch.iter().map(|&(_, i)| i));
        }
        self.runs.retain(|r| r.next < r.end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ts: i64) -> Pending {
        Pending {
            timestamp: ts,
            metadata_id: 1,
            sequence_number: 0,
            thread_id: 0,
            capture_thread_id: 0,
            processor_number: 0,
            payload_start: 0,
            payload_len: 0,
            stack_start: 0,
            stack_len: 0,
            activity: 0,
        }
    }

    fn drain(r: &mut Region) -> Vec<(i64, usize)> {
        let mut v = Vec::new();
        while let Some(i) = r.next_ready() {
            v.push((r.events[i].timestamp, i));
        }
        r.recycle();
        v
    }

    #[test]
    fn runs_merge_stably_and_watermarks_release_prefixes() {
        let mut r = Region::default();
        for ts in [10, 20, 30, 5, 20, 40, 20] {
            assert!(r.push(ev(ts)));
        }
        r.flush_upto(20);
        assert_eq!(drain(&mut r), [(5, 3), (10, 0), (20, 1), (20, 4), (20, 6)]);
        r.push(ev(35));
        r.flush_all();
        assert_eq!(drain(&mut r), [(30, 2), (35, 7), (40, 5)]);
        assert!(!r.has_pending());
        assert!(r.events.is_empty());
    }

    #[test]
    fn many_runs_collapse_and_stay_sorted() {
        let mut r = Region::default();
        let mut x = 12345u64;
        let mut want = Vec::new();
        for i in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let ts = (x % 1000) as i64;
            r.push(ev(ts));
            want.push((ts, i));
            if i % 700 == 0 {
                r.flush_upto(300);
            }
        }
        r.flush_all();
        let got = drain(&mut r);
        // Output: sorted within each release batch; overall a permutation of the input.
        let mut g = got.clone();
        g.sort();
        want.sort();
        assert_eq!(g.len(), want.len());
        assert!(g == want, "not a permutation of the input");
        // The last batch (flush_all) is sorted.
        let tail = &got[got.len() - 700..];
        assert!(tail.windows(2).all(|w| w[0] <= w[1]), "last batch not sorted");
        assert!(r.runs.len() <= MAX_RUNS);
    }

    /// Every flush hands out exactly the pending events at or below the watermark, sorted by
    /// (timestamp, stream order), whatever the number of runs (head merge, sort, collapse).
    #[test]
    fn flushes_match_a_sort_of_the_pending_events() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut rnd = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for threads in [1u64, 2, 3, 8, 16, 40, 100] {
            let mut r = Region::default();
            let mut pending: Vec<(i64, usize)> = Vec::new();
            let mut clocks = vec![0i64; threads as usize];
            let mut n = 0;
            for step in 0..4000 {
                // Runs: a thread writes a burst of its own increasing timestamps.
                let t = rnd(threads) as usize;
                for _ in 0..1 + rnd(20) {
                    clocks[t] += rnd(5) as i64;
                    assert!(r.push(ev(clocks[t])));
                    pending.push((clocks[t], n));
                    n += 1;
                }
                if step % 37 == 0 {
                    let w = *clocks.iter().min().unwrap_or(&0) + rnd(3) as i64;
                    r.sorted_upto(w);
                    r.flush_sorted();
                    let mut want: Vec<(i64, usize)> = pending.iter().copied().filter(|p| p.0 <= w).collect();
                    want.sort();
                    pending.retain(|p| p.0 > w);
                    assert_eq!(drain(&mut r), want, "{threads} threads, step {step}");
                    if pending.is_empty() {
                        n = 0; // the region starts over once nothing is pending
                    }
                }
            }
            r.flush_all();
            pending.sort();
            assert_eq!(drain(&mut r), pending);
            assert!(r.events.is_empty());
        }
    }
}
