//! Buffering and timestamp-sorting of the events of one sequence-point region.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

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
    pub activity_id: [u8; 16],
    pub related_activity_id: [u8; 16],
}

/// A sorted run of not-yet-released events: `order[next..end]`.
#[derive(Debug, Clone, Copy)]
struct Run {
    next: u32,
    end: u32,
}

/// Most runs kept before they are collapsed into one (bounds the per-flush cost on input
/// that alternates timestamps).
const MAX_RUNS: usize = 64;

/// The events of the current region in stream order, the not-yet-released ones as sorted runs
/// (each capture thread writes its events in time order, so the runs are long), and the
/// release order (`out`, indexes into `events`).
#[derive(Default)]
pub(crate) struct Region {
    pub(crate) events: Vec<Pending>,
    /// Event indexes; runs are ranges of it.
    order: Vec<u32>,
    runs: Vec<Run>,
    heap: BinaryHeap<Reverse<(i64, u32, u32)>>,
    pub(crate) out: Vec<u32>,
    pub(crate) out_pos: usize,
    /// Payload bytes of every event in `events`.
    pub(crate) payloads: Vec<u8>,
}

impl Region {
    /// Adds an event; false if the region already holds 4 G events.
    #[inline]
    pub(crate) fn push(&mut self, p: Pending) -> bool {
        let (Ok(idx), Ok(_)) = (u32::try_from(self.events.len()), u32::try_from(self.order.len() + 1)) else {
            return false;
        };
        let ts = p.timestamp;
        if !self.extends_last_run(ts) && self.runs.len() >= MAX_RUNS {
            self.collapse();
        }
        let extend = self.extends_last_run(ts);
        let pos = self.order.len() as u32;
        self.events.push(p);
        self.order.push(idx);
        match self.runs.last_mut() {
            Some(r) if extend => r.end += 1,
            _ => self.runs.push(Run { next: pos, end: pos + 1 }),
        }
        true
    }

    /// Whether an event with timestamp `ts` appended now keeps the last run sorted.
    #[inline]
    fn extends_last_run(&self, ts: i64) -> bool {
        match self.runs.last() {
            Some(r) => {
                r.end as usize == self.order.len()
                    && self.events[self.order[r.end as usize - 1] as usize].timestamp <= ts
            }
            None => false,
        }
    }

    /// Merges every run into one: their remaining indexes, sorted, appended to `order`.
    fn collapse(&mut self) {
        let start = self.order.len();
        for r in std::mem::take(&mut self.runs) {
            self.order.extend_from_within(r.next as usize..r.end as usize);
        }
        let events = &self.events;
        self.order[start..].sort_by_key(|&i| (events[i as usize].timestamp, i));
        let end = self.order.len() as u32;
        if end as usize > start {
            self.runs.push(Run { next: start as u32, end });
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
            self.order.clear();
            self.payloads.clear();
        }
    }

    /// Makes every pending event ready (sequence point or end of stream).
    pub(crate) fn flush_all(&mut self) {
        self.flush_upto(i64::MAX);
    }

    /// Makes ready every pending event with a timestamp <= `watermark` (an IsSorted event
    /// guarantees no later event is earlier than it), merging the runs. Ties go to the event
    /// earlier in the stream.
    pub(crate) fn flush_upto(&mut self, watermark: i64) {
        let ts_at = |order: &[u32], events: &[Pending], pos: u32| {
            let i = order[pos as usize];
            (events[i as usize].timestamp, i)
        };
        if self.runs.len() == 1 {
            let r = &mut self.runs[0];
            while r.next < r.end {
                let (ts, i) = ts_at(&self.order, &self.events, r.next);
                if ts > watermark {
                    break;
                }
                self.out.push(i);
                r.next += 1;
            }
        } else {
            self.heap.clear();
            for (k, r) in self.runs.iter().enumerate() {
                let (ts, i) = ts_at(&self.order, &self.events, r.next);
                if ts <= watermark {
                    self.heap.push(Reverse((ts, i, k as u32)));
                }
            }
            while let Some(Reverse((_, i, k))) = self.heap.pop() {
                self.out.push(i);
                let r = &mut self.runs[k as usize];
                r.next += 1;
                if r.next < r.end {
                    let (ts, i) = ts_at(&self.order, &self.events, r.next);
                    if ts <= watermark {
                        self.heap.push(Reverse((ts, i, k)));
                    }
                }
            }
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
            activity_id: [0; 16],
            related_activity_id: [0; 16],
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
}
