//! Samples with their times, stored compactly: a thread's timed samples repeat a few keys
//! (pid, tid, name, stacks), so each distinct key is kept once and each sample is
//! (key index, time, value), 24 bytes. Holding the key in every sample cost ~110 bytes a
//! sample (its own copy of the thread name): 13 MB for 20 busy processes over a minute.
use std::collections::{HashMap, HashSet};

use super::AggKey;

#[derive(Debug, Default)]
pub struct TimedKeys {
    index: HashMap<AggKey, u32>,
    /// (key index, monotonic ns, value).
    entries: Vec<(u32, u64, u64)>,
}

impl TimedKeys {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Adds a sample of `(pid, tid, comm, kernel, user)`; the key is copied only the first time.
    #[allow(clippy::too_many_arguments)]
    pub fn push(&mut self, pid: u32, tid: u32, comm: &str, kernel: &std::sync::Arc<[u64]>, user: &std::sync::Arc<[u64]>, time: u64, value: u64) {
        let key = (pid, tid, comm.to_owned(), kernel.clone(), user.clone());
        let next = self.index.len() as u32;
        let i = *self.index.entry(key).or_insert(next);
        self.entries.push((i, time, value));
    }

    /// Every entry as (key, time, value), in the order added.
    pub fn view(&self) -> TimedView<'_> {
        let mut keys: Vec<Option<&AggKey>> = vec![None; self.index.len()];
        for (k, &i) in &self.index {
            keys[i as usize] = Some(k);
        }
        TimedView { keys, entries: &self.entries }
    }

    /// Takes out the entries of `pids` (exited processes being folded), in order.
    pub fn take_pids(&mut self, pids: &HashSet<u32>) -> Vec<(AggKey, u64, u64)> {
        if !self.index.keys().any(|k| pids.contains(&k.0)) {
            return Vec::new();
        }
        let old = std::mem::take(&mut self.index);
        let mut keys: Vec<Option<AggKey>> = vec![None; old.len()];
        // Old index → new index (u32::MAX: taken out).
        let mut remap = vec![u32::MAX; old.len()];
        for (k, i) in old {
            if pids.contains(&k.0) {
                keys[i as usize] = Some(k);
            } else {
                let next = self.index.len() as u32;
                remap[i as usize] = next;
                self.index.insert(k, next);
            }
        }
        let mut mine = Vec::new();
        self.entries.retain_mut(|e| match remap[e.0 as usize] {
            u32::MAX => {
                if let Some(k) = &keys[e.0 as usize] {
                    mine.push((k.clone(), e.1, e.2));
                }
                false
            }
            n => {
                e.0 = n;
                true
            }
        });
        keys.clear();
        mine
    }
}

/// Borrowed entries of [`TimedKeys`]: `(&key, &time, &value)`.
pub struct TimedView<'a> {
    keys: Vec<Option<&'a AggKey>>,
    entries: &'a [(u32, u64, u64)],
}

impl<'a> TimedView<'a> {
    pub fn iter(&self) -> impl Iterator<Item = (&'a AggKey, &'a u64, &'a u64)> + '_ {
        self.entries.iter().filter_map(|(i, t, v)| Some((self.keys[*i as usize]?, t, v)))
    }
}

impl<'a> IntoIterator for TimedView<'a> {
    type Item = (&'a AggKey, &'a u64, &'a u64);
    type IntoIter = std::vec::IntoIter<Self::Item>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter().collect::<Vec<_>>().into_iter()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn keys_are_kept_once_and_taking_pids_keeps_the_rest_in_order() {
        let (k, u): (Arc<[u64]>, Arc<[u64]>) = (Arc::from(vec![1u64]), Arc::from(vec![2u64, 3]));
        let mut t = TimedKeys::default();
        t.push(1, 10, "a", &k, &u, 100, 1);
        t.push(2, 20, "b", &k, &u, 110, 1);
        t.push(1, 10, "a", &k, &u, 120, 2);
        t.push(2, 21, "c", &k, &u, 130, 1);
        assert_eq!(t.index.len(), 3);
        let mine = t.take_pids(&HashSet::from([1]));
        assert_eq!(mine.iter().map(|e| (e.0.0, e.1, e.2)).collect::<Vec<_>>(), vec![(1, 100, 1), (1, 120, 2)]);
        let rest: Vec<(u32, u32, u64)> = t.view().iter().map(|(k, t, _)| (k.0, k.1, *t)).collect();
        assert_eq!(rest, vec![(2, 20, 110), (2, 21, 130)]);
        t.push(2, 20, "b", &k, &u, 140, 1);
        assert_eq!(t.index.len(), 2);
        assert_eq!(t.view().iter().last().map(|(k, t, _)| (k.1, *t)), Some((20, 140)));
    }
}
