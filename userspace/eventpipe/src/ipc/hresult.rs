//! HRESULTs the diagnostics server answers with, as named errors.

/// An error code returned by the runtime's diagnostics server (the int32 payload of an
/// `0xFF/0xFF` reply, or a non-zero HRESULT in a success reply).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ServerError {
    /// DS_IPC_E_BAD_ENCODING: the payload could not be parsed.
    #[error("BAD_ENCODING (0x80131384)")]
    BadEncoding,
    /// DS_IPC_E_UNKNOWN_COMMAND: the runtime does not implement this command.
    #[error("UNKNOWN_COMMAND (0x80131385)")]
    UnknownCommand,
    /// DS_IPC_E_UNKNOWN_MAGIC: the header magic was not recognised.
    #[error("UNKNOWN_MAGIC (0x80131386)")]
    UnknownMagic,
    /// DS_IPC_E_NOTSUPPORTED.
    #[error("NOTSUPPORTED (0x80131515)")]
    NotSupported,
    /// E_FAIL.
    #[error("FAIL (0x80004005)")]
    Fail,
    /// The feature is not available yet (runtime still starting).
    #[error("NOT_YET_AVAILABLE (0x8013135B)")]
    NotYetAvailable,
    /// The runtime is not initialised.
    #[error("RUNTIME_UNINITIALIZED (0x80131371)")]
    RuntimeUninitialized,
    /// E_INVALIDARG.
    #[error("INVALIDARG (0x80070057)")]
    InvalidArg,
    /// E_INSUFFICIENT_BUFFER.
    #[error("INSUFFICIENT_BUFFER (0x8007007A)")]
    InsufficientBuffer,
    /// The environment variable does not exist.
    #[error("ENVVAR_NOT_FOUND (0x800000CB)")]
    EnvVarNotFound,
    /// Any other HRESULT.
    #[error("HRESULT 0x{0:08X}")]
    Other(u32),
}

impl ServerError {
    pub fn from_hresult(hr: u32) -> Self {
        match hr {
            0x8013_1384 => Self::BadEncoding,
            0x8013_1385 => Self::UnknownCommand,
            0x8013_1386 => Self::UnknownMagic,
            0x8013_1515 => Self::NotSupported,
            0x8000_4005 => Self::Fail,
            0x8013_135B => Self::NotYetAvailable,
            0x8013_1371 => Self::RuntimeUninitialized,
            0x8007_0057 => Self::InvalidArg,
            0x8007_007A => Self::InsufficientBuffer,
            0x8000_00CB => Self::EnvVarNotFound,
            other => Self::Other(other),
        }
    }

    pub fn hresult(self) -> u32 {
        match self {
            Self::BadEncoding => 0x8013_1384,
            Self::UnknownCommand => 0x8013_1385,
            Self::UnknownMagic => 0x8013_1386,
            Self::NotSupported => 0x8013_1515,
            Self::Fail => 0x8000_4005,
            Self::NotYetAvailable => 0x8013_135B,
            Self::RuntimeUninitialized => 0x8013_1371,
            Self::InvalidArg => 0x8007_0057,
            Self::InsufficientBuffer => 0x8007_007A,
            Self::EnvVarNotFound => 0x8000_00CB,
            Self::Other(hr) => hr,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_codes_round_trip() {
        for hr in [0x8013_1384, 0x8013_1385, 0x8013_1386, 0x8013_1515, 0x8000_4005, 0x8013_135B, 0x8013_1371, 0x8007_0057, 0x8007_007A, 0x8000_00CB, 0x1234_5678] {
            assert_eq!(ServerError::from_hresult(hr).hresult(), hr);
        }
        assert_eq!(ServerError::from_hresult(0x8013_1385), ServerError::UnknownCommand);
        assert_eq!(ServerError::from_hresult(0x8013_1385).to_string(), "UNKNOWN_COMMAND (0x80131385)");
    }
}
