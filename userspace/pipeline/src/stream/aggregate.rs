//! The aggregator: absorbs records one at a time and owns all per-process state. CPU samples
//! go into one-second buckets kept for [`AggregatorConfig::buckets`] seconds (a rolling
//! window, host-wide; in the agent only while a request holds them: see `cpu_hold`); allocation, exception, contention and off-CPU samples add up per
//! followed .NET process (cumulative, as Go's profiles are) and go when the process has
//! exited and its grace period passed; counters likewise.
use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::Arc,
};

use clr_events::{ClrEvent, Family, RawEvent, decode_as, providers};
use rustc_hash::FxHashMap;

use super::{
    counters::Counters,
    records::{ClrRecord, ProcessInfo, Record, StackRecord},
};
use crate::{EventInput, EventProfiles, Kinds};

/// (pid, tid, thread name, kernel stack, user stack).
pub type StackKey = (u32, u32, Arc<str>, Arc<[u64]>, Arc<[u64]>);

#[derive(Debug, Clone)]
pub struct AggregatorConfig {
    /// CPU sampling frequency (the period of a CPU sample).
    pub freq_hz: u64,
    /// Length of one CPU bucket, ns.
    pub bucket_ns: u64,
    /// CPU buckets kept (the longest `?seconds=` window).
    pub buckets: usize,
    /// How long an exited process's series and profiles stay (so a last scrape sees them).
    pub exited_grace_ns: u64,
    /// Most distinct off-CPU stacks kept per process; more are counted as lost.
    pub max_offcpu_keys: usize,
    /// Most distinct CPU stacks per bucket; more are counted as lost.
    pub max_cpu_keys: usize,
    /// Event kinds turned into samples.
    pub kinds: Kinds,
    /// Host monotonic → Unix time (ns), for profile start times.
    pub unix_offset_ns: i64,
    /// Keep every finished GC in the processes' timelines (replay: the whole recording's GC
    /// report); a long-running agent forgets them once counted.
    pub keep_gc_history: bool,
    /// Runtime events stamped after this time (host monotonic ns) make no samples (replay of
    /// a recording that ended before its processes did).
    pub events_end_ns: Option<u64>,
    /// `dotnet_gc_heap_total_allocated` from the runtime's `alloc-rate` counter (exact: the
    /// sources ask for the counters), not from AllocationTick amounts.
    pub alloc_bytes_from_counters: bool,
    /// Keep each followed process's CPU samples and off-CPU intervals with their times, and
    /// its events' times (a recording's timeline: see [`Aggregator::combined_profile`]).
    pub keep_times: bool,
    /// CPU samples go into buckets only while a request holds them (the agent: see
    /// [`Aggregator::hold_cpu`]); false: a rolling window of `buckets` seconds.
    pub cpu_on_request: bool,
}

impl Default for AggregatorConfig {
    fn default() -> Self {
        Self {
            freq_hz: 99,
            bucket_ns: 1_000_000_000,
            buckets: 120,
            exited_grace_ns: 30_000_000_000,
            max_offcpu_keys: 20_000,
            max_cpu_keys: 50_000,
            kinds: Kinds::ALL,
            unix_offset_ns: 0,
            keep_gc_history: false,
            events_end_ns: None,
            alloc_bytes_from_counters: false,
            keep_times: false,
            cpu_on_request: false,
        }
    }
}

/// The agent's own health, beside what it measures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Health {
    pub records: u64,
    /// Lost data by source (increments summed).
    pub lost: BTreeMap<&'static str, u64>,
    pub decode_errors: u64,
    pub processes_followed: u64,
    pub processes_exited: u64,
}

pub(crate) struct Bucket {
    pub start_ns: u64,
    /// Fx, as the other maps a sample's key is looked up in: SipHash over a key's two
    /// stacks at every sample and interval (three times with the timed list's index).
    pub samples: FxHashMap<StackKey, u64>,
}

pub(crate) struct Proc {
    pub info: ProcessInfo,
    pub counters: Counters,
    pub events: EventProfiles,
    pub exited_at: Option<u64>,
    /// Off-CPU per (tid, comm, kernel, user): (ns, intervals).
    pub offcpu: FxHashMap<StackKey, (u64, u64)>,
    pauses_read: usize,
    contention_start: FxHashMap<u64, u64>,
    /// Timed CPU samples (tid, time, count) waiting until the GC events of their time arrived.
    timed: VecDeque<(u32, u64, u64)>,
    /// GC pauses (start, end, suspending tid) that timed samples may still fall into.
    windows: VecDeque<(u64, u64, u64)>,
    /// The newest event of each thread: the runtime delivers a thread's events in order, so
    /// every event (pause) of a thread up to this time has arrived. Other threads' events say
    /// nothing of it (their buffers are flushed apart, seconds apart on a loaded host).
    thread_events_ns: FxHashMap<u64, u64>,
    /// tid → (comm, CPU ns at first sight, CPU ns now).
    pub(crate) threads: HashMap<u32, (Arc<str>, u64, u64)>,
    /// The process's CPU time (user + system) when first read (the start of its window).
    pub(crate) cpu_first_ns: Option<u64>,
    /// Allocation events sampled in slices (None: all of them).
    pub alloc_slices: Option<AllocSlices>,
}

/// The slices of time a process's allocation events were collected in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocSlices {
    /// The first slice's start.
    pub first_ns: u64,
    /// Time covered by closed slices.
    pub covered_ns: u64,
    /// The open slice's start.
    pub open_since: Option<u64>,
}

impl AllocSlices {
    /// Time followed since the first slice over time covered by slices, at `now` (1 before
    /// any time was covered): what the events' counts and bytes are multiplied by.
    pub fn scale(&self, now: u64) -> f64 {
        let covered = self.covered_ns + self.open_since.map_or(0, |s| now.saturating_sub(s));
        let span = now.saturating_sub(self.first_ns);
        if covered == 0 || span <= covered { 1.0 } else { span as f64 / covered as f64 }
    }
}

/// The dedicated GC threads of CoreCLR by their (15-byte) names.
pub fn is_gc_thread(comm: &str) -> bool {
    comm.starts_with(".NET Server GC") || comm.starts_with(".NET BGC")
}


/// Timed samples this much older than the last tick are checked whatever events have arrived
/// (a thread with no events since: it ran no GC of its own meanwhile, or its events lag far
/// behind).
const TIMED_HOLD_NS: u64 = 30_000_000_000;

pub struct Aggregator {
    pub(crate) cfg: AggregatorConfig,
    pub(crate) now_ns: u64,
    pub(crate) first_ns: Option<u64>,
    /// The latest tick: CPU samples taken before it have all arrived.
    pub(crate) sampled_ns: u64,
    pub(crate) procs: BTreeMap<u32, Proc>,
    pub(crate) cpu: VecDeque<Bucket>,
    pub health: Health,
    jit: Vec<(u32, u64, u32, String)>,
    new_stacks: Vec<(u32, Arc<[u64]>)>,
    /// CPU samples and off-CPU intervals stamped after this are left out (a recording's end).
    pub(crate) samples_end_ns: Option<u64>,
    /// Timed CPU samples and off-CPU intervals of followed processes (`keep_times`).
    pub(crate) times: super::combined::Times,
    /// The pending requests' holds on CPU buckets (`cpu_on_request`).
    pub(crate) cpu_holds: super::cpu_hold::CpuHolds,
    /// Providers met lately: see [`ProviderCache`].
    providers: ProviderCache,
}

/// The providers of the runtime events met lately, by their shared name (a source shares one
/// `Arc<str>` per provider among its events: compared by address; each held, so no other
/// name takes its address meanwhile): their decoders' family and whether the name is the
/// runtime's as spelt (allocation events). Provider names compared per event (twice) were
/// most of the string compares in an aggregator's profile.
#[derive(Default)]
struct ProviderCache {
    known: Vec<(Arc<str>, Family, bool)>,
}

impl ProviderCache {
    /// Names held at most (a source's providers: a few per process).
    const MAX: usize = 64;

    fn get(&mut self, provider: &Arc<str>) -> (Family, bool) {
        if let Some(k) = self.known.iter().find(|k| Arc::ptr_eq(&k.0, provider)) {
            return (k.1, k.2);
        }
        if self.known.len() >= Self::MAX {
            self.known.clear();
        }
        let k = (Family::of(provider), **provider == *providers::RUNTIME);
        self.known.push((Arc::clone(provider), k.0, k.1));
        k
    }
}

impl Aggregator {
    pub fn new(cfg: AggregatorConfig) -> Self {
        Self {
            cfg,
            now_ns: 0,
            first_ns: None,
            sampled_ns: 0,
            procs: BTreeMap::new(),
            cpu: VecDeque::new(),
            health: Health::default(),
            jit: Vec::new(),
            new_stacks: Vec::new(),
            samples_end_ns: None,
            times: Default::default(),
            cpu_holds: Default::default(),
            providers: ProviderCache::default(),
        }
    }

    pub fn config(&self) -> &AggregatorConfig {
        &self.cfg
    }

    /// The sources' clock as last seen (host monotonic ns).
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Followed processes (exited ones included until let go).
    pub fn processes(&self) -> impl Iterator<Item = (&ProcessInfo, &Counters, bool)> + '_ {
        self.procs.values().map(|p| (&p.info, &p.counters, p.exited_at.is_some()))
    }

    /// Each followed process's event report (exceptions, contention, allocations, GCs).
    pub fn event_reports(&self) -> Vec<(u32, crate::EventReport)> {
        self.procs.values().map(|p| (p.info.pid, p.events.report())).collect()
    }

    /// A recording's timed CPU samples of the followed processes: (stack key, host
    /// monotonic ns, count), in arrival order (`keep_times`).
    pub fn timed_cpu(&self) -> impl Iterator<Item = (&StackKey, u64, u64)> + '_ {
        self.times.cpu.entries()
    }

    /// … and off-CPU intervals: (stack key, start, ns off CPU).
    pub fn timed_offcpu(&self) -> impl Iterator<Item = (&StackKey, u64, u64)> + '_ {
        self.times.offcpu.entries()
    }

    /// Sizes of the per-process and windowed state, for a long-running agent's memory census.
    pub fn census(&self) -> String {
        let keys: usize = self.cpu.iter().map(|b| b.samples.len()).sum();
        let mut out = format!("cpu buckets {} keys {keys} holds {}; lost {:?}", self.cpu.len(), self.cpu_holds.len(), self.health.lost);
        for p in self.procs.values() {
            out.push_str(&format!(
                "; pid {}: event samples {} offcpu {} threads {} timed {} windows {} thread-events {} contention {} gc-pauses {} {}",
                p.info.pid,
                p.events.pending().len(),
                p.offcpu.len(),
                p.threads.len(),
                p.timed.len(),
                p.windows.len(),
                p.thread_events_ns.len(),
                p.contention_start.len(),
                p.events.gc.pauses.len(),
                p.events.census(),
            ));
        }
        out
    }

    /// Is `pid` a followed .NET process (exited ones until let go)?
    pub fn follows(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// A recording's end: its event samples' threads named by the names /proc and the
    /// samples gave them, as `record` names them at its end (lock owners named in the events
    /// stay as they were: by tid).
    pub fn name_event_threads(&mut self) {
        for p in self.procs.values_mut() {
            let pid = p.info.pid;
            for (tid, t) in &p.threads {
                p.events.threads.set_name(pid, u64::from(*tid), t.0.to_string());
            }
        }
        for k in self.times.cpu.keys().iter().chain(self.times.offcpu.keys()) {
            if let Some(p) = self.procs.get_mut(&k.0)
                && p.events.threads.name(k.0, u64::from(k.1)).is_none()
            {
                p.events.threads.set_name(k.0, u64::from(k.1), k.2.to_string());
            }
        }
    }

    /// Method code ranges from MethodLoadVerbose / rundown since the last call:
    /// (pid, start, size, `Namespace::Method`), for the symbolizer.
    pub fn take_jit_methods(&mut self) -> Vec<(u32, u64, u32, String)> {
        std::mem::take(&mut self.jit)
    }

    /// Event stacks not seen before (to be named while their process lives).
    pub fn take_new_stacks(&mut self) -> Vec<(u32, Arc<[u64]>)> {
        std::mem::take(&mut self.new_stacks)
    }

    /// [`Aggregator::absorb`] of a [`Record::ClrBatch`] whose records the caller keeps (to
    /// give their buffers back to the source).
    pub fn absorb_clr_batch(&mut self, records: &[ClrRecord]) {
        self.health.records += 1;
        for c in records {
            self.clr(c);
        }
    }

    pub fn absorb(&mut self, r: Record) {
        self.health.records += 1;
        match r {
            Record::Cpu(s) => self.cpu_sample(s),
            Record::OffCpu(s) => self.offcpu(s),
            Record::Clr(c) => self.clr(&c),
            Record::ClrBatch(v) => {
                for c in &v {
                    self.clr(c);
                }
            }
            Record::Counter { pid, name, value } => {
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.counters.on_counter(&name, value);
                }
            }
            Record::Started(info) => self.started(info),
            Record::Exited { pid, time_ns } => {
                if let Some(p) = self.procs.get_mut(&pid)
                    && p.exited_at.is_none()
                {
                    p.exited_at = Some(time_ns.max(self.now_ns));
                    self.health.processes_exited += 1;
                }
            }
            Record::ThreadCpu { pid, tid, comm, cpu_ns } => {
                if let Some(p) = self.procs.get_mut(&pid) {
                    let e = p.threads.entry(tid).or_insert((comm.clone(), cpu_ns, cpu_ns));
                    e.0 = comm;
                    e.2 = cpu_ns.max(e.2);
                    p.counters.gc_threads_cpu_ns =
                        p.threads.values().filter(|t| is_gc_thread(&t.0)).map(|t| t.2.saturating_sub(t.1)).sum();
                }
            }
            Record::ProcessCpu { pid, user_ns, system_ns } => {
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.counters.cpu_user_ns = user_ns.max(p.counters.cpu_user_ns);
                    p.counters.cpu_system_ns = system_ns.max(p.counters.cpu_system_ns);
                    p.cpu_first_ns.get_or_insert(user_ns + system_ns);
                }
            }
            Record::Lost { pid, source, count } => {
                *self.health.lost.entry(source).or_insert(0) += count;
                if source == "eventpipe"
                    && let Some(p) = pid.and_then(|pid| self.procs.get_mut(&pid))
                {
                    p.counters.dropped_events += count;
                }
            }
            Record::AllocSampling { pid, time_ns, on } => {
                self.advance(time_ns);
                if let Some(p) = self.procs.get_mut(&pid) {
                    let s = p.alloc_slices.get_or_insert(AllocSlices { first_ns: time_ns, ..AllocSlices::default() });
                    match (on, s.open_since) {
                        (true, None) => s.open_since = Some(time_ns),
                        (false, Some(start)) => {
                            s.covered_ns += time_ns.saturating_sub(start);
                            s.open_since = None;
                        }
                        _ => {}
                    }
                }
            }
            Record::Tick { time_ns } => self.tick(time_ns),
        }
    }

    /// Is the sample stamped after the recording's end (untimed ones never are)?
    fn after_end(&self, s: &StackRecord) -> bool {
        self.samples_end_ns.is_some_and(|e| s.time_ns != 0 && s.time_ns > e)
    }

    fn advance(&mut self, t: u64) {
        if t > self.now_ns {
            self.now_ns = t;
        }
        self.first_ns.get_or_insert(t);
    }

    fn started(&mut self, info: ProcessInfo) {
        let pid = info.pid;
        // A reused pid, or a process found again: start afresh only if the old one exited.
        if self.procs.get(&pid).is_some_and(|p| p.exited_at.is_none()) {
            self.procs.get_mut(&pid).expect("present").info = info;
            return;
        }
        self.health.processes_followed += 1;
        // Profiles here are aggregates: no per-event times, unless a recording keeps them
        // (event times are on the host's clock already: origin 0).
        let mut events = EventProfiles::new(self.cfg.kinds);
        if self.cfg.keep_times {
            events.clock = Some((0, 0));
        } else {
            events = events.without_times();
        }
        events.end_mono_ns = self.cfg.events_end_ns.map(|t| t.min(i64::MAX as u64) as i64);
        self.procs.insert(
            pid,
            Proc {
                info,
                counters: Counters::default(),
                events,
                exited_at: None,
                offcpu: FxHashMap::default(),
                pauses_read: 0,
                contention_start: FxHashMap::default(),
                timed: VecDeque::new(),
                windows: VecDeque::new(),
                thread_events_ns: FxHashMap::default(),
                threads: HashMap::new(),
                cpu_first_ns: None,
                alloc_slices: None,
            },
        );
    }

    fn bucket(&mut self, t: u64) -> Option<&mut Bucket> {
        let b = self.cfg.bucket_ns.max(1);
        let start = t / b * b;
        let window = b.saturating_mul(self.cfg.buckets.max(1) as u64);
        // Buckets in time order, one per second that had samples, within the window of
        // the newest; a late sample gets its own second's bucket while the window holds it
        // (the first drain brings samples older than the first record).
        let newest = self.cpu.back().map_or(start, |k| k.start_ns.max(start));
        if start.saturating_add(window) <= newest {
            return None;
        }
        let at = self.cpu.iter().rposition(|k| k.start_ns <= start);
        let i = match at {
            Some(i) if self.cpu[i].start_ns == start => i,
            _ => {
                let i = at.map_or(0, |i| i + 1);
                self.cpu.insert(i, Bucket { start_ns: start, samples: FxHashMap::default() });
                let mut i = i;
                while self.cpu.front().is_some_and(|k| k.start_ns.saturating_add(window) <= newest) {
                    self.cpu.pop_front();
                    i -= 1;
                }
                i
            }
        };
        self.cpu.get_mut(i)
    }

    fn cpu_sample(&mut self, s: StackRecord) {
        if self.after_end(&s) {
            return;
        }
        // Untimed samples (perf fallback, or times off) belong to the drain's moment.
        let t = if s.time_ns == 0 { self.now_ns } else { s.time_ns };
        self.advance(t);
        if let Some(p) = self.procs.get_mut(&s.pid) {
            p.counters.cpu_samples += s.count;
            if s.time_ns != 0 && !is_gc_thread(&s.comm) {
                p.timed.push_back((s.tid, s.time_ns, s.count));
            }
        }
        let max = self.cfg.max_cpu_keys;
        let key = (s.pid, s.tid, s.comm, s.kernel, s.user);
        // Kept with its time: the bucket shares the kept key's stacks.
        let key = if self.cfg.keep_times && self.procs.contains_key(&s.pid) { self.times.cpu.note(key, s.time_ns, s.count) } else { key };
        if !self.cpu_wanted(t) {
            return;
        }
        let Some(b) = self.bucket(t) else {
            *self.health.lost.entry("cpu-too-late").or_insert(0) += s.count;
            return;
        };
        if let Some(n) = b.samples.get_mut(&key) {
            *n += s.count;
        } else if b.samples.len() < max {
            b.samples.insert(key, s.count);
        } else {
            *self.health.lost.entry("cpu-keys-full").or_insert(0) += s.count;
        }
    }

    fn offcpu(&mut self, mut s: StackRecord) {
        if self.after_end(&s) {
            return;
        }
        // An interval that began before a recording's end counts up to the end (the sources'
        // last drain, after the sessions stopped, brings intervals that lasted past it).
        if let Some(end) = self.samples_end_ns
            && s.time_ns != 0
        {
            s.count = s.count.min(end.saturating_sub(s.time_ns));
            if s.count == 0 {
                return;
            }
        }
        self.advance(s.time_ns);
        let max = self.cfg.max_offcpu_keys;
        let Some(p) = self.procs.get_mut(&s.pid) else { return };
        p.counters.offcpu_ns += s.count;
        let key = (s.pid, s.tid, s.comm, s.kernel, s.user);
        let key = if self.cfg.keep_times { self.times.offcpu.note(key, s.time_ns, s.count) } else { key };
        if let Some(v) = p.offcpu.get_mut(&key) {
            v.0 += s.count;
            v.1 += 1;
        } else if p.offcpu.len() < max {
            p.offcpu.insert(key, (s.count, 1));
        } else {
            *self.health.lost.entry("offcpu-keys-full").or_insert(0) += 1;
        }
    }

    fn clr(&mut self, c: &ClrRecord) {
        self.advance(c.time_ns);
        let Some(p) = self.procs.get_mut(&c.pid) else { return };
        let (family, runtime) = self.providers.get(&c.provider);
        let raw = RawEvent { provider: &c.provider, event_id: c.event_id, version: c.version, payload: &c.payload, pointer_size: c.pointer_size };
        // Borrowed where it was decoded (moved out of its Result, an event was a memcpy of
        // the largest kind's size: a thirtieth of the work per event).
        let decoded = decode_as(family, &raw);
        let ev = match &decoded {
            Ok(ClrEvent::Unknown) => return,
            Ok(e) => e,
            Err(_) => {
                p.counters.decode_errors += 1;
                self.health.decode_errors += 1;
                return;
            }
        };
        // Allocation events may come from a second session (slices), whose stream runs apart
        // from the first's: they say nothing of which GC events of their thread arrived.
        if !(runtime && super::wanted::allocation_id(c.event_id)) {
            let last = p.thread_events_ns.entry(c.tid).or_insert(0);
            *last = (*last).max(c.time_ns);
        }
        p.counters.on_event(ev);
        match ev {
            ClrEvent::MethodLoadVerbose(m) | ClrEvent::MethodDcStartVerbose(m) | ClrEvent::MethodDcEndVerbose(m)
                if m.start_address != 0 && m.size != 0 =>
            {
                // `Namespace::Name`, or the name alone: decoded into one String (two decoded
                // apart, then formatted, were a twentieth of a recording's aggregator work,
                // most of it at the rundown).
                let units = m.namespace.map_or(0, |s| s.len_units()) + 2 + m.name.map_or(0, |s| s.len_units());
                let mut full = String::with_capacity(units);
                if let Some(ns) = m.namespace {
                    ns.push_lossy(&mut full);
                }
                if !full.is_empty() {
                    full.push_str("::");
                }
                if let Some(name) = m.name {
                    name.push_lossy(&mut full);
                }
                self.jit.push((c.pid, m.start_address, m.size, full));
            }
            ClrEvent::ContentionStart(_) => {
                p.contention_start.insert(c.tid, c.time_ns);
            }
            ClrEvent::ContentionStop(s) => {
                let start = p.contention_start.remove(&c.tid);
                let ns = match (s.duration_ns, start) {
                    (Some(d), _) if d > 0.0 => d as u64,
                    (_, Some(t0)) => c.time_ns.saturating_sub(t0),
                    _ => 0,
                };
                p.counters.contention_ns += ns;
            }
            _ => {}
        }
        let before = p.events.pending().len();
        p.events.on_event(EventInput { pid: c.pid, tid: c.tid, time_ns: c.time_ns, event: ev, stack: &c.stack });
        // A new sample's stack (the consumer keeps which addresses it has named).
        if p.events.pending().len() != before && !c.stack.is_empty() {
            self.new_stacks.push((c.pid, c.stack.clone()));
        }
        // New GC pauses: counted, and kept as windows for the timed CPU samples.
        let gc = &p.events.gc;
        for &(s, e, tid) in gc.pauses.iter().skip(p.pauses_read) {
            p.counters.on_pause(e - s);
            p.windows.push_back((s, e, tid));
        }
        p.pauses_read = gc.pauses.len();
        if !self.cfg.keep_gc_history && p.events.gc.forget_finished() {
            p.pauses_read = 0;
        }
    }

    /// Checks timed samples against the GC pauses, rolls windows, lets exited processes go.
    fn tick(&mut self, t: u64) {
        self.advance(t);
        let now = self.now_ns;
        let period_ns = 1_000_000_000 / self.cfg.freq_hz.max(1);
        // Every sample taken before the tick's time has been sent before it.
        self.sampled_ns = self.sampled_ns.max(t);
        let sampled = self.sampled_ns;
        for p in self.procs.values_mut() {
            // An exited process's last events have arrived a second after its exit.
            let finished = p.exited_at.is_some_and(|x| now >= x.saturating_add(1_000_000_000));
            // A sample is checked once its thread's events up to its time have all arrived.
            let held_before = if finished { u64::MAX } else { sampled.saturating_sub(TIMED_HOLD_NS) };
            let events = &p.thread_events_ns;
            let ready = |tid: u32, time: u64| time <= held_before || events.get(&u64::from(tid)).is_some_and(|&t| time <= t);
            // A suspension not yet ended may still cover its thread's samples after its start
            // (a long blocking GC: the GC's own events arrive long before the restart).
            let open = if finished { None } else { p.events.gc.open_suspension() };
            // Samples arrive in no particular order (a drain reads a hash map).
            let windows = &p.windows;
            let mut gc_ns = 0;
            p.timed.retain(|&(tid, time, count)| {
                let in_open = open.is_some_and(|(start, otid)| otid == u64::from(tid) && time >= start);
                if !ready(tid, time) || (in_open && time.saturating_add(TIMED_HOLD_NS) > sampled) {
                    return true;
                }
                if windows.iter().any(|&(s, e, wtid)| wtid == u64::from(tid) && s <= time && time <= e) {
                    gc_ns += count * period_ns;
                }
                false
            });
            p.counters.user_threads_gc_cpu_ns += gc_ns;
            // A pause is kept while a sample inside it may still come: one waiting here, or
            // one not drained yet (taken after the last tick).
            let oldest = p.timed.iter().map(|t| t.1).min().unwrap_or(u64::MAX).min(sampled);
            while p.windows.front().is_some_and(|w| w.1 < oldest) {
                p.windows.pop_front();
            }
            // Threads quiet for the hold: their entries would decide nothing more.
            p.thread_events_ns.retain(|_, t| t.saturating_add(TIMED_HOLD_NS) > sampled);
        }
        let grace = self.cfg.exited_grace_ns;
        self.procs.retain(|_, p| p.exited_at.is_none_or(|x| now < x.saturating_add(grace)));
        // Roll the CPU window even when no samples arrive (in the agent: while a request
        // holds it; holds that ran out let go).
        if self.cpu_wanted(now) {
            let _ = self.bucket(now);
        }
    }
}
