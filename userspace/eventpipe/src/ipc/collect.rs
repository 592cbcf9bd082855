//! CollectTracing request payloads (EventPipe command set 0x02), one encoder per version.
use super::{
    codec::PayloadWriter,
    config::{ProviderConfig, SessionConfig},
    error::EncodeError,
    header::{CommandId, command_set},
};

/// NetTrace serialization format selector (the only one this client requests).
const FORMAT_NETTRACE: u32 = 1;
/// CollectTracing5 session type: stream over the IPC connection.
const SESSION_TYPE_IPC_STREAM: u32 = 0;

/// The CollectTracing command versions.
///
/// Measured live (tests/ipc_live.rs): .NET Core 3.1.23 and .NET 8.0.4 both accept only
/// `CollectTracing` and `CollectTracing2` and answer UNKNOWN_COMMAND to 3, 4 and 5.
/// `CollectTracing3`/`4` (.NET 9+) follow the protocol spec and the runtime's parser;
/// `CollectTracing5` (.NET 10) is encoded from the protocol spec only (no event filters,
/// session type 0) and is not tried by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CollectTracingVersion {
    /// 0x0202: buffer, format, providers (rundown and stack walks always on). .NET Core 3.0+.
    CollectTracing,
    /// 0x0203: + requestRundown. .NET Core 3.1+.
    CollectTracing2,
    /// 0x0204: + requestStackwalk. .NET 9+ (not in 8.0.4).
    CollectTracing3,
    /// 0x0205: rundown keyword (u64) instead of the rundown bool. .NET 9+.
    CollectTracing4,
    /// 0x0206: session type first, event filters per provider. .NET 10+.
    CollectTracing5,
}

impl CollectTracingVersion {
    /// Newest first; the order [`Client::start_session`](super::Client::start_session) tries.
    pub const DEFAULT_LADDER: [CollectTracingVersion; 4] =
        [Self::CollectTracing4, Self::CollectTracing3, Self::CollectTracing2, Self::CollectTracing];

    pub fn command(self) -> CommandId {
        let id = match self {
            Self::CollectTracing => 0x02,
            Self::CollectTracing2 => 0x03,
            Self::CollectTracing3 => 0x04,
            Self::CollectTracing4 => 0x05,
            Self::CollectTracing5 => 0x06,
        };
        CommandId::new(command_set::EVENTPIPE, id)
    }

    /// Whether this version can express `config` exactly.
    pub fn can_express(self, config: &SessionConfig) -> bool {
        match self {
            Self::CollectTracing => config.request_rundown && config.request_stackwalk,
            Self::CollectTracing2 => config.request_stackwalk,
            _ => true,
        }
    }

    /// Encodes the request payload for `config`.
    pub fn encode(self, config: &SessionConfig) -> Result<Vec<u8>, EncodeError> {
        let mut w = PayloadWriter::new();
        if self == Self::CollectTracing5 {
            w.u32(SESSION_TYPE_IPC_STREAM);
        }
        w.u32(config.circular_buffer_mb).u32(FORMAT_NETTRACE);
        match self {
            Self::CollectTracing => {}
            Self::CollectTracing2 => {
                w.bool(config.request_rundown);
            }
            Self::CollectTracing3 => {
                w.bool(config.request_rundown).bool(config.request_stackwalk);
            }
            Self::CollectTracing4 | Self::CollectTracing5 => {
                w.u64(config.rundown_keyword()).bool(config.request_stackwalk);
            }
        }
        w.count("providers", config.providers.len())?;
        for p in &config.providers {
            write_provider(&mut w, p)?;
            if self == Self::CollectTracing5 {
                // event_filter: disabled, no ids.
                w.bool(false).u32(0);
            }
        }
        Ok(w.into_bytes())
    }
}

fn write_provider(w: &mut PayloadWriter, p: &ProviderConfig) -> Result<(), EncodeError> {
    w.u64(p.keywords).u32(p.level as u32);
    w.string(&p.name)?;
    w.string(&p.arguments_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::config::{Level, ProviderConfig};

    fn config() -> SessionConfig {
        SessionConfig {
            circular_buffer_mb: 64,
            request_rundown: false,
            request_stackwalk: true,
            providers: vec![ProviderConfig::new("P", 0x8000, Level::Verbose)],
        }
    }

    #[test]
    fn collect_tracing2_layout() {
        let b = CollectTracingVersion::CollectTracing2.encode(&config()).unwrap();
        let mut expect = vec![64, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0];
        expect.extend_from_slice(&0x8000u64.to_le_bytes());
        expect.extend_from_slice(&[5, 0, 0, 0, 2, 0, 0, 0, b'P', 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(b, expect);
    }

    #[test]
    fn versions_differ_only_in_their_fields() {
        let c = config();
        let v2 = CollectTracingVersion::CollectTracing2.encode(&c).unwrap();
        let v3 = CollectTracingVersion::CollectTracing3.encode(&c).unwrap();
        let v4 = CollectTracingVersion::CollectTracing4.encode(&c).unwrap();
        let v5 = CollectTracingVersion::CollectTracing5.encode(&c).unwrap();
        assert_eq!(v3.len(), v2.len() + 1);
        assert_eq!(v3[9], 1, "stackwalk flag");
        assert_eq!(v4.len(), v2.len() + 8);
        assert_eq!(&v4[8..16], &0u64.to_le_bytes(), "no rundown → keyword 0");
        assert_eq!(v5.len(), v4.len() + 4 + 5);
        let mut rd = c.clone();
        rd.request_rundown = true;
        let v4 = CollectTracingVersion::CollectTracing4.encode(&rd).unwrap();
        assert_eq!(&v4[8..16], &0x8002_0139u64.to_le_bytes());
        assert!(!CollectTracingVersion::CollectTracing.can_express(&c));
        let mut nostack = c.clone();
        nostack.request_stackwalk = false;
        assert!(!CollectTracingVersion::CollectTracing2.can_express(&nostack));
        assert!(CollectTracingVersion::CollectTracing3.can_express(&nostack));
    }
}
