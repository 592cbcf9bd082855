//! The stacks and thread names of the keys the aggregator keeps, stored once and allocated by
//! the aggregator's own thread.
//!
//! A record's stacks are allocated by the source that read it, among that source's records of
//! the moment, which are freed within milliseconds. A key kept for the CPU window (two minutes)
//! or for the process's life (off-CPU) held those allocations where they were, and each pinned
//! its heap page while everything around it came and went: malloc's free-but-held bytes grew
//! from minute 2 to 10 of an agent's run while its bytes in use stayed flat. Interned here, a
//! kept key's stacks are copies made together by the aggregator, shared by every key that has
//! them, and the record's own allocations all go back as soon as the record is absorbed.
use std::{collections::HashSet, hash::BuildHasherDefault, sync::Arc};

use clrprobe_profile::hash::FastHasher;

/// At least this many entries before a sweep drops the ones no key holds any more.
const SWEEP_MIN: usize = 1024;

#[derive(Default)]
pub(crate) struct Interner {
    stacks: HashSet<Arc<[u64]>, BuildHasherDefault<FastHasher>>,
    names: HashSet<Arc<str>, BuildHasherDefault<FastHasher>>,
    /// Entries after the last sweep: the next comes when there are twice as many.
    swept: usize,
}

impl Interner {
    pub(crate) fn stack(&mut self, s: &Arc<[u64]>) -> Arc<[u64]> {
        if let Some(k) = self.stacks.get(&s[..]) {
            return Arc::clone(k);
        }
        self.sweep();
        let k: Arc<[u64]> = Arc::from(&s[..]);
        self.stacks.insert(Arc::clone(&k));
        k
    }

    pub(crate) fn name(&mut self, s: &Arc<str>) -> Arc<str> {
        if let Some(k) = self.names.get(&s[..]) {
            return Arc::clone(k);
        }
        self.sweep();
        let k: Arc<str> = Arc::from(&s[..]);
        self.names.insert(Arc::clone(&k));
        k
    }

    /// Drops what only the interner still holds once the tables doubled since the last sweep.
    fn sweep(&mut self) {
        let n = self.stacks.len() + self.names.len();
        if n < SWEEP_MIN.max(self.swept * 2) {
            return;
        }
        self.stacks.retain(|k| Arc::strong_count(k) > 1);
        self.names.retain(|k| Arc::strong_count(k) > 1);
        self.stacks.shrink_to_fit();
        self.names.shrink_to_fit();
        self.swept = self.stacks.len() + self.names.len();
    }

    /// (stacks, names) held.
    pub(crate) fn len(&self) -> (usize, usize) {
        (self.stacks.len(), self.names.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_stacks_share_one_copy_and_unheld_ones_are_swept() {
        let mut i = Interner::default();
        let a: Arc<[u64]> = Arc::from(vec![1u64, 2, 3]);
        let k1 = i.stack(&a);
        let k2 = i.stack(&Arc::from(vec![1u64, 2, 3]));
        assert!(Arc::ptr_eq(&k1, &k2));
        assert!(!Arc::ptr_eq(&k1, &a), "a copy, not the record's allocation");
        let n1 = i.name(&Arc::from("main"));
        assert!(Arc::ptr_eq(&n1, &i.name(&Arc::from("main"))));
        drop((k1, k2));
        // Unheld stacks go once the tables have doubled; held ones stay.
        for x in 0..2 * SWEEP_MIN as u64 {
            drop(i.stack(&Arc::from(vec![x, 100])));
        }
        let (stacks, names) = i.len();
        assert!(stacks < SWEEP_MIN + 2, "{stacks}");
        assert_eq!(names, 1);
        assert!(!i.stacks.contains(&[1u64, 2, 3][..]));
        assert!(i.names.contains("main"));
    }
}
