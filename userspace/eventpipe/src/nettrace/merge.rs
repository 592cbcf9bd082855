//! Merging the released prefixes of a region's sorted runs into one release order.
//!
//! Each event gets one `u64` key, `(timestamp - least) << bits | (index - first)` plus one,
//! which
//! orders like (timestamp, index) when the region's timestamp span and index span fit in 63
//! bits together (they do for any real trace: a region spans seconds of ticks and thousands of
//! events). Keys are unique, so runs can be merged in any order: the two shortest first (the
//! long run of the sampling thread is merged once, at the end), two at a time, with the choice
//! of side made without a branch (the heads of interleaved threads alternate unpredictably),
//! from both ends at once (two independent chains of loads and compares).
//! When one run holds most events (a sampling thread among threads that log now and then),
//! the others are merged into it by a scan instead, one key at a time.

/// Ends every run in the key arena: sorts after any key (keys stay below 2^63).
const END: u64 = u64::MAX;
/// Key arena capacity kept whatever the flush (256 KiB).
const KEEP_KEYS: usize = 32 * 1024;
/// Starts every run in the key arena: sorts before any key (keys are at least 1).
const START: u64 = 0;

/// What is merged: anything with a timestamp.
pub(crate) trait Stamped {
    fn stamp(&self) -> i64;
}

impl Stamped for i64 {
    #[inline(always)]
    fn stamp(&self) -> i64 {
        *self
    }
}

#[derive(Default)]
pub(crate) struct Merger {
    /// Runs and merged runs, each between [`START`] and [`END`].
    /// Kept at its largest length (`used` of it in use): it is filled by merges, so growing it
    /// only when a flush needs more spares a fill with END before each merge.
    keys: Vec<u64>,
    used: usize,
    /// (first key's place in `keys`, length without START and END) of the runs to merge.
    segs: Vec<(usize, usize)>,
}

impl Merger {
    /// Appends to `out` the indexes of `runs` (ranges of indexes into `ts`, each sorted by
    /// (timestamp, index)) in (timestamp, index) order. False, with nothing written, when
    /// the keys would not fit in 63 bits.
    pub(crate) fn merge<T: Stamped>(&mut self, ts: &[T], runs: &[(u32, u32)], out: &mut Vec<u32>) -> bool {
        let (mut tmin, mut tmax, mut imin, mut imax) = (i64::MAX, i64::MIN, u32::MAX, 0u32);
        for &(from, upto) in runs {
            tmin = tmin.min(ts[from as usize].stamp());
            tmax = tmax.max(ts[upto as usize - 1].stamp());
            imin = imin.min(from);
            imax = imax.max(upto - 1);
        }
        let bits = 32 - (imax - imin).leading_zeros();
        let span = (i128::from(tmax) - i128::from(tmin)) as u128;
        if bits >= 63 || span >> (63 - bits) != 0 {
            return false;
        }
        let key = |t: i64, i: usize| ((t.wrapping_sub(tmin) as u64) << bits | (i as u64 - u64::from(imin))) + 1;
        let mask = (1u64 << bits) - 1;
        let total: usize = runs.iter().map(|&(from, upto)| (upto - from) as usize).sum();
        // The longest run (the sampling thread's, typically) is left out of the keys when the
        // others are few next to it: they are merged first, then go into it one by one.
        let (longest, &(lfrom, lupto)) = runs
            .iter()
            .enumerate()
            .max_by_key(|(_, r)| r.1 - r.0)
            .expect("two runs or more");
        let llen = (lupto - lfrom) as usize;
        let apart = llen >= 4 * (total - llen);
        self.used = 0;
        self.segs.clear();
        for (k, &(from, upto)) in runs.iter().enumerate() {
            if apart && k == longest {
                continue;
            }
            let (from, upto) = (from as usize, upto as usize);
            let n = upto - from;
            let start = self.used + 1;
            let seg = self.take(n + 2);
            seg[0] = START;
            for (d, (t, i)) in seg[1..=n].iter_mut().zip(ts[from..upto].iter().zip(from..)) {
                *d = key(t.stamp(), i);
            }
            seg[n + 1] = END;
            self.segs.push((start, n));
        }
        while self.segs.len() > 1 {
            let a = self.take_shortest();
            let b = self.take_shortest();
            let at = self.used;
            let n = a.1 + b.1 + 2;
            self.take(n);
            let (src, dst) = self.keys.split_at_mut(at);
            let (ra, rb) = (&src[a.0 - 1..=a.0 + a.1], &src[b.0 - 1..=b.0 + b.1]);
            if n >= SPLIT_MERGE {
                merge2_split(ra, rb, &mut dst[..n]);
            } else {
                merge2(ra, rb, &mut dst[..n]);
            }
            self.segs.push((at + 1, a.1 + b.1));
        }
        let (start, len) = self.segs[0];
        let merged = &self.keys[start..start + len];
        out.reserve(total);
        if apart {
            // Each key of the others goes after the stretch of the longest run that sorts
            // before it (a few events: a linear scan, one mispredicted exit per key).
            let (lfrom, lupto) = (lfrom as usize, lupto as usize);
            let mut p = lfrom;
            for &k in merged {
                let from = p;
                while p < lupto && key(ts[p].stamp(), p) < k {
                    p += 1;
                }
                out.extend(from as u32..p as u32);
                out.push(((k - 1) & mask) as u32 + imin);
            }
            out.extend(p as u32..lupto as u32);
        } else {
            out.extend(merged.iter().map(|&k| ((k - 1) & mask) as u32 + imin));
        }
        // The arena holds each event once per merge it went through; after a flush much
        // larger than this one (a sequence point ending a long region), give the space back.
        if self.keys.capacity() > KEEP_KEYS && self.keys.capacity() > 16 * self.used {
            self.keys = Vec::new();
        }
        true
    }

    /// The next `n` places of the key arena (grown, filled with END, only past its length).
    #[inline]
    fn take(&mut self, n: usize) -> &mut [u64] {
        let at = self.used;
        if self.keys.len() < at + n {
            self.keys.resize(at + n, END);
        }
        self.used = at + n;
        &mut self.keys[at..at + n]
    }

    fn take_shortest(&mut self) -> (usize, usize) {
        let mut at = 0;
        for (k, s) in self.segs.iter().enumerate() {
            if s.1 < self.segs[at].1 {
                at = k;
            }
        }
        self.segs.swap_remove(at)
    }
}

/// Merges of at least this many keys (with START and END) are split in two halves merged in
/// the same loop ([`merge2_split`]).
const SPLIT_MERGE: usize = 64;

/// [`merge2`] as two independent merges in one loop: the keys are cut where the smaller half
/// of the output ends (found by a binary search), and each half is merged from both ends.
/// A step of a merge waits on the load its previous step chose; four chains of them, not
/// two, keep the core busy while each waits.
///
/// The heads stay inside their halves: keys are unique, and the key past a half's end in each
/// run (the other half's first, or END) sorts after all of the half, the key before its start
/// (the other half's last, or START) before all of it, so they stop the heads as START and
/// END do in [`merge2`]; the loop reads them without bounds checks, as `merge2` does. Out of
/// line: inlined into [`Merger::merge`], its heads shared the registers with the caller's and
/// went to the stack.
#[inline(never)]
fn merge2_split(a: &[u64], b: &[u64], dst: &mut [u64]) {
    let n = dst.len() - 2;
    assert!(a.len() >= 2 && b.len() >= 2 && a.len() + b.len() - 4 == n, "merge2_split: lengths");
    let (na, nb) = (a.len() - 2, b.len() - 2);
    // The first half: the k smallest keys, a[1..=p] and b[1..=k - p], with a[p] < b[k - p + 1]
    // and b[k - p] < a[p + 1].
    let k = n / 2;
    let (mut lo, mut hi) = (k.saturating_sub(nb), k.min(na));
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if a[mid] < b[k - mid + 1] {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let (p, q) = (lo, k - lo);
    let out = &mut dst[1..=n];
    let (h1, h2) = (k / 2, (n - k) / 2);
    // Front and back heads of the first half (output 0..k) and of the second (k..n), as
    // pointers: eight heads and four outputs stay in registers (as indexes with bounds checks,
    // some went to the stack, adding a store and a load to each step of the chains).
    assert!(p <= na && q <= nb && 2 * h1 <= k && 2 * h2 <= n - k, "merge2_split: halves");
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    // SAFETY: the heads stay inside their halves (above): the first half's front heads within
    // a[1..=p + 1] and b[1..=q + 1], its back heads within a[0..=p] and b[0..=q]; the second
    // half's front heads within a[p + 1..=na + 1] and b[q + 1..=nb + 1], its back heads within
    // a[p..=na] and b[q..=nb]: all inside `a` and `b`, as each head moves only past a key of
    // its half and takes at most half of them (2 * h1 <= k, 2 * h2 <= n - k). The outputs write
    // out[t], out[k - 1 - t], out[k + t] and out[n - 1 - t] for t < h1 <= h2: inside `out`.
    let (i1, j1, i2, j2, ia2, jb2) = unsafe {
        let (mut fa1, mut fb1, mut ba1, mut bb1) = (pa.add(1), pb.add(1), pa.add(p), pb.add(q));
        let (mut fa2, mut fb2, mut ba2, mut bb2) = (pa.add(p + 1), pb.add(q + 1), pa.add(na), pb.add(nb));
        let po = out.as_mut_ptr();
        // Front outputs written then advanced, back outputs moved back then written.
        let (mut o1, mut e1, mut o2, mut e2) = (po, po.add(k), po.add(k), po.add(n));
        for _ in 0..h1 {
            let (x, y) = (*fa1, *fb1);
            let take_b = y < x;
            *o1 = if take_b { y } else { x };
            o1 = o1.add(1);
            fb1 = fb1.add(usize::from(take_b));
            fa1 = fa1.add(usize::from(!take_b));
            let (x, y) = (*ba1, *bb1);
            let take_a = x > y;
            e1 = e1.sub(1);
            *e1 = if take_a { x } else { y };
            ba1 = ba1.sub(usize::from(take_a));
            bb1 = bb1.sub(usize::from(!take_a));
            let (x, y) = (*fa2, *fb2);
            let take_b = y < x;
            *o2 = if take_b { y } else { x };
            o2 = o2.add(1);
            fb2 = fb2.add(usize::from(take_b));
            fa2 = fa2.add(usize::from(!take_b));
            let (x, y) = (*ba2, *bb2);
            let take_a = x > y;
            e2 = e2.sub(1);
            *e2 = if take_a { x } else { y };
            ba2 = ba2.sub(usize::from(take_a));
            bb2 = bb2.sub(usize::from(!take_a));
        }
        // Heads only move one way, so where they ended bounds where they read (checked by the
        // tests, which merge runs of every small length and random longer ones).
        debug_assert!(
            fa1.offset_from(pa) as usize <= p + 1
                && fb1.offset_from(pb) as usize <= q + 1
                && ba1.offset_from(pa) as usize <= p
                && bb1.offset_from(pb) as usize <= q
                && fa2.offset_from(pa) as usize <= na + 1
                && fb2.offset_from(pb) as usize <= nb + 1
                && (p..=na).contains(&(ba2.offset_from(pa) as usize))
                && (q..=nb).contains(&(bb2.offset_from(pb) as usize)),
            "merge2_split: a head left its half"
        );
        (
            fa1.offset_from(pa) as usize,
            fb1.offset_from(pb) as usize,
            fa2.offset_from(pa) as usize,
            fb2.offset_from(pb) as usize,
            ba2.offset_from(pa) as usize,
            bb2.offset_from(pb) as usize,
        )
    };
    let (mut i2, mut j2) = (i2, j2);
    // The second half is as long as the first or one longer: one more step of it.
    if h2 > h1 {
        let (x, y) = (a[i2], b[j2]);
        let take_b = y < x;
        out[k + h1] = if take_b { y } else { x };
        j2 += usize::from(take_b);
        i2 += usize::from(!take_b);
        let (x, y) = (a[ia2], b[jb2]);
        out[n - 1 - h1] = x.max(y);
    }
    // A half of odd length leaves its middle key: the smaller front head.
    if k % 2 == 1 {
        out[h1] = a[i1].min(b[j1]);
    }
    if (n - k) % 2 == 1 {
        out[k + h2] = a[i2].min(b[j2]);
    }
    dst[0] = START;
    dst[n + 1] = END;
}

/// Merges two runs that start with [`START`] and end with [`END`] into `dst` (their length
/// together: it gets START and END too). The smaller half is taken from the front and the
/// larger from the back in the same loop; each side is chosen by a select, not a branch.
///
/// The heads stay inside their runs without a bounds check: keys are unique and lie strictly
/// between START and END (see [`Merger::merge`]), so a front head stops at its run's END and
/// a back head at its START until the other run's heads have passed every key, and the loop
/// takes exactly as many keys as the runs hold.
#[inline]
fn merge2(a: &[u64], b: &[u64], dst: &mut [u64]) {
    let n = dst.len() - 2;
    assert!(a.len() >= 2 && b.len() >= 2 && a.len() + b.len() - 4 == n, "merge2: lengths");
    let out = &mut dst[1..=n];
    let (mut i, mut j) = (1usize, 1usize);
    let (mut ia, mut jb) = (a.len() - 2, b.len() - 2);
    for k in 0..n / 2 {
        // SAFETY: 1 <= i <= a.len() - 1 and 1 <= j <= b.len() - 1 (front heads), and
        // 0 <= ia <= a.len() - 2, 0 <= jb <= b.len() - 2 (back heads): see above; k and
        // n - 1 - k are below n = out.len().
        unsafe {
            let (x, y) = (*a.get_unchecked(i), *b.get_unchecked(j));
            let take_b = y < x;
            *out.get_unchecked_mut(k) = if take_b { y } else { x };
            j += usize::from(take_b);
            i += usize::from(!take_b);
            let (x, y) = (*a.get_unchecked(ia), *b.get_unchecked(jb));
            let take_a = x > y;
            *out.get_unchecked_mut(n - 1 - k) = if take_a { x } else { y };
            ia -= usize::from(take_a);
            jb -= usize::from(!take_a);
        }
    }
    if n % 2 == 1 {
        // The one left is the smaller of the front heads (the other, if taken from the back,
        // is larger).
        out[n / 2] = a[i].min(b[j]);
    }
    dst[0] = START;
    dst[n + 1] = END;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_like_a_sort_by_timestamp_then_index() {
        // Three runs over one timestamp array, with ties across runs.
        let ts = [5, 9, 9, 1, 9, 20, 0, 9, 9, 30];
        let runs = [(0, 3), (3, 6), (6, 10)];
        let mut out = Vec::new();
        assert!(Merger::default().merge(&ts, &runs, &mut out));
        let mut want: Vec<u32> = (0..10).collect();
        want.sort_by_key(|&i| (ts[i as usize], i));
        assert_eq!(out, want);
    }

    /// Random runs over one timestamp array, one of them long or all alike: the same order as
    /// a sort by (timestamp, index), on both paths (merged into the longest run, or all keys).
    #[test]
    fn random_runs_merge_like_a_sort() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut merger = Merger::default();
        for round in 0..300 {
            let nruns = 2 + rnd(12) as usize;
            let (mut ts, mut runs) = (Vec::new(), Vec::new());
            for k in 0..nruns {
                let len = if k == 0 && round % 2 == 0 { 200 + rnd(800) } else { 1 + rnd(40) };
                let from = ts.len() as u32;
                let mut t = rnd(50) as i64 - 25;
                for _ in 0..len {
                    t += rnd(4) as i64;
                    ts.push(t);
                }
                runs.push((from, ts.len() as u32));
            }
            // Merged runs need not be every run, nor start at 0.
            runs.remove(rnd(nruns as u64) as usize % runs.len().max(1));
            if runs.len() < 2 {
                continue;
            }
            let mut out = Vec::new();
            assert!(merger.merge(&ts, &runs, &mut out));
            let mut want: Vec<u32> = runs.iter().flat_map(|&(a, b)| a..b).collect();
            want.sort_by_key(|&i| (ts[i as usize], i));
            assert_eq!(out, want, "round {round}");
        }
    }

    /// The split merge gives what the plain one gives, on runs of every small length and
    /// random longer ones.
    #[test]
    fn split_merge_matches_the_plain_merge() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let run = |keys: &[u64]| {
            let mut v = vec![START];
            v.extend_from_slice(keys);
            v.push(END);
            v
        };
        // Under Miri (which checks the raw-pointer merge's accesses) every small length and a
        // few random ones: the whole test takes hours there.
        for round in 0..if cfg!(miri) { 430 } else { 3000 } {
            let (la, lb) = if round < 400 { (round / 20, round % 20) } else { (rnd(300) as usize, rnd(300) as usize) };
            if la + lb == 0 {
                continue;
            }
            // Unique keys >= 1, dealt at random to the two runs, each sorted.
            let mut keys: Vec<u64> = (1..=(la + lb) as u64).map(|k| k * 3 + rnd(3)).collect();
            for i in (1..keys.len()).rev() {
                keys.swap(i, rnd(i as u64 + 1) as usize);
            }
            let (mut ka, mut kb) = (keys[..la].to_vec(), keys[la..].to_vec());
            ka.sort_unstable();
            kb.sort_unstable();
            let (a, b) = (run(&ka), run(&kb));
            let mut want = vec![0; la + lb + 2];
            merge2(&a, &b, &mut want);
            let mut got = vec![0; la + lb + 2];
            merge2_split(&a, &b, &mut got);
            assert_eq!(got, want, "round {round}: {la} + {lb}");
            let mut sorted = keys.clone();
            sorted.sort_unstable();
            assert_eq!(&got[1..=la + lb], &sorted[..], "round {round}");
        }
    }

    #[test]
    fn refuses_keys_wider_than_63_bits() {
        let ts = [i64::MIN, i64::MAX];
        let mut out = Vec::new();
        assert!(!Merger::default().merge(&ts, &[(0, 1), (1, 2)], &mut out));
        assert!(out.is_empty());
        let ts = [-(1 << 60), 1 << 60];
        assert!(Merger::default().merge(&ts, &[(1, 2), (0, 1)], &mut out));
        assert_eq!(out, [0, 1]);
    }
}
