//! Buffering and timestamp-sorting of the events of one sequence-point region.

use super::{
    keep::{Peak, TRIM_EVERY},
    merge::{Merger, Stamped},
};

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

impl Stamped for Pending {
    #[inline(always)]
    fn stamp(&self) -> i64 {
        self.timestamp
    }
}

/// What [`Region::recycle`] freed of the reader's payload arena …
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Freed {
    /// Every byte.
    All,
    /// This many bytes at its front (events still wait).
    Front(usize),
}

/// … and whether the region's buffers were cut back (the reader then trims its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recycled {
    pub freed: Freed,
    pub trimmed: bool,
}

/// A sorted run of not-yet-released events: `events[next..end]`.
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
/// Events handed out that a region with events still waiting drops from its front (when they
/// are also at least half of it). At 4096 a busy session's event list (56 bytes an event) and
/// payload arena held 4–8k events: blocks of 450–800 KB each, their own mappings, resident as
/// far as they were ever filled.
const COMPACT_MIN: usize = 1024;

/// The events of the current region in stream order, the not-yet-released ones as sorted runs
/// (each capture thread writes its events in time order, so the runs are long: a run is a
/// range of `events`), and the release order (`out`, indexes into `events`). Events are
/// appended as they are parsed; they are cut into runs once a block is parsed
/// ([`Region::index_runs`], a scan of the timestamps that the loop over headers is spared).
///
/// Releasing merges the runs' released prefixes by (timestamp, index) (see [`Merger`]); a
/// single run is handed out as it is.
#[derive(Default)]
pub(crate) struct Region {
    pub(crate) events: Vec<Pending>,
    /// `events[..indexed]` are in `runs` (or were released).
    indexed: usize,
    runs: Vec<Run>,
    /// The released prefixes of the runs being flushed, as index ranges.
    released: Vec<(u32, u32)>,
    merger: Merger,
    /// (timestamp, index) of the events being released when their keys do not pack.
    scratch: Vec<(i64, u32)>,
    /// The highest timestamp an IsSorted event vouched for since the last flush.
    watermark: Option<i64>,
    pub(crate) out: Vec<u32>,
    pub(crate) out_pos: usize,
    /// Non-zero (activity, related activity) ids of the events.
    pub(crate) activities: Vec<([u8; 16], [u8; 16])>,
    /// The buffers' largest lengths since they were last cut back (see [`super::keep`]), and
    /// the recycles since.
    peaks: [Peak; 4],
    recycles: u32,
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
        if self.events.len() >= u32::MAX as usize {
            return false;
        }
        self.events.push(p);
        true
    }

    /// Puts the events added since the last call into runs: each extends the last run when it
    /// follows it in the stream and is not earlier, else starts one. Collapses the runs when
    /// there are too many.
    pub(crate) fn index_runs(&mut self) {
        let n = self.events.len();
        let mut i = self.indexed;
        while i < n {
            // The stretch from i on that does not go back in time.
            let from = i;
            let rest = &self.events[i..];
            let len = 1 + rest.windows(2).take_while(|w| w[1].timestamp >= w[0].timestamp).count();
            i += len;
            let last = rest[len - 1].timestamp;
            // Below u32::MAX: push() keeps the count there.
            let (from, end) = (from as u32, i as u32);
            let first = rest[0].timestamp;
            match self.runs.last_mut() {
                Some(r) if r.end == from && r.last <= first => {
                    r.end = end;
                    r.last = last;
                }
                _ => self.runs.push(Run { next: from, end, last }),
            }
        }
        self.indexed = n;
        if self.runs.len() > MAX_RUNS {
            self.collapse();
        }
    }

    /// Merges every run into one: the pending events, sorted by (timestamp, index), take the
    /// place of everything from the first pending event on. Events there that are not pending
    /// were handed out, so nothing refers to them: the reader adds events only once every ready
    /// one was handed out. (While ready events wait, the sorted events are appended instead.)
    fn collapse(&mut self) {
        let Some(lo) = self.runs.iter().map(|r| r.next).min() else {
            return;
        };
        let pending: usize = self.runs.iter().map(|r| (r.end - r.next) as usize).sum();
        let keep = if self.out_pos < self.out.len() { self.events.len() } else { lo as usize };
        if keep + pending >= u32::MAX as usize {
            return;
        }
        self.scratch.clear();
        for r in std::mem::take(&mut self.runs) {
            let run = &self.events[r.next as usize..r.end as usize];
            self.scratch.extend(run.iter().zip(r.next..).map(|(e, i)| (e.timestamp, i)));
        }
        // Stable sort: finds the sorted runs in the concatenation and merges them.
        self.scratch.sort();
        let moved: Vec<Pending> = self.scratch.iter().map(|&(_, i)| self.events[i as usize]).collect();
        self.events.truncate(keep);
        self.events.extend_from_slice(&moved);
        self.indexed = self.events.len();
        if let Some(&(last, _)) = self.scratch.last() {
            // Checked above: the length fits.
            let end = self.events.len() as u32;
            self.runs.push(Run { next: keep as u32, end, last });
        }
    }

    pub(crate) fn has_pending(&self) -> bool {
        !self.runs.is_empty() || self.indexed < self.events.len()
    }

    /// Ready events not yet handed out.
    #[inline]
    pub(crate) fn ready(&self) -> usize {
        self.out.len().saturating_sub(self.out_pos)
    }

    /// Next ready event (index into `events`), in order.
    #[inline]
    pub(crate) fn next_ready(&mut self) -> Option<usize> {
        let i = *self.out.get(self.out_pos)?;
        self.out_pos += 1;
        Some(i as usize)
    }

    /// Called when every ready event was handed out: frees what nobody can reference any more
    /// (what the reader frees in its payload arena is returned). Every [`TRIM_EVERY`] recycles
    /// its buffers are cut back to the most they held meanwhile.
    pub(crate) fn recycle(&mut self) -> Recycled {
        self.peaks[0].see(self.out.len());
        self.out.clear();
        self.out_pos = 0;
        self.peaks[1].see(self.events.len());
        self.peaks[2].see(self.activities.len());
        self.peaks[3].see(self.scratch.len());
        // Recycles with events still waiting count too: a busy stream seldom empties its
        // region, and its buffers were never cut back.
        self.recycles += 1;
        let trimmed = self.recycles >= TRIM_EVERY;
        let freed = if self.has_pending() {
            Freed::Front(self.compact())
        } else {
            self.events.clear();
            self.indexed = 0;
            self.activities.clear();
            self.scratch.clear();
            Freed::All
        };
        if trimmed {
            self.recycles = 0;
            // Each keeps at least what it holds (the events still waiting).
            let [out, events, activities, scratch] = &mut self.peaks;
            out.trim(&mut self.out);
            events.trim(&mut self.events);
            activities.trim(&mut self.activities);
            scratch.trim(&mut self.scratch);
        }
        Recycled { freed, trimmed }
    }

    /// Drops the events handed out from the front of `events` when they are most of it, and
    /// returns how many payload bytes the arena can drop from its front (the events left
    /// point past them): a busy stream always has some event waiting for its thread's
    /// next IsSorted event, so the region was seldom empty and held every event since it last
    /// was (megabytes per busy session, growing with the host's load). Called with no ready
    /// events waiting (indexes into `events` live only in `runs`).
    fn compact(&mut self) -> usize {
        let lo = self.runs.iter().map(|r| r.next as usize).min().unwrap_or(self.indexed).min(self.indexed);
        if lo < COMPACT_MIN || lo * 2 < self.events.len() {
            return 0;
        }
        self.events.drain(..lo);
        let lo32 = lo as u32;
        for r in &mut self.runs {
            r.next -= lo32;
            r.end -= lo32;
        }
        self.indexed -= lo;
        // Payload ranges of the events left; those handed out are not read again.
        let p0 = self.events.iter().map(|e| e.payload_start).min().unwrap_or(0);
        for e in &mut self.events {
            e.payload_start -= p0;
        }
        p0 as usize
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
        self.index_runs();
        let ts = &self.events;
        self.released.clear();
        for r in &mut self.runs {
            // Runs are sorted, so a binary search finds the released prefix.
            let upto = r.next + ts[r.next as usize..r.end as usize].partition_point(|e| e.timestamp <= watermark) as u32;
            if upto > r.next {
                self.released.push((r.next, upto));
                r.next = upto;
            }
        }
        match self.released[..] {
            [] => {}
            [(from, upto)] => self.out.extend(from..upto),
            _ => {
                if !self.merger.merge(ts, &self.released, &mut self.out) {
                    self.scratch.clear();
                    for &(from, upto) in &self.released {
                        let run = &ts[from as usize..upto as usize];
                        self.scratch.extend(run.iter().zip(from..).map(|(e, i)| (e.timestamp, i)));
                    }
                    self.scratch.sort_unstable();
                    self.out.extend(self.scratch.iter().map(|&(_, i)| i));
                }
            }
        }
        self.runs.retain(|r| r.next < r.end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event numbered `n` in stream order (the number survives a collapse, which moves
    /// events).
    fn ev(ts: i64, n: usize) -> Pending {
        Pending {
            timestamp: ts,
            metadata_id: 1,
            sequence_number: n as u32,
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
            v.push((r.events[i].timestamp, r.events[i].sequence_number as usize));
        }
        r.recycle();
        v
    }

    #[test]
    fn runs_merge_stably_and_watermarks_release_prefixes() {
        let mut r = Region::default();
        for (n, ts) in [10, 20, 30, 5, 20, 40, 20].into_iter().enumerate() {
            assert!(r.push(ev(ts, n)));
        }
        r.flush_upto(20);
        assert_eq!(drain(&mut r), [(5, 3), (10, 0), (20, 1), (20, 4), (20, 6)]);
        r.push(ev(35, 7));
        r.flush_all();
        assert_eq!(drain(&mut r), [(30, 2), (35, 7), (40, 5)]);
        assert!(!r.has_pending());
        assert!(r.events.is_empty());
    }

    /// A region never empty (an event always waiting) drops what it handed out, and what it
    /// hands out later is unchanged: the same events, payload ranges moved with their bytes.
    #[test]
    fn a_region_never_empty_drops_what_it_handed_out() {
        let mut r = Region::default();
        let mut payloads = Vec::new();
        let mut n = 0usize;
        let mut got = Vec::new();
        let mut trims = 0;
        for step in 0..300 {
            for _ in 0..100 {
                let mut e = ev(n as i64, n);
                e.payload_start = payloads.len() as u32;
                e.payload_len = 4;
                payloads.extend_from_slice(&(n as u32).to_le_bytes());
                assert!(r.push(e));
                n += 1;
            }
            // The newest 10 events wait (their thread's watermark lags).
            r.flush_upto(n as i64 - 11);
            while let Some(i) = r.next_ready() {
                let e = r.events[i];
                let bytes = &payloads[e.payload_start as usize..(e.payload_start + e.payload_len) as usize];
                assert_eq!(u32::from_le_bytes(bytes.try_into().unwrap()), e.sequence_number, "step {step}");
                got.push(e.sequence_number as usize);
            }
            let recycled = r.recycle();
            trims += usize::from(recycled.trimmed);
            match recycled.freed {
                Freed::Front(p0) => drop(payloads.drain(..p0)),
                Freed::All => payloads.clear(),
            }
            assert!(r.events.len() < 2 * COMPACT_MIN + 200, "step {step}: {} events held", r.events.len());
        }
        assert_eq!(got, (0..n - 10).collect::<Vec<_>>());
        // Never empty, its buffers are still cut back every TRIM_EVERY recycles.
        assert_eq!(trims, 300 / TRIM_EVERY as usize);
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
            r.push(ev(ts, i));
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
                    assert!(r.push(ev(clocks[t], n)));
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
