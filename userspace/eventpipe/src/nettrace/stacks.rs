//! Stack table: stacks of the current sequence-point region, decoded once into one IP arena.

use super::bytes::{BufResult, Cursor};

/// Largest gap tolerated between the ids of consecutive stack blocks.
const MAX_ID_GAP: u64 = 1 << 20;

#[derive(Default)]
pub(crate) struct StackTable {
    /// All IPs of the region, widened to u64.
    pub(crate) ips: Vec<u64>,
    /// (start, len) into `ips` for id `base + i`.
    ranges: Vec<(u32, u32)>,
    base: u32,
    peaks: [super::keep::Peak; 2],
}

impl StackTable {
    /// Adds the stacks of one stack block body.
    pub(crate) fn add_block(&mut self, body: &[u8], pointer_size: u32) -> BufResult<()> {
        let mut c = Cursor::new(body);
        let first = c.u32("first stack id")?;
        let count = c.u32("stack count")?;
        if self.ranges.is_empty() {
            self.base = first;
        }
        if first < self.base {
            return Err(c.err("stack id below the ids already defined in this region"));
        }
        let next = u64::from(self.base) + self.ranges.len() as u64;
        let first64 = u64::from(first);
        if first64 > next {
            if first64 - next > MAX_ID_GAP {
                return Err(c.err("stack ids jump too far"));
            }
            self.ranges.resize((first64 - u64::from(self.base)) as usize, (0, 0));
        } else {
            // Redefinition of ids already present: overwrite from `first` on.
            self.ranges.truncate((first64 - u64::from(self.base)) as usize);
        }
        // Each stack needs at least its 4-byte size.
        if u64::from(count) > c.remaining() as u64 / 4 {
            return Err(c.err("stack count larger than the block"));
        }
        let psize = pointer_size as usize;
        for _ in 0..count {
            let size = c.u32("stack size")? as usize;
            let bytes = c.bytes(size, "stack bytes")?;
            if !size.is_multiple_of(psize) {
                return Err(c.err("stack size not a multiple of the pointer size"));
            }
            let start = self.ips.len();
            if psize == 8 {
                self.ips.extend(bytes.chunks_exact(8).map(|b| {
                    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
                }));
            } else {
                self.ips.extend(
                    bytes
                        .chunks_exact(4)
                        .map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
                );
            }
            let len = self.ips.len() - start;
            let (Ok(start), Ok(len)) = (u32::try_from(start), u32::try_from(len)) else {
                return Err(c.err("stack arena exceeds 4 G entries"));
            };
            self.ranges.push((start, len));
        }
        Ok(())
    }

    /// The arena range of a stack id; `None` if the id is not defined (0 = no stack).
    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<(u32, u32)> {
        let i = id.checked_sub(self.base)? as usize;
        self.ranges.get(i).copied()
    }

    pub(crate) fn clear(&mut self) {
        self.peaks[0].see(self.ips.len());
        self.peaks[1].see(self.ranges.len());
        self.ips.clear();
        self.ranges.clear();
        self.base = 0;
    }

    /// Cuts the tables back to the most they held since the last trim (see [`super::keep`]).
    pub(crate) fn trim(&mut self) {
        let [ips, ranges] = &mut self.peaks;
        ips.trim(&mut self.ips);
        ranges.trim(&mut self.ranges);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(first: u32, stacks: &[&[u64]], psize: usize) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&first.to_le_bytes());
        b.extend_from_slice(&(stacks.len() as u32).to_le_bytes());
        for s in stacks {
            b.extend_from_slice(&((s.len() * psize) as u32).to_le_bytes());
            for ip in *s {
                b.extend_from_slice(&ip.to_le_bytes()[..psize]);
            }
        }
        b
    }

    #[test]
    fn ids_resolve_across_blocks_and_restart_after_clear() {
        let mut t = StackTable::default();
        t.add_block(&block(1, &[&[1, 2], &[3]], 8), 8).unwrap();
        t.add_block(&block(3, &[&[]], 8), 8).unwrap();
        let (s, l) = t.get(2).unwrap();
        assert_eq!(&t.ips[s as usize..(s + l) as usize], &[3]);
        assert_eq!(t.get(3), Some((3, 0)));
        assert_eq!(t.get(0), None);
        assert_eq!(t.get(4), None);
        t.clear();
        t.add_block(&block(1, &[&[0xdead_beef]], 4), 4).unwrap();
        let (s, l) = t.get(1).unwrap();
        assert_eq!(&t.ips[s as usize..(s + l) as usize], &[0xdead_beef]);
    }

    #[test]
    fn bad_sizes_are_errors() {
        let mut t = StackTable::default();
        let mut b = block(1, &[&[1]], 8);
        b[8] = 7; // size 7 with 8-byte pointers
        assert!(t.add_block(&b, 8).is_err());
        assert!(t.add_block(&[1, 0, 0, 0, 255, 255, 255, 255], 8).is_err());
    }
}
