//! The companion file `PREFIX.events.json` next to the pprof files: what pprof has no field
//! for, kept out of the profiles so that they stay small and standard — the markers (GC
//! pauses, ...) on the profile's clock and per process a free-form event report (exception
//! counts, wait-time percentiles, the GC timeline).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::ProfileError;
use crate::model::Marker;
use crate::output;

/// The value of [`Events::format`].
pub const FORMAT: &str = "clrprobe-events/1";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Events {
    pub format: String,
    /// Recording start, nanoseconds since the Unix epoch (the markers' times are relative to it).
    pub start_time_ns: u64,
    pub duration_ns: u64,
    pub markers: Vec<Marker>,
    /// (pid, report) per process.
    pub reports: Vec<(u32, serde_json::Value)>,
}

impl Events {
    pub fn new(start_time_ns: u64, duration_ns: u64) -> Self {
        Events { format: FORMAT.to_owned(), start_time_ns, duration_ns, ..Events::default() }
    }
}

/// Writes `e` as JSON to `path`.
pub fn write_file(e: &Events, path: impl AsRef<Path>) -> Result<(), ProfileError> {
    output::write_file(path.as_ref(), |w| serde_json::to_writer(w, e).map_err(Into::into))
}

/// Reads an events file; one that is not one (another `format`) is an error.
pub fn read_file(path: impl AsRef<Path>) -> Result<Events, ProfileError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| ProfileError::Read { path: path.to_path_buf(), source })?;
    let e: Events = serde_json::from_slice(&bytes)
        .map_err(|err| ProfileError::CorruptEvents(format!("{}: {err}", path.display())))?;
    if e.format != FORMAT {
        return Err(ProfileError::CorruptEvents(format!("{}: format {:?}, expected {FORMAT:?}", path.display(), e.format)));
    }
    Ok(e)
}
