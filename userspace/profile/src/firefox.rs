//! Firefox Profiler ("processed" JSON, open at profiler.firefox.com) via samply's
//! `fxprof-processed-profile` crate.
//!
//! One process per pid, one thread per (pid, tid), one category per frame kind (Kernel,
//! Native, .NET JIT, .NET R2R, Interpreted, Synthetic, GC) and one interval marker per
//! [`crate::Marker`]. A file holds one sample type (the Firefox Profiler weighs a thread's
//! samples by a single number). Samples with a time sit at it (a timeline per thread);
//! samples without one (aggregated) at the start. Off-CPU and wait times are traced
//! durations (`tracing-ms` weights, whole milliseconds). CPU kinds also fill the per-sample
//! CPU delta (value × period), so the activity graph shows CPU use. Process and thread names
//! come from any sample of the profile that has them.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use fxprof_processed_profile as fx;
use fx::{
    CategoryColor, CategoryHandle, CategoryPairHandle, CpuDelta, FrameFlags, FrameInfo, MarkerFieldFlags,
    MarkerFieldFormat, MarkerTiming, ProcessHandle, ReferenceTimestamp, SamplingInterval, StackHandle,
    StaticSchemaMarker, StaticSchemaMarkerField, StringHandle, ThreadHandle, Timestamp, WeightType,
};

use crate::error::ProfileError;
use crate::hash::FastMap;
use crate::model::{Frame, FrameKind, LabelSet, Profile};
use crate::output;

struct Categories {
    kernel: CategoryHandle,
    native: CategoryHandle,
    jit: CategoryHandle,
    r2r: CategoryHandle,
    interpreted: CategoryHandle,
    synthetic: CategoryHandle,
    gc: CategoryHandle,
}

impl Categories {
    fn new(fp: &mut fx::Profile) -> Self {
        Categories {
            kernel: fp.add_category("Kernel", CategoryColor::Orange),
            native: fp.add_category("Native", CategoryColor::Red),
            jit: fp.add_category(".NET JIT", CategoryColor::Green),
            r2r: fp.add_category(".NET R2R", CategoryColor::Blue),
            interpreted: fp.add_category(".NET Interpreted", CategoryColor::Purple),
            synthetic: fp.add_category("Synthetic", CategoryColor::Gray),
            gc: fp.add_category("GC", CategoryColor::Yellow),
        }
    }

    fn for_frame(&self, f: &Frame) -> CategoryHandle {
        if f.is_gc() {
            return self.gc;
        }
        match f.kind {
            FrameKind::Kernel => self.kernel,
            FrameKind::Native => self.native,
            FrameKind::Jit => self.jit,
            FrameKind::ReadyToRun => self.r2r,
            FrameKind::Interpreted => self.interpreted,
            FrameKind::Synthetic => self.synthetic,
            FrameKind::Unknown => CategoryHandle::OTHER,
        }
    }
}

/// A clrprobe marker: its name plus its key/value data as one searchable text field.
struct ClrMarker {
    name: StringHandle,
    category: CategoryHandle,
    details: StringHandle,
}

impl StaticSchemaMarker for ClrMarker {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "clrprobe";
    const TOOLTIP_LABEL: Option<&'static str> = Some("{marker.name} {marker.data.details}");
    const TABLE_LABEL: Option<&'static str> = Some("{marker.data.details}");
    const FIELDS: &'static [StaticSchemaMarkerField] = &[StaticSchemaMarkerField {
        key: "details",
        label: "Details",
        format: MarkerFieldFormat::String,
        flags: MarkerFieldFlags::SEARCHABLE,
    }];

    fn name(&self, _: &mut fx::Profile) -> StringHandle {
        self.name
    }
    fn category(&self, _: &mut fx::Profile) -> CategoryHandle {
        self.category
    }
    fn string_field_value(&self, _: u32) -> StringHandle {
        self.details
    }
    fn number_field_value(&self, _: u32) -> f64 {
        0.0
    }
}

type ThreadKey = (Option<u32>, Option<u32>);

struct Builder<'a> {
    p: &'a Profile,
    /// Names from every label set of the profile (all kinds): pid → process, (pid, tid) → thread.
    process_names: BTreeMap<u32, &'a str>,
    thread_names: BTreeMap<ThreadKey, &'a str>,
    fp: fx::Profile,
    cats: Categories,
    processes: BTreeMap<Option<u32>, ProcessHandle>,
    threads: BTreeMap<ThreadKey, ThreadHandle>,
    stacks: FastMap<(ThreadHandle, u32), Option<StackHandle>>,
}

impl<'a> Builder<'a> {
    fn process(&mut self, pid: Option<u32>, name: Option<&str>) -> ProcessHandle {
        if let Some(&h) = self.processes.get(&pid) {
            return h;
        }
        let default = match pid {
            Some(pid) => format!("pid {pid}"),
            None => "unknown process".to_owned(),
        };
        let h = self.fp.add_process(name.unwrap_or(&default), pid.unwrap_or(0), Timestamp::from_nanos_since_reference(0));
        self.processes.insert(pid, h);
        h
    }

    fn thread(&mut self, labels: Option<&LabelSet>) -> ThreadHandle {
        let key = (labels.and_then(|l| l.pid), labels.and_then(|l| l.tid));
        if let Some(&h) = self.threads.get(&key) {
            return h;
        }
        let pname = labels.and_then(|l| l.process_name.as_deref()).or_else(|| key.0.and_then(|p| self.process_names.get(&p).copied()));
        let process = self.process(key.0, pname);
        let is_main = key.0.is_some() && key.0 == key.1;
        let h = self.fp.add_thread(process, key.1.unwrap_or(0), Timestamp::from_nanos_since_reference(0), is_main);
        let tname = labels.and_then(|l| l.thread_name.as_deref()).or_else(|| self.thread_names.get(&key).copied());
        let name = match (tname, key.1) {
            (Some(n), _) => n.to_owned(),
            (None, Some(tid)) => format!("thread {tid}"),
            (None, None) => "all threads".to_owned(),
        };
        self.fp.set_thread_name(h, &name);
        self.threads.insert(key, h);
        h
    }

    fn stack(&mut self, thread: ThreadHandle, stack: crate::StackId) -> Option<StackHandle> {
        if let Some(&h) = self.stacks.get(&(thread, stack.0)) {
            return h;
        }
        let p = self.p;
        let mut infos = Vec::new();
        for id in p.stack(stack).unwrap_or(&[]) {
            if let Some(f) = p.frame(*id) {
                let category: CategoryPairHandle = self.cats.for_frame(f).into();
                let label = if f.module.is_empty() { f.name.to_string() } else { format!("{}!{}", f.module, f.name) };
                let label = self.fp.intern_string(&label);
                infos.push(FrameInfo { frame: fx::Frame::Label(label), category_pair: category, flags: FrameFlags::empty() });
            }
        }
        let h = self.fp.intern_stack_frames(thread, infos.into_iter());
        self.stacks.insert((thread, stack.0), h);
        h
    }
}

/// The CPU time a sample stands for, which drives the profiler's CPU activity graph: only for
/// CPU kinds, either measured in nanoseconds or counted in samples of a nanosecond period.
fn cpu_delta(p: &Profile, t: &crate::SampleType, value: i64) -> CpuDelta {
    if !(t.kind == crate::kinds::CPU || t.kind == crate::kinds::GC_CPU) || value <= 0 {
        return CpuDelta::ZERO;
    }
    let value = value as u64;
    if t.unit == crate::units::NANOSECONDS {
        return CpuDelta::from_nanos(value);
    }
    match p.period() {
        Some(period) if period.sample_type.unit == crate::units::NANOSECONDS && period.value > 0 => {
            CpuDelta::from_nanos(value.saturating_mul(period.value as u64))
        }
        _ => CpuDelta::ZERO,
    }
}

/// Build the Firefox Profiler profile for sample type `index`.
pub fn build(p: &Profile, index: usize, product: &str) -> Result<fx::Profile, ProfileError> {
    let Some(sample_type) = p.sample_types().get(index) else {
        return Err(ProfileError::NoSuchSampleType { index, count: p.sample_types().len() });
    };
    let reference = ReferenceTimestamp::from_duration_since_unix_epoch(Duration::from_nanos(p.start_time_ns()));
    let interval = match p.period() {
        Some(period) if period.sample_type.unit == crate::units::NANOSECONDS && period.value > 0 => {
            SamplingInterval::from_nanos(period.value as u64)
        }
        _ => SamplingInterval::from_millis(1),
    };
    let mut fp = fx::Profile::new(product, reference, interval);
    let cats = Categories::new(&mut fp);
    let mut process_names = BTreeMap::new();
    let mut thread_names = BTreeMap::new();
    for l in p.label_sets() {
        if let (Some(pid), Some(n)) = (l.pid, l.process_name.as_deref()) {
            process_names.entry(pid).or_insert(n);
        }
        if let Some(n) = l.thread_name.as_deref() {
            thread_names.entry((l.pid, l.tid)).or_insert(n);
        }
    }
    let mut b = Builder {
        p,
        process_names,
        thread_names,
        fp,
        cats,
        processes: BTreeMap::new(),
        threads: BTreeMap::new(),
        stacks: FastMap::default(),
    };
    // Times (off-CPU, waits) are traced durations in whole milliseconds (the format's weights
    // are integers); a non-zero duration weighs at least 1 ms.
    let traced = sample_type.unit == crate::units::NANOSECONDS && sample_type.kind != crate::kinds::CPU;
    let weight_type = match sample_type.unit.as_str() {
        "bytes" => WeightType::Bytes,
        _ if traced => WeightType::TracingMs,
        _ => WeightType::Samples,
    };
    let weight_of = |v: i64| -> i64 {
        if traced { ((v + 500_000) / 1_000_000).max(i64::from(v > 0)) } else { v }
    };
    // Samples in time order (aggregated ones, without a timestamp, sit at the start).
    let mut order: Vec<_> = p.samples().filter(|s| s.values[index] != 0).collect();
    order.sort_by_key(|s| s.timestamp_ns.unwrap_or(0));
    for s in order {
        let thread = b.thread(p.labels(s.labels));
        b.fp.set_thread_samples_weight_type(thread, weight_type.clone());
        let stack = b.stack(thread, s.stack);
        let w = weight_of(s.values[index]);
        let weight = i32::try_from(w).unwrap_or(if w < 0 { i32::MIN } else { i32::MAX });
        let ts = Timestamp::from_nanos_since_reference(s.timestamp_ns.unwrap_or(0));
        b.fp.add_sample(thread, ts, stack, cpu_delta(p, sample_type, s.values[index]), weight);
    }
    for m in p.markers() {
        let labels = LabelSet { pid: m.pid, tid: m.tid, ..LabelSet::default() };
        let thread = match b.threads.get(&(m.pid, m.tid)) {
            Some(&t) => t,
            // No samples on that thread: use any thread of the process, else make one.
            None => match b.threads.iter().find(|((pid, _), _)| *pid == m.pid) {
                Some((_, &t)) => t,
                None => b.thread(Some(&labels)),
            },
        };
        let details = m.data.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ");
        let marker = ClrMarker {
            name: b.fp.intern_string(&m.name),
            category: if m.name.to_ascii_lowercase().contains("gc") { b.cats.gc } else { CategoryHandle::OTHER },
            details: b.fp.intern_string(&details),
        };
        let timing = MarkerTiming::Interval(
            Timestamp::from_nanos_since_reference(m.start_ns),
            Timestamp::from_nanos_since_reference(m.end_ns.max(m.start_ns)),
        );
        b.fp.add_marker(thread, timing, marker);
    }
    Ok(b.fp)
}

/// Write Firefox Profiler JSON for sample type `index` to a stream.
pub fn to_writer<W: Write>(p: &Profile, index: usize, product: &str, w: W) -> Result<(), ProfileError> {
    let fp = build(p, index, product)?;
    output::to_stream("firefox", w, |w| serde_json::to_writer(w, &fp).map_err(Into::into))
}

/// Write Firefox Profiler JSON for sample type `index` to `path`.
pub fn write_file(p: &Profile, index: usize, product: &str, path: impl AsRef<Path>) -> Result<(), ProfileError> {
    let fp = build(p, index, product)?;
    output::write_file(path.as_ref(), |w| serde_json::to_writer(w, &fp).map_err(Into::into))
}
