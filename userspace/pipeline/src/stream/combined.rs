//! The combined profile of a recording (`record` on the pipeline): every kind in one profile
//! with `record`'s sample types (CPU samples, the event kinds, off-CPU nanoseconds), as
//! `record` has always written it. CPU samples and off-CPU intervals of the followed
//! processes are kept one by one at their times (the timeline formats), those taken without
//! a time (or beyond the room kept) stay aggregated; event samples are at their times too.
//! Work of the GC threads, and of user threads inside their own GC pauses, goes under a
//! GC root frame. Sample order is sorted, so the same state gives the same bytes.
use std::collections::HashMap;

use clrprobe_profile::{Frame, LabelSet, LabelSetId, Period, Profile, ProfileBuilder, ProfileError, SampleType, StackId, kinds, units};

use super::{
    aggregate::{Aggregator, StackKey, is_gc_thread},
    snapshot::Namer,
};
use crate::FrameSource;

/// Most timed entries kept per kind (24 bytes each, and each distinct key once); later ones
/// stay aggregated only.
const MAX_TIMED: usize = 1 << 21;

/// Timed entries of one kind: each distinct stack key kept once, each entry (key index,
/// time, value). A thread's samples repeat a few keys; a key per entry cost 72 bytes, and
/// each sample's own copy of its unwound stack and thread name stayed alive with it.
#[derive(Default)]
pub(crate) struct TimedList {
    index: rustc_hash::FxHashMap<StackKey, u32>,
    keys: Vec<StackKey>,
    /// (key index, time, value).
    entries: Vec<(u32, u64, u64)>,
    full: bool,
}

impl TimedList {
    /// Keeps an entry of `key` (untimed ones are not kept); returns the key as kept, sharing
    /// the stacks of an equal key noted before (the record's own copies are dropped).
    pub(crate) fn note(&mut self, key: StackKey, time_ns: u64, value: u64) -> StackKey {
        if time_ns == 0 || self.full {
            return key;
        }
        if self.entries.len() >= MAX_TIMED {
            self.full = true;
            return key;
        }
        let i = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                let i = self.keys.len() as u32;
                self.index.insert(key.clone(), i);
                self.keys.push(key);
                i
            }
        };
        self.entries.push((i, time_ns, value));
        self.keys[i as usize].clone()
    }

    /// Every entry as (key, time, value), in the order noted.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&StackKey, u64, u64)> + '_ {
        self.entries.iter().map(|&(i, t, v)| (&self.keys[i as usize], t, v))
    }

    /// Forgets every entry and key of `pid` (the others keep their order).
    pub(crate) fn remove_pid(&mut self, pid: u32) {
        if !self.keys.iter().any(|k| k.0 == pid) {
            return;
        }
        let mut new_index = Vec::with_capacity(self.keys.len());
        let mut kept = Vec::with_capacity(self.keys.len());
        for k in self.keys.drain(..) {
            if k.0 == pid {
                new_index.push(u32::MAX);
            } else {
                new_index.push(kept.len() as u32);
                kept.push(k);
            }
        }
        self.keys = kept;
        self.entries.retain_mut(|e| {
            e.0 = new_index[e.0 as usize];
            e.0 != u32::MAX
        });
        self.entries.shrink_to_fit();
        self.keys.shrink_to_fit();
        self.index = self.keys.iter().enumerate().map(|(i, k)| (k.clone(), i as u32)).collect();
    }

    /// Every distinct key noted.
    pub(crate) fn keys(&self) -> &[StackKey] {
        &self.keys
    }

    /// Every entry of the kind had its time kept.
    fn usable(&self) -> bool {
        !self.full && !self.entries.is_empty()
    }
}

#[derive(Default)]
pub(crate) struct Times {
    pub(crate) cpu: TimedList,
    pub(crate) offcpu: TimedList,
}

/// What the combined profile covers.
#[derive(Debug, Clone)]
pub struct CombinedOptions {
    /// The profile's time 0 (host monotonic ns): sampling began.
    pub start_mono_ns: u64,
    pub start_unix_ns: u64,
    pub duration_ns: u64,
    /// CPU samples and off-CPU time were recorded (their columns are present).
    pub cpu: bool,
    pub offcpu: bool,
    /// The root frame of GC work.
    pub gc_root: Frame,
    /// Each thread at the root of its CPU and off-CPU stacks (`--thread-roots`), as a frame
    /// `thread NAME (TID)`.
    pub thread_roots: bool,
}

/// Named stacks and label sets, each made once.
struct Build<'n> {
    b: ProfileBuilder,
    namer: &'n mut dyn Namer,
    width: usize,
    gc_root: Frame,
    thread_roots: bool,
    stacks: HashMap<(u32, StackKeyRef, bool), (StackId, Option<&'static str>)>,
    /// With thread roots: (stack, pid, tid, thread name) → the stack under its thread's frame.
    rooted: HashMap<(StackId, u32, u32, std::sync::Arc<str>), StackId>,
    /// Frames of each stack (with thread roots).
    ids_of: HashMap<StackId, Vec<clrprobe_profile::FrameId>>,
    labels: HashMap<ThreadKey, LabelSetId>,
    names: HashMap<u32, (String, Option<String>)>,
}

/// (pid, tid, thread name, wait kind) of a label set.
type ThreadKey = (u32, u32, std::sync::Arc<str>, Option<&'static str>);

/// (kernel, user) of a stack, by value (the stacks are shared `Arc`s: cheap).
type StackKeyRef = (std::sync::Arc<[u64]>, std::sync::Arc<[u64]>);

impl Build<'_> {
    fn stack(&mut self, key: &StackKey, in_gc: bool, offcpu: bool) -> Result<(StackId, Option<&'static str>), ProfileError> {
        let k = (key.0, (key.3.clone(), key.4.clone()), in_gc);
        if let Some(&v) = self.stacks.get(&k) {
            return Ok(v);
        }
        let mut frames = self.namer.stack(key.0, &key.3, &key.4);
        let wait = if offcpu { self.namer.wait_kind(&frames) } else { None };
        if in_gc {
            frames.insert(0, self.gc_root.clone());
        }
        let mut ids = Vec::with_capacity(frames.len());
        for f in frames {
            ids.push(self.b.intern_frame(f)?);
        }
        let id = self.b.intern_stack(&ids)?;
        if self.thread_roots {
            self.ids_of.insert(id, ids);
        }
        self.stacks.insert(k, (id, wait));
        Ok((id, wait))
    }

    /// `stack` under the frame of its thread.
    fn rooted(&mut self, stack: StackId, key: &StackKey) -> Result<StackId, ProfileError> {
        let k = (stack, key.0, key.1, key.2.clone());
        if let Some(&id) = self.rooted.get(&k) {
            return Ok(id);
        }
        let root = self.b.intern_frame(Frame::new(format!("thread {} ({})", key.2, key.1), String::new(), clrprobe_profile::FrameKind::Synthetic))?;
        let mut ids = vec![root];
        ids.extend_from_slice(self.ids_of.get(&stack).map_or(&[][..], Vec::as_slice));
        let id = self.b.intern_stack(&ids)?;
        self.rooted.insert(k, id);
        Ok(id)
    }

    fn labels(&mut self, key: &StackKey, wait: Option<&'static str>) -> Result<LabelSetId, ProfileError> {
        let k = (key.0, key.1, key.2.clone(), wait);
        if let Some(&id) = self.labels.get(&k) {
            return Ok(id);
        }
        let namer = &mut *self.namer;
        let (pname, container) = self.names.entry(key.0).or_insert_with(|| (namer.process_name(key.0), namer.container(key.0)));
        let mut l = LabelSet::thread(key.0, key.1);
        l.thread_name = Some(key.2.as_ref().into());
        l.process_name = Some(pname.as_str().into());
        if let Some(c) = container {
            l = l.with_string("container", c.as_str());
        }
        if let Some(w) = wait {
            l = l.with_string("wait", w);
        }
        let id = self.b.intern_labels(l)?;
        self.labels.insert(k, id);
        Ok(id)
    }

    fn add(&mut self, key: &StackKey, col: usize, value: u64, in_gc: bool, offcpu: bool, time: Option<u64>) -> Result<(), ProfileError> {
        let (mut stack, wait) = self.stack(key, in_gc || is_gc_thread(&key.2), offcpu)?;
        if self.thread_roots {
            stack = self.rooted(stack, key)?;
        }
        let labels = self.labels(key, wait)?;
        let mut values = vec![0i64; self.width];
        values[col] = value as i64;
        match time {
            Some(t) => self.b.add_timed_sample(stack, &values, labels, t),
            None => self.b.add_sample(stack, &values, labels),
        }
    }
}

/// Event stacks named through the namer (user frames only).
struct EventFrames<'a, 'n>(&'a mut (dyn Namer + 'n));

impl FrameSource for EventFrames<'_, '_> {
    fn frames(&mut self, pid: u32, stack: &[u64]) -> Vec<Frame> {
        self.0.stack(pid, &[], stack)
    }
}

impl Aggregator {
    /// Every kind of every followed process (CPU: every process sampled) in one profile, over
    /// all the time kept (a recording's aggregator keeps every bucket).
    pub fn combined_profile(&self, o: &CombinedOptions, namer: &mut dyn Namer) -> Result<Profile, ProfileError> {
        self.combined_of(o, namer, None)
    }

    /// [`Aggregator::combined_profile`] of the samples of `only` (None: of all of them).
    pub(crate) fn combined_of(&self, o: &CombinedOptions, namer: &mut dyn Namer, only: Option<u32>) -> Result<Profile, ProfileError> {
        let wanted = |pid: u32| only.is_none_or(|p| p == pid);
        let mut types = Vec::new();
        if o.cpu {
            types.push(SampleType::new(kinds::CPU, units::SAMPLES));
        }
        types.extend(self.cfg.kinds.sample_types());
        if o.offcpu {
            types.push(SampleType::new(kinds::OFF_CPU, units::NANOSECONDS));
        }
        let column = |k: &str| types.iter().position(|t| t.kind == k);
        let (cpu_col, off_col) = (column(kinds::CPU), column(kinds::OFF_CPU));
        let mut b = ProfileBuilder::new(types.clone());
        let period = 1_000_000_000 / self.cfg.freq_hz.max(1);
        if o.cpu {
            b.set_period(Period { sample_type: SampleType::new(kinds::CPU, units::NANOSECONDS), value: period as i64 });
        }
        b.set_start_time_ns(o.start_unix_ns);
        b.set_duration_ns(o.duration_ns);
        let mut build = Build { b, namer, width: types.len(), gc_root: o.gc_root.clone(), thread_roots: o.thread_roots, stacks: HashMap::new(), rooted: HashMap::new(), ids_of: HashMap::new(), labels: HashMap::new(), names: HashMap::new() };
        for p in self.procs.values().filter(|p| wanted(p.info.pid)) {
            build.names.insert(p.info.pid, (p.info.name.clone(), None));
        }
        let at = |t: u64| t.saturating_sub(o.start_mono_ns);
        // GC pauses of each (pid, suspending thread): its samples inside them are GC work.
        let mut pauses: HashMap<(u32, u32), Vec<(u64, u64)>> = HashMap::new();
        for p in self.procs.values().filter(|p| wanted(p.info.pid)) {
            for &(s, e, tid) in &p.events.gc.pauses {
                pauses.entry((p.info.pid, tid as u32)).or_default().push((s, e));
            }
        }
        let in_pause = |k: &StackKey, t: u64| pauses.get(&(k.0, k.1)).is_some_and(|w| w.iter().any(|&(s, e)| s <= t && t <= e));
        if let Some(col) = cpu_col {
            let mut merged: HashMap<&StackKey, u64> = HashMap::new();
            for bucket in &self.cpu {
                for (k, n) in bucket.samples.iter().filter(|(k, _)| wanted(k.0)) {
                    *merged.entry(k).or_insert(0) += n;
                }
            }
            let timed = &self.times.cpu;
            let mut rows: Vec<(&StackKey, u64, u64)> = Vec::new();
            if timed.usable() {
                for (k, t, n) in timed.entries().filter(|e| wanted(e.0.0)) {
                    if let Some(m) = merged.get_mut(k) {
                        *m = m.saturating_sub(n);
                    }
                    rows.push((k, t, n));
                }
                rows.sort_unstable();
            }
            let mut untimed: Vec<(&StackKey, u64)> = merged.into_iter().filter(|(_, n)| *n > 0).collect();
            untimed.sort_unstable();
            for (k, _, _) in &rows {
                build.namer.note_kernel(&k.3);
            }
            for (k, _) in &untimed {
                build.namer.note_kernel(&k.3);
            }
            for (k, t, n) in rows {
                build.add(k, col, n, in_pause(k, t), false, Some(at(t)))?;
            }
            for (k, n) in untimed {
                build.add(k, col, n, false, false, None)?;
            }
        }
        if let Some(col) = off_col {
            let timed = &self.times.offcpu;
            let mut left: HashMap<&StackKey, u64> =
                self.procs.values().filter(|p| wanted(p.info.pid)).flat_map(|p| p.offcpu.iter().map(|(k, v)| (k, v.0))).collect();
            let mut rows: Vec<(&StackKey, u64, u64)> = Vec::new();
            if timed.usable() {
                for (k, t, ns) in timed.entries().filter(|e| wanted(e.0.0)) {
                    if let Some(m) = left.get_mut(k) {
                        *m = m.saturating_sub(ns);
                    }
                    rows.push((k, t, ns));
                }
                rows.sort_unstable();
            }
            let mut untimed: Vec<(&StackKey, u64)> = left.into_iter().filter(|(_, n)| *n > 0).collect();
            untimed.sort_unstable();
            for (k, _, _) in &rows {
                build.namer.note_kernel(&k.3);
            }
            for (k, _) in &untimed {
                build.namer.note_kernel(&k.3);
            }
            for (k, t, ns) in rows {
                build.add(k, col, ns, false, true, Some(at(t)))?;
            }
            for (k, ns) in untimed {
                build.add(k, col, ns, false, true, None)?;
            }
        }
        // Allocation, exception and contention samples at their times (when every one kept it).
        let Build { mut b, namer, .. } = build;
        for p in self.procs.values().filter(|p| wanted(p.info.pid)) {
            p.events.write_into_at(&mut b, &mut EventFrames(namer), Some(o.start_mono_ns.min(i64::MAX as u64) as i64))?;
        }
        Ok(b.build())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use clrprobe_profile::{Frame, FrameKind};

    use super::CombinedOptions;
    use crate::stream::{Aggregator, AggregatorConfig, ProcessInfo, Record, StackRecord, TestNames as Names};

    fn sample(pid: u32, comm: &str, t: u64, leaf: u64) -> StackRecord {
        StackRecord { pid, tid: pid + 1, comm: comm.into(), time_ns: t, kernel: Arc::from(vec![]), user: Arc::from(vec![leaf]), count: 1 }
    }

    #[test]
    fn timed_samples_of_one_key_keep_one_copy_of_its_stacks() {
        let mut t = super::TimedList::default();
        let key = |leaf: u64| (7u32, 8u32, Arc::<str>::from("main"), Arc::<[u64]>::from(vec![]), Arc::<[u64]>::from(vec![leaf, 2, 3]));
        let first = t.note(key(1), 10, 1);
        // An equal key from another sample: its own copies are dropped, the first kept.
        let again = t.note(key(1), 20, 1);
        assert!(Arc::ptr_eq(&first.4, &again.4) && Arc::ptr_eq(&first.2, &again.2));
        let other = t.note(key(5), 30, 2);
        assert!(!Arc::ptr_eq(&first.4, &other.4));
        // Untimed: not kept.
        t.note(key(1), 0, 1);
        assert_eq!(t.keys().len(), 2);
        let entries: Vec<(u64, u64, u64)> = t.entries().map(|(k, time, v)| (k.4[0], time, v)).collect();
        assert_eq!(entries, vec![(1, 10, 1), (1, 20, 1), (5, 30, 2)]);
    }

    #[test]
    fn followed_samples_keep_their_times_the_rest_are_aggregated_and_gc_threads_sit_under_the_gc_root() {
        let cfg = AggregatorConfig { keep_times: true, buckets: usize::MAX, exited_grace_ns: u64::MAX, ..AggregatorConfig::default() };
        let mut a = Aggregator::new(cfg);
        a.absorb(Record::Started(ProcessInfo { pid: 7, name: "app".into(), ..ProcessInfo::default() }));
        for r in [
            Record::Cpu(sample(7, "main", 2_000, 1)),
            Record::Cpu(sample(7, "main", 3_000, 1)),
            Record::Cpu(sample(7, ".NET Server GC", 2_500, 2)),
            // Not followed: aggregated, without a time.
            Record::Cpu(sample(9, "other", 2_000, 3)),
            Record::OffCpu(StackRecord { count: 500, ..sample(7, "main", 2_200, 4) }),
            Record::Tick { time_ns: 4_000 },
        ] {
            a.absorb(r);
        }
        let o = CombinedOptions { start_mono_ns: 1_000, start_unix_ns: 5, duration_ns: 3_000, cpu: true, offcpu: true, gc_root: Frame::new("GC", "", FrameKind::Synthetic), thread_roots: false };
        let p = a.combined_profile(&o, &mut Names).unwrap();
        let kinds: Vec<&str> = p.sample_types().iter().map(|t| t.kind.as_str()).collect();
        assert_eq!(kinds.first(), Some(&clrprobe_profile::kinds::CPU));
        assert_eq!(kinds.last(), Some(&clrprobe_profile::kinds::OFF_CPU));
        let (cpu, off) = (0, kinds.len() - 1);
        let mut timed: Vec<(u64, i64, String)> = Vec::new();
        let mut untimed = Vec::new();
        for s in p.samples() {
            let frames: Vec<String> = p.stack(s.stack).unwrap().iter().map(|&f| p.frame(f).unwrap().name.to_string()).collect();
            let v = if s.values[cpu] != 0 { s.values[cpu] } else { s.values[off] };
            match s.timestamp_ns {
                Some(t) => timed.push((t, v, frames.join(";"))),
                None => untimed.push((v, frames.join(";"))),
            }
        }
        timed.sort();
        assert_eq!(
            timed,
            vec![(1_000, 1, "f_1".into()), (1_200, 500, "f_4".into()), (1_500, 1, "GC;f_2".into()), (2_000, 1, "f_1".into())],
            "times relative to the start; off-CPU ns; GC threads under the GC root"
        );
        assert_eq!(untimed, vec![(1, "f_3".into())]);
        assert_eq!((p.start_time_ns(), p.duration_ns()), (5, 3_000));
        // The same state gives the same profile.
        let again = a.combined_profile(&o, &mut Names).unwrap();
        assert_eq!(again.samples().count(), p.samples().count());
        // --thread-roots: every CPU and off-CPU stack under its thread.
        let rooted = a.combined_profile(&CombinedOptions { thread_roots: true, ..o }, &mut Names).unwrap();
        let roots: std::collections::BTreeSet<String> =
            rooted.samples().map(|s| rooted.frame(rooted.stack(s.stack).unwrap()[0]).unwrap().name.to_string()).collect();
        assert_eq!(roots.into_iter().collect::<Vec<_>>(), vec!["thread .NET Server GC (8)", "thread main (8)", "thread other (10)"]);
    }
}
