//! The crate's one error type.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while building, merging, writing or reading a profile.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Writing an output file failed (full disk, permission, missing directory, ...).
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
    /// Reading an input file failed.
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    /// Writing to a caller-supplied stream failed.
    #[error("cannot write {format} output: {source}")]
    Stream { format: &'static str, source: io::Error },
    /// A sample carried the wrong number of values.
    #[error("sample has {got} values but the profile has {expected} sample types")]
    ValueCount { expected: usize, got: usize },
    /// An id did not belong to this profile.
    #[error("unknown {what} id {id}")]
    UnknownId { what: &'static str, id: u32 },
    /// A sample type index was out of range.
    #[error("sample type index {index} out of range (profile has {count})")]
    NoSuchSampleType { index: usize, count: usize },
    /// Two profiles with the same sample kind disagree on its unit.
    #[error("sample type {kind:?} has unit {left:?} in one profile and {right:?} in the other")]
    UnitMismatch { kind: String, left: String, right: String },
    /// A table grew past what its 32-bit ids can address.
    #[error("too many {0} (limit 2^32-1)")]
    TooMany(&'static str),
    /// Serializing an in-memory structure failed.
    #[error("cannot encode {0}")]
    Encode(String),
    /// An output path was refused (a link planted by another user, another user's file or
    /// directory, ...): see [`crate::safe_file`].
    #[error(transparent)]
    Output(crate::safe_file::SafeFileError),
    /// Reading pprof data would pass a cap (`pprof::read::MAX_DECODED`, ...).
    #[error("pprof data too large: {detail}")]
    PprofTooLarge { detail: String },
    /// A file is not a readable pprof profile (names the file).
    #[error("{} is not a readable pprof profile: {detail}", path.display())]
    NotPprof { path: PathBuf, detail: String },
    /// The bytes are not a valid pprof profile.
    #[error("corrupt pprof data: {0}")]
    CorruptPprof(String),
    /// A `PREFIX.events.json` companion file is not one.
    #[error("not a clrprobe events file: {0}")]
    CorruptEvents(String),
}

impl ProfileError {
    pub(crate) fn corrupt(msg: impl Into<String>) -> Self {
        ProfileError::CorruptPprof(msg.into())
    }
}
