//! Heap snapshots: the runtime's heap dump events (decoded by `clr_events::heap`) → an object
//! graph ([`HeapBuilder`] → [`HeapGraph`]) → per type count, shallow and retained bytes
//! (dominator tree, [`dominators`]) and shortest root paths ([`analyze`] → [`HeapSummary`]),
//! a pprof profile whose stacks are root paths ([`heap_profile`]), and the growth between two
//! snapshots ([`diff`]).
//!
//! Memory: objects are `u32` indices. Collecting costs 24 bytes per object and 8 per
//! reference; the graph 24 per object and 4 per reference; the analysis adds about 60 per
//! object and 4 per reference at its peak (dominators), most of it freed before the outputs.
mod analysis;
mod builder;
mod diff;
mod dominators;
mod graph;
mod profile;

pub use analysis::{HeapAnalysis, HeapSummary, MAX_PATH, RootKindStats, RootsSummary, StaticRootStats, TypeStats, WalkInfo, analyze};
pub use builder::HeapBuilder;
pub use diff::{HeapDiff, TypeDelta, diff};
pub use dominators::{DomTree, UNREACHED, VIRTUAL_ROOT, dominators};
pub use graph::{HeapGraph, RootLabel, RootLabelKind};
pub use profile::{MAX_DEPTH, heap_profile};

/// Why a heap walk could not be turned into a graph.
#[derive(Debug, thiserror::Error)]
pub enum HeapError {
    #[error("the heap walk listed no objects (the runtime sent no GCBulkNode events)")]
    Empty,
    #[error("the heap walk is incomplete: {what}; nothing was written (retry, or raise the buffer with --buffer-mb)")]
    Incomplete { what: String },
    #[error("corrupt heap walk: {what}")]
    Corrupt { what: String },
    #[error("heap too large for 32-bit indices: {objects} objects, {references} references")]
    TooLarge { objects: u64, references: u64 },
}
