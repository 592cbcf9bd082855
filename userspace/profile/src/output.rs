//! Shared plumbing for writers: files whose errors name the path, streams whose errors name
//! the format.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::error::ProfileError;
use crate::safe_file::{self, SafeFileError};

/// Write `path` safely ([`crate::safe_file`]: a temporary file renamed into place, no link
/// followed) by running `body` on a buffered writer. Every I/O failure, including the final
/// flush (where a full disk usually shows up), becomes [`ProfileError::Write`] with `path`;
/// a refused path becomes [`ProfileError::Output`].
pub(crate) fn write_file<F>(path: &Path, body: F) -> Result<(), ProfileError>
where
    F: FnOnce(&mut BufWriter<&mut File>) -> io::Result<()>,
{
    safe_file::write_file(path, body).map_err(|e| match e {
        SafeFileError::Io { path, source } => ProfileError::Write { path, source },
        other => ProfileError::Output(other),
    })
}

pub(crate) fn stream_err(format: &'static str) -> impl Fn(io::Error) -> ProfileError {
    move |source| ProfileError::Stream { format, source }
}

/// Like [`stream_err`] but for a writer the caller handed in: flush it too.
pub(crate) fn to_stream<W: Write>(
    format: &'static str,
    mut w: W,
    body: impl FnOnce(&mut W) -> io::Result<()>,
) -> Result<(), ProfileError> {
    body(&mut w).map_err(stream_err(format))?;
    w.flush().map_err(stream_err(format))
}
