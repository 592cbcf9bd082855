//! An event's payload bytes: a range of a buffer that the events read with it share. A live
//! source reads a batch's payloads into one buffer, which its records then share without a
//! copy: one allocation on the reader's thread per batch, not per event, and the buffer goes
//! back to the reader once the last record lets it go ([`Payload::let_go`]).
//!
//! The buffer's holders are counted as an `Arc`'s are, except that a batch's are counted at
//! once: [`Payload::share`] starts the count at the batch's size and [`Payload::let_go`]
//! lowers it by the number of records it empties. Per event that was an atomic operation to
//! share the buffer and another to let it go (with a placeholder's three more before), a
//! tenth of the readers' user time. One payload alone ([`Payload::from`], `clone`, drop) is
//! counted one at a time.
use std::{
    ptr::NonNull,
    sync::atomic::{AtomicUsize, Ordering, fence},
};

/// A buffer and the number of [`Payload`]s (and [`Shares`]) holding it.
struct Shared {
    holders: AtomicUsize,
    bytes: Vec<u8>,
}

/// `bytes[start..end]` of a shared buffer, or no bytes and no buffer ([`Payload::EMPTY`]).
/// Compares and prints as its bytes.
pub struct Payload {
    buf: Option<NonNull<Shared>>,
    start: u32,
    end: u32,
}

// SAFETY: a Payload is a counted reference to a `Shared`, as an `Arc<Shared>` is: the count is
// atomic, the bytes are only read while shared (written only by the last holder, who owns
// them then: `into_buffer`, `let_go`), and `Shared` (an atomic and a Vec<u8>) is Send + Sync.
unsafe impl Send for Payload {}
// SAFETY: as above; `&Payload` only reads the bytes.
unsafe impl Sync for Payload {}

/// The most holders a buffer has: past it the count could wrap (as `Arc`, abort).
const MAX_HOLDERS: usize = isize::MAX as usize;

impl Payload {
    /// No bytes, no buffer: nothing allocated or counted.
    pub const EMPTY: Payload = Payload { buf: None, start: 0, end: 0 };

    /// Up to `n` payloads sharing `bytes` ([`Shares::take`]), counted once for all of them.
    pub fn share(bytes: Vec<u8>, n: usize) -> Shares {
        // The Shares holds the buffer too, until it is dropped: the ones it did not hand out
        // are let go with it.
        let holders = n.checked_add(1).filter(|&h| h <= MAX_HOLDERS).unwrap_or_else(|| std::process::abort());
        let shared = Box::new(Shared { holders: AtomicUsize::new(holders), bytes });
        Shares { buf: NonNull::from(Box::leak(shared)), left: n }
    }

    /// The capacity of the buffer this payload is a range of (0 without one).
    pub fn buffer_capacity(&self) -> usize {
        self.shared().map_or(0, |s| s.bytes.capacity())
    }

    /// The buffer this payload is a range of, when this is its last holder (the other records
    /// that shared it dropped): to be filled again.
    pub fn into_buffer(self) -> Option<Vec<u8>> {
        let p = std::mem::ManuallyDrop::new(self);
        let buf = p.buf?;
        // SAFETY: `p` holds `buf` (counted), so it is alive here.
        let holders = unsafe { &buf.as_ref().holders };
        // As `Arc::try_unwrap`: only the last holder takes the buffer.
        if holders.compare_exchange(1, 0, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            // Not the last: `p`'s hold is let go as a drop would.
            drop(std::mem::ManuallyDrop::into_inner(p));
            return None;
        }
        fence(Ordering::Acquire);
        // SAFETY: the count went from 1 (this payload's) to 0: no one else holds `buf`, which
        // `Payload::share`/`From` made from a Box.
        Some(unsafe { Box::from_raw(buf.as_ptr()) }.bytes)
    }

    /// Empties `payloads` (each left [`Payload::EMPTY`]), lowering each buffer's count once
    /// for the payloads of it that come one after another (a batch's records are in order). A
    /// buffer these were the last holders of is freed, except the last one so emptied, which
    /// is returned (to be filled again).
    pub fn let_go<'a>(payloads: impl IntoIterator<Item = &'a mut Payload>) -> Option<Vec<u8>> {
        let mut run: Option<(NonNull<Shared>, usize)> = None;
        let mut last = None;
        for p in payloads {
            let Some(buf) = std::mem::replace(p, Payload::EMPTY).into_raw() else { continue };
            match &mut run {
                Some((b, k)) if *b == buf => *k += 1,
                _ => {
                    if let Some((b, k)) = run.replace((buf, 1)) {
                        // SAFETY: `k` holds of `b` were taken out of payloads above.
                        last = unsafe { release(b, k) }.or(last);
                    }
                }
            }
        }
        if let Some((b, k)) = run {
            // SAFETY: as above.
            last = unsafe { release(b, k) }.or(last);
        }
        last
    }

    #[inline]
    fn shared(&self) -> Option<&Shared> {
        // SAFETY: a payload holds its buffer (counted) while it lives.
        self.buf.map(|b| unsafe { &*b.as_ptr() })
    }

    /// The buffer, its hold kept (to be let go by `release`).
    fn into_raw(self) -> Option<NonNull<Shared>> {
        std::mem::ManuallyDrop::new(self).buf
    }
}

/// Lets go `k` holds of `buf`; its bytes when they were the last.
///
/// # Safety
/// The caller has `k` holds of `buf` (counted, and no longer in any payload).
unsafe fn release(buf: NonNull<Shared>, k: usize) -> Option<Vec<u8>> {
    // SAFETY: the caller's holds keep `buf` alive until the count is lowered.
    let holders = unsafe { &buf.as_ref().holders };
    // As `Arc`'s drop: Release so that this thread's reads happen before the free, Acquire
    // on the last before freeing.
    if holders.fetch_sub(k, Ordering::Release) != k {
        return None;
    }
    fence(Ordering::Acquire);
    // SAFETY: the count reached 0: no holder is left; `buf` was made from a Box.
    Some(unsafe { Box::from_raw(buf.as_ptr()) }.bytes)
}

/// Payloads of one buffer, handed out by [`Shares::take`] (see [`Payload::share`]).
pub struct Shares {
    buf: NonNull<Shared>,
    /// Holds not yet handed out (the Shares' own is not among them).
    left: usize,
}

impl Shares {
    /// The payload `bytes[start..end]`; None when the range is not within the buffer, or
    /// every payload counted was handed out.
    pub fn take(&mut self, start: usize, end: usize) -> Option<Payload> {
        // SAFETY: the Shares holds the buffer (counted) while it lives.
        let len = unsafe { self.buf.as_ref() }.bytes.len();
        if self.left == 0 || start > end || end > len {
            return None;
        }
        let (start, end) = (u32::try_from(start).ok()?, u32::try_from(end).ok()?);
        self.left -= 1;
        Some(Payload { buf: Some(self.buf), start, end })
    }
}

impl Drop for Shares {
    fn drop(&mut self) {
        // SAFETY: the holds not handed out and the Shares' own.
        drop(unsafe { release(self.buf, self.left + 1) });
    }
}

// SAFETY: as Payload's.
unsafe impl Send for Shares {}

impl Clone for Payload {
    fn clone(&self) -> Self {
        if let Some(s) = self.shared() {
            // As `Arc::clone`: Relaxed (the new holder is made from an existing one).
            if s.holders.fetch_add(1, Ordering::Relaxed) >= MAX_HOLDERS {
                std::process::abort();
            }
        }
        Payload { buf: self.buf, start: self.start, end: self.end }
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        if let Some(b) = self.buf {
            // SAFETY: this payload's hold.
            drop(unsafe { release(b, 1) });
        }
    }
}

impl Default for Payload {
    fn default() -> Self {
        Payload::EMPTY
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self.shared() {
            // In range by construction (`take` checks it; `From` covers the whole buffer).
            Some(s) => &s.bytes[self.start as usize..self.end as usize],
            None => &[],
        }
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Payload {}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl From<&[u8]> for Payload {
    /// A buffer of its own.
    fn from(b: &[u8]) -> Self {
        Payload::from(b.to_vec())
    }
}

impl From<Vec<u8>> for Payload {
    /// `b` itself, not copied.
    fn from(b: Vec<u8>) -> Self {
        // NetTrace sizes are u32: a longer buffer is not an event's (its first 4 GiB kept).
        let end = b.len().min(u32::MAX as usize);
        Payload::share(b, 1).take(0, end).expect("one payload counted, in range")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holders(p: &Payload) -> usize {
        p.shared().map_or(0, |s| s.holders.load(Ordering::Relaxed))
    }

    #[test]
    fn a_batch_is_counted_once_and_comes_back_to_its_last_holder() {
        let bytes: Vec<u8> = (0..100).collect();
        let at = bytes.as_ptr();
        let mut shares = Payload::share(bytes, 3);
        let mut ps: Vec<Payload> = [(0, 10), (10, 10), (10, 100)].iter().map(|&(s, e)| shares.take(s, e).expect("in range")).collect();
        assert!(shares.take(0, 1).is_none(), "three counted, three handed out");
        assert_eq!(holders(&ps[0]), 4, "the three and the Shares");
        drop(shares);
        assert_eq!(holders(&ps[0]), 3);
        assert_eq!(&*ps[0], &(0..10).collect::<Vec<u8>>()[..]);
        assert!(ps[1].is_empty());
        assert_eq!(ps[2].len(), 90);
        let copy = ps[2].clone();
        assert_eq!(holders(&ps[0]), 4);
        assert_eq!(Payload::let_go(&mut ps[..2]), None, "copy and ps[2] still hold it");
        assert!(ps[0].is_empty() && ps[1].is_empty() && holders(&ps[0]) == 0, "emptied");
        assert_eq!(holders(&copy), 2);
        assert!(copy.clone().into_buffer().is_none(), "not the last holder");
        assert_eq!(holders(&copy), 2);
        drop(copy);
        let back = Payload::let_go(&mut ps).expect("the last holder gets the buffer");
        assert_eq!((back.as_ptr(), back.len()), (at, 100));
    }

    #[test]
    fn out_of_range_and_unused_shares_are_let_go() {
        let mut shares = Payload::share(vec![1, 2, 3], 5);
        assert!(shares.take(2, 4).is_none() && shares.take(3, 2).is_none());
        let p = shares.take(1, 3).expect("in range");
        drop(shares);
        assert_eq!(holders(&p), 1, "the four not handed out let go with the Shares");
        assert_eq!(p.into_buffer(), Some(vec![1, 2, 3]));
        // None handed out: freed with the Shares.
        drop(Payload::share(vec![0; 10], 2));
    }

    #[test]
    fn payloads_of_several_buffers_are_let_go_each() {
        let mut a = Payload::share(vec![1; 8], 2);
        let mut b = Payload::share(vec![2; 8], 1);
        let mut ps = vec![a.take(0, 1).expect("a"), Payload::EMPTY, a.take(1, 2).expect("a"), b.take(0, 8).expect("b"), Payload::from(&[3u8][..])];
        drop((a, b));
        let back = Payload::let_go(&mut ps).expect("the last buffer emptied comes back");
        assert_eq!(back, vec![3], "the last one; the others freed");
        assert!(ps.iter().all(|p| p.is_empty() && p.buf.is_none()));
    }

    #[test]
    fn holders_on_other_threads() {
        let mut shares = Payload::share((0..=255).collect(), 256);
        let ps: Vec<Payload> = (0..256).map(|i| shares.take(i, i + 1).expect("in range")).collect();
        drop(shares);
        let mut ps = ps;
        let theirs: Vec<Payload> = ps.drain(128..).collect();
        let t = std::thread::spawn(move || {
            let copies: Vec<Payload> = theirs.iter().map(Clone::clone).collect();
            assert!(copies.iter().enumerate().all(|(i, p)| p[0] as usize == i + 128));
            drop(theirs);
            copies
        });
        let copies = t.join().expect("thread");
        assert_eq!(Payload::let_go(&mut ps), None);
        let mut copies = copies;
        assert_eq!(Payload::let_go(&mut copies).map(|b| b.len()), Some(256));
    }

    #[test]
    fn empty_holds_nothing_and_compares_as_bytes() {
        assert_eq!(Payload::default().buffer_capacity(), 0);
        assert_eq!(Payload::EMPTY, Payload::from(Vec::new()));
        assert_eq!(Payload::from(&b"ab"[..]), Payload::from(b"ab".to_vec()));
        assert_eq!(Payload::EMPTY.into_buffer(), None);
        assert_eq!(format!("{:?}", Payload::from(&[7u8][..])), "[7]");
    }
}
