//! Error types: `FormatError` for bad bytes handed to a parser, `Error` for the I/O layer.
use std::path::PathBuf;

/// A parser met bytes it cannot accept. Names the structure and the cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("{what} is truncated: needs {needed} bytes at offset {offset:#x}, have {len}")]
    Truncated { what: &'static str, offset: u64, needed: u64, len: u64 },
    #[error("{what}: {detail}")]
    Invalid { what: &'static str, detail: String },
    #[error("not a ReadyToRun image: {0}")]
    NotReadyToRun(&'static str),
    #[error("PE headers: {0}")]
    Pe(String),
}

impl FormatError {
    pub(crate) fn invalid(what: &'static str, detail: impl Into<String>) -> Self {
        FormatError::Invalid { what, detail: detail.into() }
    }
}

/// Errors of the process-facing layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {source}")]
    Io { path: PathBuf, #[source] source: std::io::Error },
    #[error("{path}: {source}")]
    Format { path: PathBuf, #[source] source: FormatError },
    #[error("/proc maps line {line} is malformed ({cause}): {text:?}")]
    Maps { line: usize, cause: &'static str, text: String },
    #[error("ELF symbolization of {path}: {detail}")]
    Elf { path: PathBuf, detail: String },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}
