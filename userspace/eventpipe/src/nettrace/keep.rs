//! Capacity of the buffers a reader reuses from one batch of events to the next. They keep
//! their largest size: a burst (a reader that fell behind reads a region of megabytes at once)
//! held its megabytes for the rest of the session, so a long-running reader's memory grew in
//! steps with its host's load. Each buffer is cut back to the most it needed over the last
//! [`TRIM_EVERY`] batches, and the pages of its spare capacity past that are given back to the
//! kernel: a buffer kept (it holds less than twice its peak) stayed resident up to the most it
//! ever held, so an agent's readers grew by 30–50 KB each from minute 2 to 10 as bursts came.

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
    /// than twice that, else gives back the pages of its capacity past that; starts over.
    pub(crate) fn trim<T>(&mut self, v: &mut Vec<T>) {
        self.see(v.len());
        let keep = self.0.max(KEEP_BYTES / size_of::<T>().max(1));
        if v.capacity() > keep.saturating_mul(2) {
            v.shrink_to(keep);
        } else {
            release_spare(v, keep);
        }
        self.0 = 0;
    }
}

/// Tells the kernel the whole pages of `v`'s capacity past `keep` elements (and past its
/// length) hold nothing: they stop counting as resident until written again. Nothing is
/// moved or reallocated; the bytes there are spare capacity, never read before being written.
fn release_spare<T>(v: &mut Vec<T>, keep: usize) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let elem = size_of::<T>();
        let from = keep.max(v.len());
        if elem == 0 || v.capacity() <= from {
            return;
        }
        let base = v.as_mut_ptr() as usize;
        let start = (base + from * elem).next_multiple_of(PAGE);
        let end = (base + v.capacity() * elem) & !(PAGE - 1);
        // Only worth a system call for a tail of some size.
        if end > start && end - start >= KEEP_BYTES {
            // SAFETY: [start, end) lies inside `v`'s allocation, past its length: bytes the Vec
            // owns and never reads before writing them. MADV_DONTNEED on private anonymous
            // memory makes them read as zeros afterwards; no allocator bookkeeping lives there
            // (it sits before the allocation's start and after its end, outside the range).
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (v, keep);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident pages of the whole pages in `[base + from, base + to)` (mincore).
    #[cfg(target_os = "linux")]
    fn resident(base: *const u8, from: usize, to: usize) -> usize {
        let start = (base as usize + from).next_multiple_of(4096);
        let end = (base as usize + to) & !4095;
        let mut pages = vec![0u8; (end - start) / 4096];
        // SAFETY: the range lies in a live allocation; mincore writes one byte per page.
        let rc = unsafe { libc::mincore(start as *mut libc::c_void, end - start, pages.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        pages.iter().filter(|&&b| b & 1 == 1).count()
    }

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
        // Kept at its size, but the pages past the peak are no longer resident.
        #[cfg(target_os = "linux")]
        {
            let mut v: Vec<u8> = Vec::with_capacity(1 << 20);
            v.resize(1 << 20, 1);
            v.clear();
            p.see(600 << 10);
            p.trim(&mut v);
            assert_eq!(v.capacity(), 1 << 20, "not reallocated");
            let (head, tail) = (resident(v.as_ptr(), 0, 600 << 10), resident(v.as_ptr(), 608 << 10, (1 << 20) - (4 << 10)));
            assert!(head >= 140, "the kept part stays resident: {head} pages");
            assert_eq!(tail, 0, "pages past the peak released");
            // Written again, they come back (as zeros, never read before): the Vec works.
            v.resize(1 << 20, 2);
            assert!(v.iter().all(|&b| b == 2));
        }
        // Small buffers stay.
        let mut small: Vec<u8> = Vec::with_capacity(100 << 10);
        p.trim(&mut small);
        assert_eq!(small.capacity(), 100 << 10);
    }
}
