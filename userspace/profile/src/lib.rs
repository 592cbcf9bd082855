//! The in-memory profile model and its writers.
//!
//! One [`Profile`] holds every kind clrprobe records (CPU samples, off-CPU time, GC CPU,
//! allocations, exceptions, contention) as value columns described by [`SampleType`]s.
//! Build it with [`ProfileBuilder`] (interning frames, stacks and label sets; identical
//! (stack, labels) samples aggregate; profiles merge), then write it:
//!
//! | format | module | notes |
//! |---|---|---|
//! | pprof `.pb.gz` | [`pprof`] | all sample types in one file; also read back |
//! | folded stacks | [`folded`] | one file per sample type |
//! | flame graph SVG | [`svg`] | via `inferno` |
//! | speedscope JSON | [`speedscope`] | per kind or per (kind, thread) |
//! | Firefox Profiler JSON | [`firefox`] | via `fxprof-processed-profile` |
//!
//! See [`model`] for the conventions (stacks root → leaf, clocks).
//!
//! ```
//! use clrprobe_profile::{folded, Frame, FrameKind, LabelSet, ProfileBuilder, SampleType};
//!
//! let mut b = ProfileBuilder::new(vec![SampleType::new("cpu", "samples")]);
//! let main = b.intern_frame(Frame::new("Program.Main", "app.dll", FrameKind::Jit))?;
//! let read = b.intern_frame(Frame::new("ksys_read", "[kernel]", FrameKind::Kernel))?;
//! let stack = b.intern_stack(&[main, read])?; // root first
//! let thread = b.intern_labels(LabelSet::thread(42, 43))?;
//! b.add_sample(stack, &[1], thread)?;
//! b.add_sample(stack, &[2], thread)?; // aggregates
//! let p = b.build();
//! let lines = folded::lines(&p, 0, &folded::FoldedOptions::default())?;
//! assert_eq!(lines, ["Program.Main_[j];ksys_read_[k] 3"]);
//! # Ok::<(), clrprobe_profile::ProfileError>(())
//! ```

mod builder;
mod error;
pub mod hash;
mod strings;
pub mod model;
pub(crate) mod output;

pub mod events;
pub mod firefox;
pub mod folded;
pub mod pprof;
pub mod remap;
pub mod safe_file;
pub mod speedscope;
pub mod summary;
pub mod svg;

pub use builder::ProfileBuilder;
pub use error::ProfileError;
pub use model::{
    Frame, FrameId, FrameKind, LabelSet, LabelSetId, Mapping, Marker, Period, Profile, Sample, SampleType, StackId, Str,
    kinds, units,
};
