//! The profile data model: sample types, frames, stacks, label sets, samples and markers.
//!
//! Conventions used everywhere in this crate:
//! * Stacks are stored **root → leaf** (outermost caller first, the sampled frame last),
//!   as folded stacks, speedscope and the Firefox Profiler want them. The pprof writer
//!   reverses them (pprof wants leaf first).
//! * Timestamps of samples and markers are nanoseconds **since [`Profile::start_time_ns`]**;
//!   `start_time_ns` itself is nanoseconds since the Unix epoch.
//! * Every sample carries exactly one value per entry of [`Profile::sample_types`].

use std::sync::Arc;

pub use crate::strings::Str;

/// Well-known sample kinds recorded by clrprobe.
pub mod kinds {
    pub const CPU: &str = "cpu";
    pub const OFF_CPU: &str = "off-cpu";
    pub const GC_CPU: &str = "gc-cpu";
    pub const ALLOC_BYTES: &str = "alloc-bytes";
    pub const ALLOC_COUNT: &str = "alloc-count";
    pub const EXCEPTIONS: &str = "exceptions";
    pub const CONTENTION_NS: &str = "contention-ns";
    pub const CONTENTION_COUNT: &str = "contention-count";
}

/// Well-known units.
pub mod units {
    pub const NANOSECONDS: &str = "nanoseconds";
    pub const BYTES: &str = "bytes";
    pub const COUNT: &str = "count";
    pub const SAMPLES: &str = "samples";
}

/// What one value column of the samples measures, e.g. (`"alloc-bytes"`, `"bytes"`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SampleType {
    pub kind: String,
    pub unit: String,
}

impl SampleType {
    pub fn new(kind: impl Into<String>, unit: impl Into<String>) -> Self {
        SampleType { kind: kind.into(), unit: unit.into() }
    }
}

/// The sampling period: one sample stands for `value` units of `sample_type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Period {
    pub sample_type: SampleType,
    pub value: i64,
}

/// Where a frame's code comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    Kernel,
    Native,
    /// Managed code compiled by the JIT.
    Jit,
    /// Managed code precompiled with ReadyToRun.
    ReadyToRun,
    /// Managed code run by the interpreter / stubs without native code.
    Interpreted,
    /// A frame clrprobe made up (thread roots, "[GC]", "[unknown]", ...).
    Synthetic,
    Unknown,
}

impl FrameKind {
    pub const ALL: [FrameKind; 7] = [
        FrameKind::Kernel,
        FrameKind::Native,
        FrameKind::Jit,
        FrameKind::ReadyToRun,
        FrameKind::Interpreted,
        FrameKind::Synthetic,
        FrameKind::Unknown,
    ];

    /// A stable lowercase name, used in files (pprof comments, speedscope).
    pub fn as_str(self) -> &'static str {
        match self {
            FrameKind::Kernel => "kernel",
            FrameKind::Native => "native",
            FrameKind::Jit => "jit",
            FrameKind::ReadyToRun => "r2r",
            FrameKind::Interpreted => "interpreted",
            FrameKind::Synthetic => "synthetic",
            FrameKind::Unknown => "unknown",
        }
    }

    /// Inverse of [`FrameKind::as_str`].
    pub fn parse(s: &str) -> Option<FrameKind> {
        FrameKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// True for managed (.NET) code.
    pub fn is_managed(self) -> bool {
        matches!(self, FrameKind::Jit | FrameKind::ReadyToRun | FrameKind::Interpreted)
    }
}

/// The piece of a process's address space a frame's code sits in, as pprof's `Mapping` and
/// `/proc/PID/maps` describe it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Mapping {
    /// First address of the mapping.
    pub start: u64,
    /// One past its last address.
    pub limit: u64,
    /// File offset mapped at `start`.
    pub offset: u64,
    /// Path as the process sees it (`/usr/lib/.../libc.so.6`), or `memfd:doublemapper`,
    /// `[anon]`, `[kernel.kallsyms]`.
    pub path: Str,
    /// GNU build id of an ELF file, lowercase hex; empty when unknown.
    pub build_id: Str,
}

/// One stack frame. Frames are interned by value: equal frames get the same [`FrameId`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    /// Function name, e.g. `System.String.Concat(string,string)` or `__x64_sys_read`.
    pub name: Str,
    /// Module (DLL, shared object, `[kernel]`), empty if unknown.
    pub module: Str,
    pub kind: FrameKind,
    /// Instruction address, or 0 when the frame has none (synthetic / aggregated by name).
    pub address: u64,
    /// Extra attributes, e.g. `("tier", "Tier1")`, `("il_offset", "0x12")`.
    pub attrs: Vec<(Str, Str)>,
    /// Where `address` is mapped, when known.
    pub mapping: Option<Arc<Mapping>>,
}

impl Frame {
    pub fn new(name: impl Into<Str>, module: impl Into<Str>, kind: FrameKind) -> Self {
        Frame { name: name.into(), module: module.into(), kind, address: 0, attrs: Vec::new(), mapping: None }
    }

    pub fn with_mapping(mut self, mapping: Arc<Mapping>) -> Self {
        self.mapping = Some(mapping);
        self
    }

    /// CoreCLR's collector: the `WKS::`/`SVR::` gc functions, `GCHeap` methods, and synthetic
    /// GC frames (clrprobe's `Garbage Collector` root).
    pub fn is_gc(&self) -> bool {
        let n = self.name.as_str();
        ["WKS::gc", "SVR::gc", "WKS::GCHeap", "SVR::GCHeap"].iter().any(|p| n.starts_with(p))
            || (self.kind == FrameKind::Synthetic && (n.contains("GC") || n == "Garbage Collector"))
    }

    /// True for frames nothing could name (they carry the attribute `unnamed`).
    pub fn is_unnamed(&self) -> bool {
        self.attr("unnamed").is_some()
    }

    pub fn with_address(mut self, address: u64) -> Self {
        self.address = address;
        self
    }

    pub fn with_attr(mut self, key: impl Into<Str>, value: impl Into<Str>) -> Self {
        self.attrs.push((key.into(), value.into()));
        self
    }

    /// Value of attribute `key`, if present.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str())
    }
}

macro_rules! id_type {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub(crate) u32);
        impl $name {
            /// Index into the owning profile's table.
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}

id_type!(
    /// Index of a frame in [`Profile::frames`].
    FrameId
);
id_type!(
    /// Index of an interned stack (a root→leaf list of frames).
    StackId
);
id_type!(
    /// Index of an interned [`LabelSet`].
    LabelSetId
);

/// Labels attached to a sample. Interned by value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LabelSet {
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub process_name: Option<Str>,
    pub thread_name: Option<Str>,
    /// Free string labels: exception type/message, heap kind, lock owner, ...
    pub strings: Vec<(Str, Str)>,
    /// Free numeric labels.
    pub numbers: Vec<(Str, i64)>,
}

impl LabelSet {
    pub fn thread(pid: u32, tid: u32) -> Self {
        LabelSet { pid: Some(pid), tid: Some(tid), ..LabelSet::default() }
    }

    pub fn with_string(mut self, key: impl Into<Str>, value: impl Into<Str>) -> Self {
        self.strings.push((key.into(), value.into()));
        self
    }

    pub fn with_number(mut self, key: impl Into<Str>, value: i64) -> Self {
        self.numbers.push((key.into(), value));
        self
    }

    /// Value of the string label `key`, if present.
    pub fn string(&self, key: &str) -> Option<&str> {
        self.strings.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str())
    }
}

/// A time interval of interest (GC, pause, ...), shown as a marker where the format has them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Marker {
    pub name: String,
    /// Nanoseconds since the profile start.
    pub start_ns: u64,
    pub end_ns: u64,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    /// Free key/value data (`("generation", "2")`, `("reason", "AllocSmall")`).
    pub data: Vec<(String, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SampleRec {
    pub stack: StackId,
    pub labels: LabelSetId,
    pub timestamp_ns: Option<u64>,
}

/// A borrowed view of one sample.
#[derive(Debug, Clone, Copy)]
pub struct Sample<'a> {
    pub stack: StackId,
    pub labels: LabelSetId,
    /// One value per sample type.
    pub values: &'a [i64],
    /// Nanoseconds since the profile start; `None` for aggregated samples.
    pub timestamp_ns: Option<u64>,
}

/// An immutable profile. Build one with [`crate::ProfileBuilder`].
#[derive(Debug, Clone, Default)]
pub struct Profile {
    pub(crate) sample_types: Vec<SampleType>,
    pub(crate) period: Option<Period>,
    pub(crate) start_time_ns: u64,
    pub(crate) duration_ns: u64,
    pub(crate) frames: Vec<Frame>,
    pub(crate) stacks: Vec<Arc<[FrameId]>>,
    pub(crate) label_sets: Vec<LabelSet>,
    pub(crate) samples: Vec<SampleRec>,
    /// Flat sample values, `sample_types.len()` per sample.
    pub(crate) values: Vec<i64>,
    pub(crate) markers: Vec<Marker>,
    pub(crate) comments: Vec<String>,
}

impl Profile {
    /// Adds a marker to a built profile (markers are not interned: no builder needed).
    pub fn add_marker(&mut self, marker: Marker) {
        self.markers.push(marker);
    }

    /// Adds a comment to a built profile.
    pub fn add_comment(&mut self, comment: impl Into<String>) {
        self.comments.push(comment.into());
    }

    pub fn sample_types(&self) -> &[SampleType] {
        &self.sample_types
    }

    /// Index of the sample type whose kind is `kind`.
    pub fn sample_type_index(&self, kind: &str) -> Option<usize> {
        self.sample_types.iter().position(|t| t.kind == kind)
    }

    pub fn period(&self) -> Option<&Period> {
        self.period.as_ref()
    }

    /// Recording start, nanoseconds since the Unix epoch (0 if unknown).
    pub fn start_time_ns(&self) -> u64 {
        self.start_time_ns
    }

    pub fn duration_ns(&self) -> u64 {
        self.duration_ns
    }

    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// The frame behind `id`. Ids come from this profile, so lookups of foreign ids return `None`.
    pub fn frame(&self, id: FrameId) -> Option<&Frame> {
        self.frames.get(id.index())
    }

    pub fn stack_count(&self) -> usize {
        self.stacks.len()
    }

    /// Frames of a stack, root first.
    pub fn stack(&self, id: StackId) -> Option<&[FrameId]> {
        self.stacks.get(id.index()).map(|s| &s[..])
    }

    pub fn label_sets(&self) -> &[LabelSet] {
        &self.label_sets
    }

    pub fn labels(&self, id: LabelSetId) -> Option<&LabelSet> {
        self.label_sets.get(id.index())
    }

    pub fn sample_count(&self) -> usize {
        self.samples.len()
    }

    pub fn samples(&self) -> impl ExactSizeIterator<Item = Sample<'_>> + '_ {
        let n = self.sample_types.len();
        self.samples.iter().enumerate().map(move |(i, s)| Sample {
            stack: s.stack,
            labels: s.labels,
            values: &self.values[i * n..(i + 1) * n],
            timestamp_ns: s.timestamp_ns,
        })
    }

    /// Sum of column `index` over all samples.
    pub fn total(&self, index: usize) -> i64 {
        self.samples().map(|s| s.values.get(index).copied().unwrap_or(0)).sum()
    }

    pub fn markers(&self) -> &[Marker] {
        &self.markers
    }

    pub fn comments(&self) -> &[String] {
        &self.comments
    }

    /// Every sample with ids resolved to values, sorted: the basis of `==`.
    fn resolved(&self) -> Vec<ResolvedSample<'_>> {
        let mut out: Vec<_> = self
            .samples()
            .map(|s| {
                let frames = self.stack(s.stack).unwrap_or(&[]).iter().filter_map(|f| self.frame(*f)).collect();
                (frames, self.labels(s.labels), s.values, s.timestamp_ns)
            })
            .collect();
        out.sort();
        out
    }
}

type ResolvedSample<'a> = (Vec<&'a Frame>, Option<&'a LabelSet>, &'a [i64], Option<u64>);

/// Semantic equality: same metadata, markers, comments and the same samples once ids are
/// resolved to frames and labels (the numbering of frames/stacks/labels is not compared).
impl PartialEq for Profile {
    fn eq(&self, other: &Self) -> bool {
        self.sample_types == other.sample_types
            && self.period == other.period
            && self.start_time_ns == other.start_time_ns
            && self.duration_ns == other.duration_ns
            && self.markers == other.markers
            && self.comments == other.comments
            && self.resolved() == other.resolved()
    }
}
