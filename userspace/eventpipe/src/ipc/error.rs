//! Typed errors of the diagnostics IPC client.
use std::{io, path::PathBuf};

use super::hresult::ServerError;

/// Why a reply (or any IPC payload) could not be decoded. Every variant names the cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("truncated {what}: needed {needed} bytes, {available} available")]
    Truncated { what: &'static str, needed: usize, available: usize },
    #[error("bad magic {0:02x?} (expected \"DOTNET_IPC_V1\\0\")")]
    BadMagic([u8; 14]),
    #[error("header size field {0} is smaller than the 20-byte header")]
    SizeTooSmall(u16),
    #[error("unexpected reply command set/id 0x{set:02x}/0x{id:02x} (expected 0xFF/0x00 or 0xFF/0xFF)")]
    UnexpectedReply { set: u8, id: u8 },
    #[error("error reply carries {0} payload bytes, fewer than the 4-byte HRESULT")]
    ErrorPayloadTooShort(usize),
    #[error("string {what} has no NUL terminator")]
    MissingNul { what: &'static str },
    #[error("string {what} is not valid UTF-16")]
    InvalidUtf16 { what: &'static str },
    #[error("length of {what} overflows ({units} UTF-16 units)")]
    LengthOverflow { what: &'static str, units: u32 },
    #[error("connection closed before the reply header was complete ({got} of 20 bytes)")]
    ConnectionClosed { got: usize },
}

/// A request that cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("message of {0} bytes exceeds the 65535-byte limit of the IPC header")]
    MessageTooLarge(usize),
    #[error("string of {0} UTF-16 units is too long")]
    StringTooLong(usize),
    #[error("{count} {what} do not fit a u32 count")]
    TooMany { what: &'static str, count: usize },
}

/// Errors of the diagnostics IPC client.
#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    #[error("no such process: {pid}")]
    NoSuchProcess { pid: u32 },
    #[error(
        "process {pid} has no diagnostics endpoint (looked in {searched:?}): the runtime is older than \
         .NET Core 3.0, DOTNET_EnableDiagnostics=0 is set, or it is not a .NET process"
    )]
    NoSocket { pid: u32, searched: Vec<PathBuf> },
    #[error("permission denied on {path}: run as the target's user or as root ({source})")]
    PermissionDenied { path: PathBuf, #[source] source: io::Error },
    #[error("connecting to {path}: {source}")]
    Connect { path: PathBuf, #[source] source: io::Error },
    #[error("diagnostics I/O: {0}")]
    Io(#[from] io::Error),
    #[error("the runtime answered with {0}")]
    Server(ServerError),
    #[error("malformed reply: {0}")]
    Decode(#[from] DecodeError),
    #[error("cannot encode request: {0}")]
    Encode(#[from] EncodeError),
    #[error("runtime supports none of the CollectTracing versions able to express this session (tried {tried:?})")]
    NoCollectTracingVersion { tried: Vec<super::collect::CollectTracingVersion> },
    /// Only candidates that are not the runtime's own socket were found (another user's file,
    /// a link, not a socket): not connected to.
    #[error("process {pid}: {path} {reason}: not used as its diagnostics socket")]
    UntrustedSocket { pid: u32, path: PathBuf, reason: String },
}

impl IpcError {
    /// The runtime's error code, if the runtime answered with an error.
    pub fn server_error(&self) -> Option<ServerError> {
        match self {
            IpcError::Server(e) => Some(*e),
            _ => None,
        }
    }

    /// True when the runtime does not know the command (older runtime).
    pub fn is_unknown_command(&self) -> bool {
        self.server_error() == Some(ServerError::UnknownCommand)
    }
}
