//! The event → sample state machine.
use std::{
    collections::HashMap,
    hash::{BuildHasher, BuildHasherDefault, Hash, Hasher},
    sync::Arc,
};

use clr_events::ClrEvent;
use clrprobe_profile::{Frame, FrameKind, LabelSet, ProfileBuilder, ProfileError, SampleType, kinds, units};

use crate::{
    EventInput, FrameSource, GcReport, GcTimeline,
    alloc::{estimate_sampled, estimate_tick},
    contention::Waits,
    exceptions::Exceptions,
    report::EventReport,
    threads::ThreadTable,
    timed::{TimedEvent, TimedEvents},
};

/// Which event kinds to turn into samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kinds {
    pub alloc: bool,
    pub exceptions: bool,
    pub contention: bool,
}

impl Kinds {
    pub const ALL: Kinds = Kinds { alloc: true, exceptions: true, contention: true };

    /// The sample types these kinds fill, in a fixed order.
    pub fn sample_types(&self) -> Vec<SampleType> {
        let mut v = Vec::new();
        if self.alloc {
            v.push(SampleType::new(kinds::ALLOC_BYTES, units::BYTES));
            v.push(SampleType::new(kinds::ALLOC_COUNT, units::COUNT));
        }
        if self.exceptions {
            v.push(SampleType::new(kinds::EXCEPTIONS, units::COUNT));
        }
        if self.contention {
            v.push(SampleType::new(kinds::CONTENTION_NS, units::NANOSECONDS));
            v.push(SampleType::new(kinds::CONTENTION_COUNT, units::COUNT));
        }
        v
    }
}

/// A sample waiting for symbolization: raw stack, a synthetic leaf (type name), values by kind.
#[derive(Debug, Clone)]
pub struct PendingSample {
    pub pid: u32,
    pub tid: u64,
    pub stack: Arc<[u64]>,
    /// Appended below the stack's leaf: the allocated or thrown type.
    pub leaf: Option<Frame>,
    /// (kind, value) pairs.
    pub values: Vec<(&'static str, i64)>,
    pub labels: Vec<(String, String)>,
}

/// Hashes of what makes two event samples the same (pid, tid, stack, leaf name, labels),
/// computed from borrowed parts so that an event adding to a known sample allocates nothing.
type IdentityHasher = BuildHasherDefault<rustc_hash::FxHasher>;

/// The hash of a sample's identity.
fn identity_hash(pid: u32, tid: u64, stack: &[u64], leaf: Option<&str>, labels: &[(&str, &str)]) -> u64 {
    let mut h = IdentityHasher::default().build_hasher();
    (pid, tid, stack, leaf).hash(&mut h);
    labels.len().hash(&mut h);
    for (k, v) in labels {
        (k, v).hash(&mut h);
    }
    h.finish()
}

/// Equal strings; the value names are constants, most often the same one (no byte compare).
#[inline]
fn same_str(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// The last [`Utf16Names::SLOTS`] UTF-16 names decoded, by their bytes: a busy app allocates
/// and throws the same few types, with the same few messages.
#[derive(Debug, Default)]
struct Utf16Names {
    slots: Vec<(Vec<u8>, String)>,
    /// The slot a new name takes once they are all used.
    next: usize,
}

impl Utf16Names {
    const SLOTS: usize = 8;

    /// `s` decoded (lossily).
    fn get(&mut self, s: clr_events::Utf16Str<'_>) -> &str {
        let raw = s.as_bytes();
        let i = match self.slots.iter().position(|(r, _)| r[..] == *raw) {
            Some(i) => i,
            None => {
                let i = if self.slots.len() < Self::SLOTS {
                    self.slots.push(Default::default());
                    self.slots.len() - 1
                } else {
                    let i = self.next;
                    self.next = (i + 1) % Self::SLOTS;
                    i
                };
                let (r, d) = &mut self.slots[i];
                r.clear();
                r.extend_from_slice(raw);
                d.clear();
                s.push_lossy(d);
                i
            }
        };
        &self.slots[i].1
    }
}

/// A recent allocation sample, by its events' identity as they come: pid, tid, the type
/// name's UTF-16 bytes (undecoded), the heap, and the stack (the sample's own, compared).
/// Direct-mapped by a hash of the identity. A busy app allocates from a few places: the name
/// decoded and hashed, its totals looked up by it and the sample's identity hashed and
/// compared were most of an allocation event's cost.
#[derive(Debug, Default)]
struct AllocMemo {
    pid: u32,
    tid: u64,
    heap: &'static str,
    raw: Vec<u8>,
    sample: u32,
    /// Index into `alloc_totals`.
    ty: u32,
}

impl AllocMemo {
    const SLOTS: usize = 32;

    fn slot(pid: u32, tid: u64, stack: &[u64], raw: &[u8]) -> usize {
        (IdentityHasher::default().hash_one((pid, tid, stack, raw)) >> 32) as usize % Self::SLOTS
    }
}

/// A recent throw's sample, by its events' identity as they come: pid, tid, the type's and
/// the message's UTF-16 bytes (undecoded), and the stack (the sample's own, compared); with
/// where its first event was counted (type, message label as decoded then, site: the stack's
/// leaf). Direct-mapped by a hash of the identity.
#[derive(Debug, Default)]
struct ThrowMemo {
    pid: u32,
    tid: u64,
    raw_type: Vec<u8>,
    raw_message: Vec<u8>,
    sample: u32,
    counted: crate::exceptions::Counted,
}

impl ThrowMemo {
    const SLOTS: usize = 64;

    fn slot(pid: u32, tid: u64, stack: &[u64], raw_type: &[u8], raw_message: &[u8]) -> usize {
        (IdentityHasher::default().hash_one((pid, tid, stack, raw_type, raw_message)) >> 32) as usize % Self::SLOTS
    }
}

/// Most events a sample gets at most: an allocation's two values, a wait's two.
const MAX_VALUES: usize = 2;

/// Most event samples kept one by one with their time (32 bytes each); past it, the
/// profile's event kinds stay aggregated without times.
pub const MAX_TIMED_EVENTS: usize = 1 << 18;

/// Collects event samples of one or more processes.
#[derive(Debug)]
pub struct EventProfiles {
    kinds: Kinds,
    samples: Vec<PendingSample>,
    /// Aggregation: identical (pid, tid, stack, leaf, labels) add up. Identity hash → the
    /// first sample of that hash; `chain[i]`: the next sample of sample i's hash.
    index: HashMap<u64, u32, IdentityHasher>,
    chain: Vec<u32>,
    /// Every event sample with its time, while there is room (`max_timed`).
    timed: TimedEvents,
    max_timed: usize,
    timed_overflow: bool,
    pub threads: ThreadTable,
    exceptions: Exceptions,
    waits: Waits,
    /// Allocated types → their index in `alloc_totals` (Fx: looked up at an allocation event
    /// [`AllocMemo`] does not know; the report sorts them).
    alloc_by_type: HashMap<String, u32, IdentityHasher>,
    /// Bytes and objects by allocated type.
    alloc_totals: Vec<(f64, f64)>,
    /// Recent allocation samples by their events' identity, [`AllocMemo::SLOTS`] of them.
    alloc_memo: Vec<Option<AllocMemo>>,
    /// … and throws' ([`ThrowMemo::SLOTS`]).
    throw_memo: Vec<Option<ThrowMemo>>,
    /// Allocated and thrown types' names lately decoded, by their UTF-16 bytes (a String per
    /// allocation event was a tenth of the aggregator's work on an allocating app; decoding
    /// one into a kept buffer ~280 instructions).
    type_names: Utf16Names,
    /// … and exceptions' messages.
    messages: Utf16Names,
    pub events: u64,
    /// Every GC seen, whatever the kinds (GC events arrive with the GC keyword).
    pub gc: GcTimeline,
    /// First and last event time (source clock), the window of the GC report.
    span: Option<(u64, u64)>,
    /// The source clock on the host's monotonic clock, set by the source: (time 0 of the
    /// source clock in host monotonic ns, measured offset of that origin from the host clock
    /// read when the session was requested). Lets GC windows meet kernel timestamps.
    pub clock: Option<(i64, i64)>,
    /// Events after this time (host monotonic ns, through `clock`; without a clock the
    /// events' times are host monotonic already, as the aggregator's) make no samples: the
    /// recording had ended.
    pub end_mono_ns: Option<i64>,
}

impl EventProfiles {
    pub fn new(kinds: Kinds) -> Self {
        Self {
            kinds,
            samples: Vec::new(),
            index: HashMap::default(),
            chain: Vec::new(),
            timed: TimedEvents::default(),
            max_timed: MAX_TIMED_EVENTS,
            timed_overflow: false,
            threads: ThreadTable::default(),
            exceptions: Exceptions::default(),
            waits: Waits::default(),
            alloc_by_type: HashMap::default(),
            alloc_totals: Vec::new(),
            alloc_memo: Vec::new(),
            throw_memo: Vec::new(),
            type_names: Utf16Names::default(),
            messages: Utf16Names::default(),
            events: 0,
            gc: GcTimeline::default(),
            span: None,
            clock: None,
            end_mono_ns: None,
        }
    }

    pub fn kinds(&self) -> Kinds {
        self.kinds
    }

    /// Keeps no event times (an always-on consumer that only aggregates: 32 bytes per event
    /// otherwise, up to [`MAX_TIMED_EVENTS`] per process).
    pub fn without_times(mut self) -> Self {
        self.max_timed = 0;
        self.timed = TimedEvents::default();
        self
    }

    /// Feeds one event.
    pub fn on_event(&mut self, ev: EventInput<'_, '_>) {
        self.events += 1;
        let (a, b) = self.span.get_or_insert((ev.time_ns, ev.time_ns));
        *a = (*a).min(ev.time_ns);
        *b = (*b).max(ev.time_ns);
        self.gc.on_event(ev.event, ev.tid, ev.time_ns);
        if let Some(end) = self.end_mono_ns
            && self.clock.map_or(0, |c| c.0).saturating_add(ev.time_ns as i64) > end
            && is_sample(ev.event)
        {
            return;
        }
        match ev.event {
            ClrEvent::ThreadCreated(t) | ClrEvent::ThreadDcEnd(t) => {
                self.threads.add_clr_thread(ev.pid, t.managed_thread_id, t.os_thread_id as u64)
            }
            ClrEvent::AllocationTick(t) if self.kinds.alloc => {
                let amount = t.allocation_amount64.unwrap_or(t.allocation_amount as u64);
                self.alloc(ev, t.type_name, heap(t.kind), estimate_tick(amount, t.object_size));
            }
            ClrEvent::AllocationSampled(s) if self.kinds.alloc => {
                self.alloc(ev, Some(s.type_name), heap(s.kind), estimate_sampled(s.object_size));
            }
            ClrEvent::ExceptionThrown(e) if self.kinds.exceptions => self.exception(ev, e.exception_type, e.message),
            ClrEvent::ContentionStart(s) if self.kinds.contention => {
                let owner = s.lock_owner_thread_id.filter(|&o| o != 0).map(|o| self.threads.owner_os_tid(ev.pid, o));
                self.waits.start(ev.pid, ev.tid, ev.time_ns, ev.stack, owner);
            }
            ClrEvent::ContentionStop(s) if self.kinds.contention => {
                if let Some(w) = self.waits.stop(ev.pid, ev.tid, ev.time_ns, s.duration_ns) {
                    let owner = w.owner.map(|o| {
                        let name = self.threads.name(ev.pid, o).map(|n| format!(" ({n})")).unwrap_or_default();
                        format!("{o}{name}")
                    });
                    let labels: &[(&str, &str)] = match &owner {
                        Some(o) => &[("lock.owner", o.as_str())],
                        None => &[],
                    };
                    let input = EventInput { stack: &w.stack, time_ns: w.start_ns, ..ev };
                    self.add(input, None, &[(kinds::CONTENTION_NS, w.duration_ns as i64), (kinds::CONTENTION_COUNT, 1)], labels);
                }
            }
            _ => {}
        }
    }

    /// A throw of the type named `raw_type` with the message `raw_message`: its counts and its
    /// sample. An identity met lately (pid, tid, stack, the type's and the message's UTF-16
    /// bytes) is found through [`ThrowMemo`], with its type and message label as decoded then
    /// (a known message keeps its label: see [`Exceptions::message_label`]).
    fn exception(&mut self, ev: EventInput<'_, '_>, raw_type: clr_events::Utf16Str<'_>, raw_message: clr_events::Utf16Str<'_>) {
        let values = [(kinds::EXCEPTIONS, 1)];
        let (ty_bytes, msg_bytes) = (raw_type.as_bytes(), raw_message.as_bytes());
        let slot = ThrowMemo::slot(ev.pid, ev.tid, ev.stack, ty_bytes, msg_bytes);
        if let Some(Some(m)) = self.throw_memo.get(slot)
            && m.pid == ev.pid
            && m.tid == ev.tid
            && m.raw_type[..] == *ty_bytes
            && m.raw_message[..] == *msg_bytes
            && self.samples.get(m.sample as usize).is_some_and(|s| *s.stack == *ev.stack)
        {
            let sample = m.sample as usize;
            self.exceptions.count_again(m.counted);
            self.add_to(sample, ev.time_ns, &values);
            return;
        }
        let (mut names, mut messages) = (std::mem::take(&mut self.type_names), std::mem::take(&mut self.messages));
        let (ty, msg) = (names.get(raw_type), messages.get(raw_message));
        let label = self.exceptions.message_label(ty, msg);
        let counted = self.exceptions.count(ty, label, ev.stack.first().copied());
        let sample = self.add(ev, Some(ty), &values, &[("exception.type", ty), ("exception.message", label)]);
        if self.throw_memo.is_empty() {
            self.throw_memo.resize_with(ThrowMemo::SLOTS, || None);
        }
        let m = self.throw_memo[slot].get_or_insert_with(ThrowMemo::default);
        (m.pid, m.tid, m.sample, m.counted) = (ev.pid, ev.tid, sample as u32, counted);
        for (to, from) in [(&mut m.raw_type, ty_bytes), (&mut m.raw_message, msg_bytes)] {
            to.clear();
            to.extend_from_slice(from);
        }
        (self.type_names, self.messages) = (names, messages);
    }

    /// An allocation of the type named `raw` (None: unknown) on `heap`: its type's totals and
    /// its sample. An identity met lately (pid, tid, stack, the type's UTF-16 bytes, heap) is
    /// found through [`AllocMemo`], without decoding the name, hashing it or the sample's
    /// identity.
    fn alloc(&mut self, ev: EventInput<'_, '_>, raw: Option<clr_events::Utf16Str<'_>>, heap: &'static str, e: crate::AllocEstimate) {
        let values = [(kinds::ALLOC_BYTES, round_i64(e.bytes)), (kinds::ALLOC_COUNT, round_i64(e.objects))];
        let bytes = raw.map_or(&[][..], |r| r.as_bytes());
        let slot = raw.map(|_| AllocMemo::slot(ev.pid, ev.tid, ev.stack, bytes));
        if let Some(Some(m)) = slot.and_then(|i| self.alloc_memo.get(i))
            && m.pid == ev.pid
            && m.tid == ev.tid
            && same_str(m.heap, heap)
            && m.raw[..] == *bytes
            && self.samples.get(m.sample as usize).is_some_and(|s| *s.stack == *ev.stack)
        {
            let (sample, ty) = (m.sample as usize, m.ty as usize);
            let t = &mut self.alloc_totals[ty];
            t.0 += e.bytes;
            t.1 += e.objects;
            self.add_to(sample, ev.time_ns, &values);
            return;
        }
        let mut names = std::mem::take(&mut self.type_names);
        let name = match raw {
            Some(n) => names.get(n),
            None => "<unknown type>",
        };
        let ty = match self.alloc_by_type.get(name) {
            Some(&i) => i,
            None => {
                self.alloc_totals.push((0.0, 0.0));
                let i = (self.alloc_totals.len() - 1) as u32;
                self.alloc_by_type.insert(name.to_owned(), i);
                i
            }
        };
        let t = &mut self.alloc_totals[ty as usize];
        t.0 += e.bytes;
        t.1 += e.objects;
        let sample = self.add(ev, Some(name), &values, &[("heap", heap)]);
        self.type_names = names;
        if let Some(i) = slot {
            if self.alloc_memo.is_empty() {
                self.alloc_memo.resize_with(AllocMemo::SLOTS, || None);
            }
            let m = self.alloc_memo[i].get_or_insert_with(AllocMemo::default);
            (m.pid, m.tid, m.heap, m.sample, m.ty) = (ev.pid, ev.tid, heap, sample as u32, ty);
            m.raw.clear();
            m.raw.extend_from_slice(bytes);
        }
    }

    /// The sample of this identity, if there is one.
    fn find(&self, hash: u64, ev: &EventInput<'_, '_>, leaf: Option<&str>, labels: &[(&str, &str)]) -> Option<usize> {
        let mut at = self.index.get(&hash).copied();
        while let Some(i) = at {
            let s = &self.samples[i as usize];
            if s.pid == ev.pid
                && s.tid == ev.tid
                && *s.stack == *ev.stack
                && s.leaf.as_ref().map(|f| f.name.as_str()) == leaf
                && s.labels.len() == labels.len()
                && s.labels.iter().zip(labels).all(|(a, b)| a.0 == b.0 && a.1 == b.1)
            {
                return Some(i as usize);
            }
            at = Some(self.chain[i as usize]).filter(|&n| n != u32::MAX);
        }
        None
    }

    /// Adds one event to the sample of its identity (pid, tid, stack, `leaf` — a synthetic
    /// frame of that name below the stack's leaf —, labels), made on first sight.
    /// The sample's index.
    fn add(&mut self, ev: EventInput<'_, '_>, leaf: Option<&str>, values: &[(&'static str, i64)], labels: &[(&'static str, &str)]) -> usize {
        debug_assert!(values.len() <= MAX_VALUES);
        let hash = identity_hash(ev.pid, ev.tid, ev.stack, leaf, labels);
        let mut timed = TimedEvent { sample: 0, time_ns: ev.time_ns, amounts: [0; MAX_VALUES], slots: [u8::MAX; MAX_VALUES] };
        let i = match self.find(hash, &ev, leaf, labels) {
            Some(i) => {
                self.add_to(i, ev.time_ns, values);
                return i;
            }
            None => {
                for (slot, (_, v)) in values.iter().enumerate().take(MAX_VALUES) {
                    (timed.slots[slot], timed.amounts[slot]) = (slot as u8, *v);
                }
                let i = self.samples.len();
                let next = self.index.insert(hash, i as u32).unwrap_or(u32::MAX);
                self.chain.push(next);
                self.samples.push(PendingSample {
                    pid: ev.pid,
                    tid: ev.tid,
                    stack: Arc::from(ev.stack),
                    leaf: leaf.map(|name| Frame::new(name.to_string(), "", FrameKind::Synthetic)),
                    values: values.to_vec(),
                    labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                });
                i
            }
        };
        self.push_timed(i, timed);
        i
    }

    /// Adds one event at `time_ns` to sample `i`.
    fn add_to(&mut self, i: usize, time_ns: u64, values: &[(&'static str, i64)]) {
        let mut timed = TimedEvent { sample: 0, time_ns, amounts: [0; MAX_VALUES], slots: [u8::MAX; MAX_VALUES] };
        let s = &mut self.samples[i];
        for (slot, &(k, v)) in values.iter().enumerate() {
            // The sample's values were made in this order (their names are distinct): the
            // same constant at the same place needs no search (the search compared the bytes
            // of "alloc-bytes" with those of "alloc-count" at every allocation event).
            let here = s.values.get(slot).is_some_and(|(kk, _)| std::ptr::eq(*kk, k));
            let pos = match if here { Some(slot) } else { s.values.iter().position(|(kk, _)| same_str(kk, k)) } {
                Some(p) => {
                    s.values[p].1 += v;
                    p
                }
                None => {
                    s.values.push((k, v));
                    s.values.len() - 1
                }
            };
            if slot < MAX_VALUES {
                (timed.slots[slot], timed.amounts[slot]) = (pos as u8, v);
            }
        }
        self.push_timed(i, timed);
    }

    fn push_timed(&mut self, i: usize, mut timed: TimedEvent) {
        if self.timed.len() >= self.max_timed {
            self.timed_overflow = true;
        }
        if !self.timed_overflow {
            timed.sample = i as u32;
            self.timed.push(timed);
        }
    }

    /// Sizes of what the profiles hold, for a long-running agent's memory census.
    pub fn census(&self) -> String {
        let frames: usize = self.samples.iter().map(|s| s.stack.len()).sum();
        format!(
            "(frames {frames} timed {} threads {:?} exceptions {}/{} waits-open {} alloc-types {} gc-records {})",
            self.timed.len(),
            self.threads.sizes(),
            self.exceptions.sizes().0,
            self.exceptions.sizes().1,
            self.waits.open_len(),
            self.alloc_by_type.len(),
            self.gc.records.len()
        )
    }

    /// Samples so far (their stacks can be pre-resolved while the process lives).
    pub fn pending(&self) -> &[PendingSample] {
        &self.samples
    }

    /// Adds every sample to `b` (whose sample types must include [`Kinds::sample_types`]),
    /// aggregated.
    pub fn write_into(&self, b: &mut ProfileBuilder, frames: &mut dyn FrameSource) -> Result<(), ProfileError> {
        self.write_into_at(b, frames, None)
    }

    /// Whether every event sample kept its time (none was dropped for room).
    pub fn has_times(&self) -> bool {
        !self.timed_overflow && self.clock.is_some()
    }

    /// [`EventProfiles::write_into`], with each event as a sample at its time (nanoseconds
    /// since `start_mono_ns` on the host's monotonic clock) when `start_mono_ns` is given and
    /// [`EventProfiles::has_times`]; else aggregated.
    pub fn write_into_at(&self, b: &mut ProfileBuilder, frames: &mut dyn FrameSource, start_mono_ns: Option<i64>) -> Result<(), ProfileError> {
        let columns: Vec<String> = b.sample_types().iter().map(|t| t.kind.clone()).collect();
        let column = |k: &str| columns.iter().position(|c| c == k);
        let at = match (start_mono_ns, self.clock) {
            (Some(start), Some((origin, _))) if !self.timed_overflow => Some((start, origin)),
            _ => None,
        };
        let mut interned = Vec::with_capacity(self.samples.len());
        for s in &self.samples {
            let mut fs = frames.frames(s.pid, &s.stack);
            if let Some(leaf) = &s.leaf {
                fs.push(leaf.clone());
            }
            let mut ids = Vec::with_capacity(fs.len());
            for f in fs {
                ids.push(b.intern_frame(f)?);
            }
            let stack = b.intern_stack(&ids)?;
            let mut labels = LabelSet::thread(s.pid, s.tid as u32);
            if let Some(n) = self.threads.name(s.pid, s.tid) {
                labels.thread_name = Some(n.into());
            }
            for (k, v) in &s.labels {
                labels = labels.with_string(k.as_str(), v.as_str());
            }
            let labels = b.intern_labels(labels)?;
            if at.is_none() {
                let mut values = vec![0i64; columns.len()];
                for (k, v) in &s.values {
                    if let Some(i) = column(k) {
                        values[i] += v;
                    }
                }
                b.add_sample(stack, &values, labels)?;
            }
            interned.push((stack, labels));
        }
        let Some((start, origin)) = at else { return Ok(()) };
        let mut values = vec![0i64; columns.len()];
        for t in self.timed.iter() {
            let s = &self.samples[t.sample as usize];
            let (stack, labels) = interned[t.sample as usize];
            values.iter_mut().for_each(|v| *v = 0);
            for (&pos, &v) in t.slots.iter().zip(&t.amounts) {
                if let Some(i) = s.values.get(usize::from(pos)).and_then(|(k, _)| column(k)) {
                    values[i] += v;
                }
            }
            let ns = origin.saturating_add(t.time_ns as i64).saturating_sub(start).max(0) as u64;
            b.add_timed_sample(stack, &values, labels, ns)?;
        }
        Ok(())
    }

    /// Counts, histograms and totals for the text report.
    pub fn report(&self) -> EventReport {
        let allocations = self.alloc_by_type.iter().map(|(t, &i)| (t.clone(), self.alloc_totals[i as usize].0, self.alloc_totals[i as usize].1)).collect();
        let mut r = EventReport::build(&self.exceptions, &self.waits, allocations);
        r.gc = GcReport::build(&self.gc, self.span.map_or(0, |(a, b)| b - a));
        r.gc.clock_origin_mono_ns = self.clock.map(|c| c.0);
        r.gc.clock_offset_ns = self.clock.map(|c| c.1);
        r
    }
}

/// `x.round() as i64` without the call to libm's `round` (the baseline x86-64 target has no
/// rounding instruction: two calls per allocation event): halves away from zero, NaN 0, out
/// of range saturated, as `round` then `as`.
#[inline]
fn round_i64(x: f64) -> i64 {
    // Every double of magnitude 2^52 or more is an integer already (NaN: 0 as well).
    if x.is_nan() || x.abs() >= 4_503_599_627_370_496.0 {
        return x as i64;
    }
    let i = x as i64;
    // Exact: the fraction of a double below 2^52.
    let f = x - i as f64;
    if f >= 0.5 {
        i + 1
    } else if f <= -0.5 {
        i - 1
    } else {
        i
    }
}

/// Events that make samples.
fn is_sample(e: &ClrEvent<'_>) -> bool {
    matches!(e, ClrEvent::AllocationTick(_) | ClrEvent::AllocationSampled(_) | ClrEvent::ExceptionThrown(_) | ClrEvent::ContentionStart(_) | ClrEvent::ContentionStop(_))
}

fn heap(k: clr_events::alloc::HeapKind) -> &'static str {
    use clr_events::alloc::HeapKind::*;
    match k {
        Soh => "SOH",
        Loh => "LOH",
        Poh => "POH",
        Other(_) => "other",
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use clr_events::{
        ClrEvent, Utf16Str,
        alloc::{AllocationTick, HeapKind},
        exceptions::{ExceptionFlags, ExceptionThrown},
    };

    use super::{EventProfiles, Kinds, round_i64};
    use crate::EventInput;

    /// A sample's identity (pid, tid, stack, leaf, labels) → its values by kind and events.
    type Sums = BTreeMap<(u32, u64, Vec<u64>, String, Vec<(String, String)>), (BTreeMap<&'static str, i64>, u64)>;

    fn utf16(s: &str) -> Vec<u8> {
        s.encode_utf16().flat_map(u16::to_le_bytes).collect()
    }

    /// Allocations and throws of identities that differ in one part each (pid, tid, stack,
    /// type, heap, message), interleaved so that the recent-identity memos are hit, missed and
    /// overwritten: every sample adds up exactly its own events.
    #[test]
    fn events_add_up_by_their_whole_identity() {
        let names: Vec<Vec<u8>> = ["A", "B", "Ä", "System.Byte[]"].iter().map(|s| utf16(s)).collect();
        let messages: Vec<Vec<u8>> = ["m1", "m2"].iter().map(|s| utf16(s)).collect();
        let stacks: [&[u64]; 3] = [&[1, 2, 3], &[1, 2, 4], &[]];
        let heaps = [HeapKind::Soh, HeapKind::Loh];
        let mut p = EventProfiles::new(Kinds::ALL);
        // (pid, tid, stack, leaf, labels) → (values by kind, events).
        let mut expected = Sums::new();
        let mut bytes_by_type: BTreeMap<String, f64> = BTreeMap::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for n in 0..20_000u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let r = seed;
            let (pid, tid) = (1 + (r & 1) as u32, 10 + ((r >> 1) & 1));
            let stack = stacks[((r >> 2) % 3) as usize];
            // Runs of the same identity as a busy app makes, and changes.
            let ty = &names[((r >> 8) % if n % 100 < 50 { 1 } else { 4 }) as usize];
            let name = String::from_utf16_lossy(&ty.chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect::<Vec<_>>());
            if (r >> 16).is_multiple_of(5) {
                let msg = &messages[((r >> 20) & 1) as usize];
                let label = if (r >> 20) & 1 == 0 { "m1" } else { "m2" };
                let e = ExceptionThrown { exception_type: Utf16Str::from_raw(ty), message: Utf16Str::from_raw(msg), eip: 0, hresult: 0, flags: ExceptionFlags::default(), clr_instance_id: 0 };
                p.on_event(EventInput { pid, tid, time_ns: n, event: &ClrEvent::ExceptionThrown(e), stack });
                let labels = vec![("exception.type".to_string(), name.clone()), ("exception.message".to_string(), label.to_string())];
                let e = expected.entry((pid, tid, stack.to_vec(), name, labels)).or_default();
                *e.0.entry(clrprobe_profile::kinds::EXCEPTIONS).or_default() += 1;
                e.1 += 1;
            } else {
                let heap = heaps[((r >> 24) & 1) as usize];
                let amount = 100_000 + (r >> 32) % 1000;
                let t = AllocationTick {
                    allocation_amount: amount as u32,
                    kind: heap,
                    clr_instance_id: Some(0),
                    allocation_amount64: Some(amount),
                    type_id: Some(0),
                    type_name: Some(Utf16Str::from_raw(ty)),
                    heap_index: Some(0),
                    address: Some(0),
                    object_size: Some(24),
                };
                p.on_event(EventInput { pid, tid, time_ns: n, event: &ClrEvent::AllocationTick(t), stack });
                let labels = vec![("heap".to_string(), super::heap(heap).to_string())];
                *bytes_by_type.entry(name.clone()).or_default() += amount as f64;
                let e = expected.entry((pid, tid, stack.to_vec(), name, labels)).or_default();
                *e.0.entry(clrprobe_profile::kinds::ALLOC_BYTES).or_default() += amount as i64;
                *e.0.entry(clrprobe_profile::kinds::ALLOC_COUNT).or_default() += round_i64(amount as f64 / 24.0);
                e.1 += 1;
            }
        }
        let mut got = Sums::new();
        let mut timed: BTreeMap<u32, u64> = BTreeMap::new();
        for t in p.timed.iter() {
            *timed.entry(t.sample).or_default() += 1;
        }
        for (i, s) in p.pending().iter().enumerate() {
            let leaf = s.leaf.as_ref().expect("a leaf").name.to_string();
            let key = (s.pid, s.tid, s.stack.to_vec(), leaf, s.labels.clone());
            let values: BTreeMap<&str, i64> = s.values.iter().copied().collect();
            assert!(got.insert(key, (values, timed.get(&(i as u32)).copied().unwrap_or(0))).is_none(), "one sample per identity");
        }
        assert_eq!(got, expected);
        let report: BTreeMap<String, f64> = p.report().allocations.into_iter().map(|(t, b, _)| (t, b)).collect();
        assert_eq!(report, bytes_by_type);
    }

    #[test]
    fn rounds_as_round_then_as() {
        let mut xs = vec![
            0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999999999999994, -0.49999999999999994, 2083.3333, 99_999.5,
            4_503_599_627_370_495.5, 4_503_599_627_370_496.0, 9_007_199_254_740_993.0, 1e300, -1e300, f64::MAX, f64::MIN,
            f64::INFINITY, f64::NEG_INFINITY, f64::NAN, f64::MIN_POSITIVE, 9.3e18, -9.3e18,
        ];
        // Halves and their neighbours, and a spread of magnitudes.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let m = (seed >> 11) as f64 / (1u64 << 53) as f64;
            let e = (seed % 70) as i32 - 10;
            let x = m * 2f64.powi(e);
            let h = (x * 2.0).floor() / 2.0;
            xs.extend([x, -x, h, -h, f64::from_bits(h.to_bits() + 1), f64::from_bits(h.to_bits().saturating_sub(1))]);
        }
        for x in xs {
            assert_eq!(round_i64(x), x.round() as i64, "{x:e}");
        }
    }
}
