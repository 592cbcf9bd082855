//! Capacity of the buffers a reader reuses from one batch of events to the next. They keep
//! their largest size: a burst (a reader that fell behind reads a region of megabytes at once)
//! held its megabytes for the rest of the session, so a long-running reader's memory grew in
//! steps with its host's load. Each buffer is cut back to the most it needed over the last
//! [`TRIM_EVERY`] batches, and the pages of its spare capacity beyond that most are handed back
//! to the kernel: a buffer kept at twice its use (it is cut back only past that) otherwise ends
//! up with all of its capacity resident as the largest batch since it was allocated grows —
//! the agent's reader buffers (0.3–0.5 MB each) gained 30–50 KB of resident pages each from
//! minute 2 to 10.

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
    /// than twice that, else gives back the whole pages of its capacity past the largest length
    /// seen; starts over. `v` may hold elements: neither goes below its length.
    pub(crate) fn trim<T>(&mut self, v: &mut Vec<T>) {
        self.see(v.len());
        let keep = self.0.max(KEEP_BYTES / size_of::<T>().max(1));
        if v.capacity() > keep.saturating_mul(2) {
            v.shrink_to(keep);
        } else {
            release_spare(v, self.0);
        }
        self.0 = 0;
    }
}

/// Hands the whole pages of `v`'s capacity past its first `used` elements (at least its
/// length) back to the kernel; they read as zeros when touched again. Spare capacity holds no
/// values, so nothing is lost.
fn release_spare<T>(v: &mut Vec<T>, used: usize) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let size = size_of::<T>();
        let used = used.max(v.len());
        if size == 0 || v.capacity() <= used {
            return;
        }
        let base = v.as_mut_ptr() as usize;
        let start = (base + used * size).next_multiple_of(PAGE);
        let end = (base + v.capacity() * size) & !(PAGE - 1);
        if end > start {
            // SAFETY: [start, end) is whole pages inside the vector's allocation and past its
            // elements (spare capacity, never read before it is written); MADV_DONTNEED only
            // drops those pages' contents, the mapping stays.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (v, used);
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

    /// Resident pages of the range (Linux's mincore).
    #[cfg(target_os = "linux")]
    fn resident(ptr: *const u8, len: usize) -> usize {
        let start = ptr as usize & !4095;
        let end = (ptr as usize + len).next_multiple_of(4096);
        let mut pages = vec![0u8; (end - start) / 4096];
        // SAFETY: the range is mapped (a live allocation) and `pages` has a byte per page.
        let r = unsafe { libc::mincore(start as *mut libc::c_void, end - start, pages.as_mut_ptr()) };
        assert_eq!(r, 0);
        pages.iter().filter(|p| *p & 1 == 1).count()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn spare_pages_past_the_recent_most_are_given_back_and_elements_kept() {
        let mut p = Peak::default();
        // 1 MiB of capacity once touched whole, then batches of 600 KiB: not cut back (less
        // than twice), but the pages past 600 KiB are handed back.
        let mut v: Vec<u8> = Vec::with_capacity(1 << 20);
        v.resize(1 << 20, 7);
        v.clear();
        v.resize(600 << 10, 1);
        p.see(v.len());
        v.truncate(1000);
        p.trim(&mut v);
        assert_eq!(v.capacity(), 1 << 20);
        assert_eq!(v.len(), 1000);
        assert!(v.iter().all(|&b| b == 1));
        let past = resident(v.as_ptr().wrapping_add(608 << 10), (1 << 20) - (610 << 10));
        assert_eq!(past, 0, "pages past the recent most still resident");
        // Reused past it: zeros, as any fresh page.
        v.resize(1 << 20, 2);
        assert!(v[1000..].iter().all(|&b| b == 2));
    }
}
