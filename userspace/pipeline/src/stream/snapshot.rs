//! Profiles of one kind over a window, built from the aggregator's state once per request,
//! with Go's sample-type names so `go tool pprof`, Parca and Pyroscope read them as they read
//! Go's: CPU `samples/count` + `cpu/nanoseconds`, allocs `alloc_objects/count` +
//! `alloc_space/bytes`, mutex and block `contentions/count` + `delay/nanoseconds`, exceptions
//! `exceptions/count`. Samples carry pid, tid, process and thread labels. Sample order is
//! sorted, so the same state gives the same bytes.
use std::collections::HashMap;

use clrprobe_profile::{Frame, LabelSet, Period, Profile, ProfileBuilder, ProfileError, SampleType, kinds};

use super::aggregate::{Aggregator, StackKey};

/// Go's profile names, as the endpoints are called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileKind {
    /// CPU samples of the window (host-wide).
    Cpu,
    /// Allocations (AllocationTick estimates), cumulative per followed process.
    Allocs,
    /// Lock contention, cumulative.
    Mutex,
    /// Off-CPU time, cumulative.
    Block,
    /// Exceptions thrown, cumulative.
    Exceptions,
}

impl ProfileKind {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "profile" | "cpu" => Self::Cpu,
            "allocs" | "heap" => Self::Allocs,
            "mutex" => Self::Mutex,
            "block" => Self::Block,
            "exceptions" => Self::Exceptions,
            _ => return None,
        })
    }

    pub fn sample_types(self) -> Vec<SampleType> {
        let t = SampleType::new;
        match self {
            Self::Cpu => vec![t("samples", "count"), t("cpu", "nanoseconds")],
            Self::Allocs => vec![t("alloc_objects", "count"), t("alloc_space", "bytes")],
            Self::Mutex | Self::Block => vec![t("contentions", "count"), t("delay", "nanoseconds")],
            Self::Exceptions => vec![t("exceptions", "count")],
        }
    }

    /// Columns of the event kinds (see [`crate::Kinds::sample_types`]) in this profile.
    fn event_column(self, kind: &str) -> Option<usize> {
        match (self, kind) {
            (Self::Allocs, k) if k == kinds::ALLOC_COUNT => Some(0),
            (Self::Allocs, k) if k == kinds::ALLOC_BYTES => Some(1),
            (Self::Mutex, k) if k == kinds::CONTENTION_COUNT => Some(0),
            (Self::Mutex, k) if k == kinds::CONTENTION_NS => Some(1),
            (Self::Exceptions, k) if k == kinds::EXCEPTIONS => Some(0),
            _ => None,
        }
    }
}

/// Names stacks and processes for a profile (the symbolizer on a live host; a fixed table in
/// replay tests).
pub trait Namer {
    /// Frames root → leaf of a sample's kernel and user stacks (both leaf first).
    fn stack(&mut self, pid: u32, kernel: &[u64], user: &[u64]) -> Vec<Frame>;
    /// The process's name (for processes not followed as .NET ones).
    fn process_name(&mut self, pid: u32) -> String;
    /// A kernel stack (leaf first) that [`Namer::stack`] will be asked for: every stack of a
    /// profile is noted before the first is named, so kernel names are read in one pass.
    fn note_kernel(&mut self, _kernel: &[u64]) {}
    /// The container the process runs in (a recording's `container` label), if any.
    fn container(&mut self, _pid: u32) -> Option<String> {
        None
    }
    /// What an off-CPU stack (root → leaf, as [`Namer::stack`] named it) waits for (a
    /// recording's `wait` label), if known.
    fn wait_kind(&mut self, _frames: &[Frame]) -> Option<&'static str> {
        None
    }
}

struct Build<'n> {
    b: ProfileBuilder,
    namer: &'n mut dyn Namer,
    names: HashMap<u32, String>,
}

impl Build<'_> {
    fn add(&mut self, pid: u32, tid: u32, thread: Option<&str>, frames: Vec<Frame>, values: &[i64], extra: &[(String, String)]) -> Result<(), ProfileError> {
        let mut ids = Vec::with_capacity(frames.len());
        for f in frames {
            ids.push(self.b.intern_frame(f)?);
        }
        let stack = self.b.intern_stack(&ids)?;
        let namer = &mut *self.namer;
        let pname = self.names.entry(pid).or_insert_with(|| namer.process_name(pid)).clone();
        let mut labels = LabelSet::thread(pid, tid);
        labels.process_name = Some(pname.as_str().into());
        labels.thread_name = thread.map(Into::into);
        for (k, v) in extra {
            labels = labels.with_string(k.as_str(), v.as_str());
        }
        let labels = self.b.intern_labels(labels)?;
        self.b.add_sample(stack, values, labels)
    }
}

impl Aggregator {
    /// The profile of `kind` for `pid` (None: every process); CPU covers the samples taken at
    /// or after `since_ns` (host monotonic), the cumulative kinds everything since each
    /// process was found.
    pub fn profile(&self, kind: ProfileKind, pid: Option<u32>, since_ns: u64, namer: &mut dyn Namer) -> Result<Profile, ProfileError> {
        let types = kind.sample_types();
        let mut b = ProfileBuilder::new(types.clone());
        let period = 1_000_000_000 / self.cfg.freq_hz.max(1);
        let start = match kind {
            ProfileKind::Cpu => since_ns.max(self.cpu.front().map_or(0, |b| b.start_ns)),
            _ => self.first_ns.unwrap_or(0),
        };
        b.set_start_time_ns(start.saturating_add_signed(self.cfg.unix_offset_ns));
        b.set_duration_ns(self.now_ns.saturating_sub(start));
        match kind {
            ProfileKind::Cpu => b.set_period(Period { sample_type: SampleType::new("cpu", "nanoseconds"), value: period as i64 }),
            ProfileKind::Allocs => b.set_period(Period { sample_type: SampleType::new("space", "bytes"), value: 100 * 1024 }),
            _ => b.set_period(Period { sample_type: types[0].clone(), value: 1 }),
        }
        let mut build = Build { b, namer, names: HashMap::new() };
        for p in self.procs.values() {
            build.names.insert(p.info.pid, p.info.name.clone());
        }
        let wanted = |p: u32| pid.is_none_or(|w| w == p);
        match kind {
            ProfileKind::Cpu => {
                let mut merged: HashMap<&StackKey, u64> = HashMap::new();
                for bucket in self.cpu.iter().filter(|b| b.start_ns.saturating_add(self.cfg.bucket_ns) > since_ns) {
                    for (k, n) in bucket.samples.iter().filter(|(k, _)| wanted(k.0)) {
                        *merged.entry(k).or_insert(0) += n;
                    }
                }
                let mut rows: Vec<(&StackKey, u64)> = merged.into_iter().collect();
                rows.sort_unstable();
                for (k, _) in &rows {
                    build.namer.note_kernel(&k.3);
                }
                for ((p, tid, comm, kernel, user), n) in rows {
                    let frames = build.namer.stack(*p, kernel, user);
                    build.add(*p, *tid, Some(comm), frames, &[n as i64, (n * period) as i64], &[])?;
                }
            }
            ProfileKind::Block => {
                for k in self.procs.values().filter(|p| wanted(p.info.pid)).flat_map(|p| p.offcpu.keys()) {
                    build.namer.note_kernel(&k.3);
                }
                for p in self.procs.values().filter(|p| wanted(p.info.pid)) {
                    let mut rows: Vec<(&StackKey, &(u64, u64))> = p.offcpu.iter().collect();
                    rows.sort_unstable();
                    for ((pid, tid, comm, kernel, user), (ns, n)) in rows {
                        let frames = build.namer.stack(*pid, kernel, user);
                        build.add(*pid, *tid, Some(comm), frames, &[*n as i64, *ns as i64], &[])?;
                    }
                }
            }
            ProfileKind::Allocs | ProfileKind::Mutex | ProfileKind::Exceptions => {
                for p in self.procs.values().filter(|p| wanted(p.info.pid)) {
                    // Allocation events collected in slices stand for the whole time followed.
                    let scale = match (kind, &p.alloc_slices) {
                        (ProfileKind::Allocs, Some(s)) => s.scale(p.exited_at.unwrap_or(self.now_ns).min(self.now_ns)),
                        _ => 1.0,
                    };
                    for s in p.events.pending() {
                        let mut values = vec![0i64; types.len()];
                        let mut any = false;
                        for (k, v) in &s.values {
                            if let Some(i) = kind.event_column(k) {
                                values[i] += v;
                                any = true;
                            }
                        }
                        if !any {
                            continue;
                        }
                        if scale != 1.0 {
                            for v in &mut values {
                                *v = (*v as f64 * scale).round() as i64;
                            }
                        }
                        let mut frames = build.namer.stack(s.pid, &[], &s.stack);
                        frames.extend(s.leaf.clone());
                        let thread = p.events.threads.name(s.pid, s.tid).map(str::to_string);
                        build.add(s.pid, s.tid as u32, thread.as_deref(), frames, &values, &s.labels)?;
                    }
                }
            }
        }
        Ok(build.b.build())
    }
}
