//! Shared plumbing for writers: files whose errors name the path, streams whose errors name
//! the format.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::error::ProfileError;

/// Create `path` and run `body` on a buffered writer to it. Every I/O failure, including the
/// final flush (where a full disk usually shows up), becomes [`ProfileError::Write`] with `path`.
pub(crate) fn write_file<F>(path: &Path, body: F) -> Result<(), ProfileError>
where
    F: FnOnce(&mut BufWriter<File>) -> io::Result<()>,
{
    let err = |source| ProfileError::Write { path: path.to_path_buf(), source };
    let file = File::create(path).map_err(err)?;
    let mut w = BufWriter::with_capacity(256 * 1024, file);
    body(&mut w).map_err(err)?;
    w.flush().map_err(err)?;
    Ok(())
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
