//! A fast hasher for the reader's per-event lookups by integer id (capture threads, V6 thread
//! indexes and label lists): SipHash costs more than the rest of an event's header. The
//! multiply folds the high half into the low bits the table indexes with, and a per-process
//! random seed keeps crafted ids from being chosen to collide.

use std::hash::{BuildHasher, Hasher};

#[derive(Clone, Copy)]
pub(crate) struct IdHashBuilder(u64);

impl Default for IdHashBuilder {
    fn default() -> Self {
        static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let seed = *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64) | 1);
        IdHashBuilder(seed)
    }
}

impl BuildHasher for IdHashBuilder {
    type Hasher = IdHasher;
    #[inline]
    fn build_hasher(&self) -> IdHasher {
        IdHasher(self.0)
    }
}

pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        let m = u128::from(self.0 ^ v) * 0x9e37_79b9_7f4a_7c15_u128;
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
}

pub(crate) type IdMap<K, V> = std::collections::HashMap<K, V, IdHashBuilder>;
