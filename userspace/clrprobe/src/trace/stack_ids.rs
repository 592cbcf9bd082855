//! Numbering the distinct stacks of a dump: the first time a stack is seen it gets the next
//! id (and is printed once), later events with the same addresses reuse it.
//!
//! The reader hands out stacks as slices of its per-region arena, and every event of a region
//! that names a stack id gets the same slice, so the slice's place is a cheap first key: a
//! direct-mapped cache from (address, length) to the id, checked against the stored stack
//! (an arena is reused after a sequence point), before the addresses are hashed.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::rc::Rc;

/// Slots of the by-place cache (a power of two).
const PLACES: usize = 1024;

/// The last stack seen at a by-place slot: the slice's address and length, its addresses, id.
type Place = (usize, usize, Rc<[u64]>, u64);

#[derive(Default)]
pub(super) struct StackIds {
    by_content: HashMap<Rc<[u64]>, u64, BuildHasherDefault<AddrHasher>>,
    by_place: Vec<Option<Place>>,
}

impl StackIds {
    /// The stack's id, and whether it is new (then the caller prints it).
    #[inline]
    pub(super) fn id(&mut self, stack: &[u64]) -> (u64, bool) {
        if self.by_place.is_empty() {
            self.by_place.resize(PLACES, None);
        }
        let (addr, len) = (stack.as_ptr() as usize, stack.len());
        let slot = (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) & (PLACES - 1);
        if let Some((a, l, s, id)) = &self.by_place[slot]
            && *a == addr
            && *l == len
            && **s == *stack
        {
            return (*id, false);
        }
        let (rc, id, new) = match self.by_content.get_key_value(stack) {
            Some((k, &id)) => (Rc::clone(k), id, false),
            None => {
                let id = self.by_content.len() as u64 + 1;
                let rc: Rc<[u64]> = Rc::from(stack);
                self.by_content.insert(Rc::clone(&rc), id);
                (rc, id, true)
            }
        };
        self.by_place[slot] = Some((addr, len, rc, id));
        (id, new)
    }
}

/// A multiply-rotate hasher for stacks of addresses (SipHash over a long stack per event
/// costs more than reading the event).
#[derive(Default)]
pub(super) struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_addresses_same_id_wherever_they_sit() {
        let mut ids = StackIds::default();
        let a = vec![1u64, 2, 3];
        let b = vec![1u64, 2, 3];
        let c = vec![4u64];
        assert_eq!(ids.id(&a), (1, true));
        assert_eq!(ids.id(&a), (1, false));
        assert_eq!(ids.id(&b), (1, false));
        assert_eq!(ids.id(&c), (2, true));
        // A slice whose place was seen before with other addresses (a reused arena).
        let mut d = a.clone();
        assert_eq!(ids.id(&d), (1, false));
        d[0] = 9;
        assert_eq!(ids.id(&d), (3, true));
        assert_eq!(ids.id(&d[..2]), (4, true));
        assert_eq!(ids.id(&a), (1, false));
    }
}
