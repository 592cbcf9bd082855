//! Event samples kept one by one with their times, in arrival order: a list of chunks, so
//! growing it never copies what it holds (a `Vec` doubling and copying hundreds of thousands
//! of events was a fortieth of an aggregator's work).

/// One event's share of a pending sample, with its time: `amounts[k]` goes to the sample's
/// value at index `slots[k]`; a slot of `u8::MAX` is unused. 32 bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimedEvent {
    /// Source clock (allocation, exception: the event; contention: the wait's start).
    pub time_ns: u64,
    pub amounts: [i64; 2],
    pub sample: u32,
    pub slots: [u8; 2],
}

/// Events in chunks of at most [`TimedEvents::CHUNK`], each made with its full room but the
/// first few, which grow from small (a process with few events keeps little).
#[derive(Debug, Default)]
pub(crate) struct TimedEvents {
    chunks: Vec<Vec<TimedEvent>>,
    len: usize,
}

impl TimedEvents {
    /// Events per chunk at most (128 KiB).
    const CHUNK: usize = 4096;

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn push(&mut self, e: TimedEvent) {
        match self.chunks.last_mut() {
            Some(c) if c.len() < c.capacity() => c.push(e),
            _ => self.push_in_new_chunk(e),
        }
        self.len += 1;
    }

    #[cold]
    fn push_in_new_chunk(&mut self, e: TimedEvent) {
        // Room for as many as held so far (as a Vec doubles), within a chunk's.
        let room = self.len.clamp(16, Self::CHUNK);
        let mut c = Vec::with_capacity(room);
        c.push(e);
        self.chunks.push(c);
    }

    pub fn iter(&self) -> impl Iterator<Item = &TimedEvent> + '_ {
        self.chunks.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_every_event_in_order() {
        let mut t = TimedEvents::default();
        assert_eq!(t.iter().count(), 0);
        for i in 0..3 * TimedEvents::CHUNK as u64 + 5 {
            t.push(TimedEvent { time_ns: i, amounts: [i as i64, 0], sample: i as u32, slots: [0, u8::MAX] });
        }
        assert_eq!(t.len(), 3 * TimedEvents::CHUNK + 5);
        assert!(t.iter().map(|e| e.time_ns).eq(0..3 * TimedEvents::CHUNK as u64 + 5));
        // No chunk grew past its room (none was copied), none is larger than a chunk.
        assert!(t.chunks.iter().all(|c| c.capacity() <= TimedEvents::CHUNK));
        assert_eq!(std::mem::size_of::<TimedEvent>(), 32);
    }
}
