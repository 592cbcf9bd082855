//! The in-memory profile model and its writers.
//!
//! One [`Profile`] holds every kind clrprobe records (CPU samples, off-CPU time, GC CPU,
//! allocations, exceptions, contention) as value columns described by [`SampleType`]s.
//! Build it with [`ProfileBuilder`]; write it with the functions in [`pprof`], [`folded`],
//! [`svg`], [`speedscope`] and [`firefox`]. See [`model`] for the conventions (stack order,
//! clocks).

mod builder;
mod error;
mod hash;
pub mod model;
pub(crate) mod output;

pub mod firefox;
pub mod folded;
pub mod pprof;
pub mod speedscope;
pub mod summary;
pub mod svg;

pub use builder::ProfileBuilder;
pub use error::ProfileError;
pub use model::{
    Frame, FrameId, FrameKind, LabelSet, LabelSetId, Marker, Period, Profile, Sample, SampleType, StackId,
    kinds, units,
};
