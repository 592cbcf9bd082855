//! Typed errors of the NetTrace reader.

use std::io;

/// Everything that can go wrong while reading a NetTrace stream.
#[derive(Debug, thiserror::Error)]
pub enum NetTraceError {
    #[error("I/O error while reading the trace: {0}")]
    Io(#[from] io::Error),
    #[error("not a NetTrace stream: the first bytes are {0:02x?}, expected \"Nettrace\"")]
    BadMagic([u8; 8]),
    #[error("unsupported format: NetPerf (V1-V3, .NET Core 2.x); only NetTrace V4, V5 and V6 are read")]
    UnsupportedNetPerf,
    #[error("unsupported NetTrace major version {0} (this reader knows 4, 5 and 6)")]
    UnsupportedVersion(u32),
    #[error("stream ended after {offset} bytes, inside the stream header ({what})")]
    TruncatedHeader { what: &'static str, offset: u64 },
    #[error("corrupt {what} at stream offset {offset}: {reason}")]
    Corrupt {
        what: &'static str,
        offset: u64,
        reason: String,
    },
}

impl NetTraceError {
    pub(crate) fn corrupt(what: &'static str, offset: u64, reason: impl Into<String>) -> Self {
        NetTraceError::Corrupt {
            what,
            offset,
            reason: reason.into(),
        }
    }
}

/// Decoding error inside an in-memory buffer, before the reader attaches a stream offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BufError {
    /// Offset inside the buffer where decoding failed.
    pub at: usize,
    pub reason: &'static str,
}

impl BufError {
    pub(crate) fn new(at: usize, reason: &'static str) -> Self {
        BufError { at, reason }
    }

    /// Attaches what was being decoded and the stream offset of the buffer start.
    pub(crate) fn into_error(self, what: &'static str, buf_offset: u64) -> NetTraceError {
        NetTraceError::corrupt(what, buf_offset + self.at as u64, self.reason)
    }
}
