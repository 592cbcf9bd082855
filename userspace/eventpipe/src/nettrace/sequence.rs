//! Per-capture-thread sequence numbers and dropped-event detection.

use super::id_hash::IdMap;

#[derive(Default)]
pub(crate) struct SequenceTracker {
    last: IdMap<u64, u32>,
    /// Cache of the last thread touched (events come in per-thread runs).
    cur_thread: Option<u64>,
    cur_seq: u32,
    /// V6 never recycles thread indexes; older formats may restart a thread's numbering at 1.
    v6: bool,
    pub(crate) dropped: u64,
}

impl SequenceTracker {
    pub(crate) fn new(v6: bool) -> Self {
        SequenceTracker {
            v6,
            ..Default::default()
        }
    }

    fn sync_cache(&mut self) {
        if let Some(t) = self.cur_thread.take() {
            self.last.insert(t, self.cur_seq);
        }
    }

    fn count_gap(&mut self, last: u32, expected_last: u32) {
        // A last number of 0 means "new or recycled thread" for pre-V6 streams.
        if self.v6 || last != 0 {
            let gap = expected_last.wrapping_sub(last);
            // Negative gaps (reordering, recycling) are not drops.
            if gap < 0x8000_0000 {
                self.dropped += u64::from(gap);
            }
        }
    }

    /// An event with sequence number `seq` from `thread`.
    #[inline]
    pub(crate) fn on_event(&mut self, thread: u64, seq: u32) {
        if self.cur_thread != Some(thread) {
            self.sync_cache();
            self.cur_seq = match self.last.get(&thread) {
                Some(&s) => s,
                None => seq.wrapping_sub(1),
            };
            self.cur_thread = Some(thread);
        }
        let last = self.cur_seq;
        self.count_gap(last, seq.wrapping_sub(1));
        self.cur_seq = seq;
    }

    /// The next event of the thread of the last [`Self::on_event`], numbered `seq`, which is
    /// one above the last (or equal to it): what `on_event` does then, without the checks.
    #[inline]
    pub(crate) fn continue_thread(&mut self, seq: u32) {
        self.cur_seq = seq;
    }

    /// A sequence point (or V6 RemoveThread) states `thread` has logged up to `seq`.
    pub(crate) fn checkpoint(&mut self, thread: u64, seq: u32) {
        self.sync_cache();
        match self.last.get(&thread) {
            Some(&last) => {
                self.count_gap(last, seq);
                if seq.wrapping_sub(last) < 0x8000_0000 {
                    self.last.insert(thread, seq);
                }
            }
            None => {
                self.last.insert(thread, seq);
            }
        }
    }

    pub(crate) fn remove(&mut self, thread: u64) {
        self.sync_cache();
        self.last.remove(&thread);
    }

    pub(crate) fn clear(&mut self) {
        self.cur_thread = None;
        self.last.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_between_events_and_at_sequence_points_count_as_drops() {
        let mut t = SequenceTracker::new(false);
        t.on_event(7, 1);
        t.on_event(7, 2);
        t.on_event(9, 5); // first event of a thread: no drop assumed
        t.on_event(7, 5); // 3, 4 dropped
        assert_eq!(t.dropped, 2);
        t.checkpoint(9, 8); // 6, 7, 8 dropped
        assert_eq!(t.dropped, 5);
        t.checkpoint(7, 5);
        t.on_event(7, 6);
        assert_eq!(t.dropped, 5);
        t.on_event(7, 3); // going backwards is not a drop
        assert_eq!(t.dropped, 5);
    }
}
