//! Capacity of the buffers a reader reuses from one batch of events to the next. They keep
//! their largest size: a burst (a reader that fell behind reads a region of megabytes at once)
//! held its megabytes for the rest of the session, so a long-running reader's memory grew in
//! steps with its host's load. Each buffer is cut back to the most it needed over the last
//! [`TRIM_EVERY`] batches.

/// Batches (each time every buffered event was handed out) over which a buffer's largest
/// length is taken before it is cut back to it.
pub(crate) const TRIM_EVERY: u32 = 256;
/// Buffers at most this large (bytes) are left as they are.
const KEEP_BYTES: usize = 64 << 10;

/// The largest length a buffer had since it was last trimmed.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Peak(usize);

impl Peak {
    #[inline]
    pub(crate) fn see(&mut self, len: usize) {
        self.0 = self.0.max(len);
    }

    /// Cuts `v` back to the largest length seen (at least [`KEEP_BYTES`]) when it holds more
    /// than twice that; starts over.
    pub(crate) fn trim<T>(&mut self, v: &mut Vec<T>) {
        self.see(v.len());
        let keep = self.0.max(KEEP_BYTES / size_of::<T>().max(1));
        if v.capacity() > keep.saturating_mul(2) {
            v.shrink_to(keep);
        }
        self.0 = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_given_back_and_steady_use_is_kept() {
        let mut p = Peak::default();
        let mut v: Vec<u64> = Vec::with_capacity(1 << 20);
        // The burst is over: the last batches needed 100 k at most.
        v.resize(100_000, 0);
        p.see(v.len());
        v.clear();
        p.trim(&mut v);
        assert!(v.capacity() >= 100_000 && v.capacity() < 200_000, "{}", v.capacity());
        // Steady use at that size: nothing moves.
        let cap = v.capacity();
        v.resize(100_000, 0);
        p.see(v.len());
        v.clear();
        p.trim(&mut v);
        assert_eq!(v.capacity(), cap);
        // Small buffers stay.
        let mut small: Vec<u8> = Vec::with_capacity(100 << 10);
        p.trim(&mut small);
        assert_eq!(small.capacity(), 100 << 10);
    }
}
