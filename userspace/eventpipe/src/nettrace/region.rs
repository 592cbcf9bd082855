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
    pub activity_id: [u8; 16],
    pub related_activity_id: [u8; 16],
}

/// Events parsed but not yet sorted (`pending`), and events sorted and ready (`out`).
#[derive(Default)]
pub(crate) struct Region {
    pending: Vec<Pending>,
    pending_sorted: bool,
    pub(crate) out: Vec<Pending>,
    pub(crate) out_pos: usize,
    /// Payload bytes of every event in `pending` and `out`.
    pub(crate) payloads: Vec<u8>,
}

impl Region {
    #[inline]
    pub(crate) fn push(&mut self, p: Pending) {
        if let Some(last) = self.pending.last() {
            if p.timestamp < last.timestamp {
                self.pending_sorted = false;
            }
        } else {
            self.pending_sorted = true;
        }
        self.pending.push(p);
    }

    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Next ready event, in order.
    #[inline]
    pub(crate) fn next_ready(&mut self) -> Option<usize> {
        if self.out_pos < self.out.len() {
            self.out_pos += 1;
            Some(self.out_pos - 1)
        } else {
            None
        }
    }

    /// Called when every ready event was handed out: frees what nobody can reference any more.
    pub(crate) fn recycle(&mut self) {
        self.out.clear();
        self.out_pos = 0;
        if self.pending.is_empty() {
            self.payloads.clear();
        }
    }

    fn sort(&mut self) {
        if !self.pending_sorted {
            // Stable: equal timestamps keep stream order.
            self.pending.sort_by_key(|p| p.timestamp);
            self.pending_sorted = true;
        }
    }

    /// Makes every pending event ready (sequence point or end of stream).
    pub(crate) fn flush_all(&mut self) {
        self.sort();
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
            std::mem::swap(&mut self.out, &mut self.pending);
        } else {
            self.out.append(&mut self.pending);
        }
    }

    /// Makes ready every pending event with a timestamp <= `watermark` (an IsSorted event
    /// guarantees no later event is earlier than it).
    pub(crate) fn flush_upto(&mut self, watermark: i64) {
        self.sort();
        let k = self.pending.partition_point(|p| p.timestamp <= watermark);
        if k == self.pending.len() {
            self.flush_all();
        } else if k > 0 {
            self.out.extend(self.pending.drain(..k));
        }
    }
}
