//! Client for the .NET diagnostics IPC protocol (dotnet/diagnostics `ipc-protocol.md`).
//!
//! - [`find_socket`]: locate a process's diagnostics endpoint.
//! - [`Client`]: one command per connection — ProcessInfo/ProcessInfo2, ResumeRuntime,
//!   EnablePerfMap/DisablePerfMap, StopTracing, and [`Client::start_session`] (CollectTracing,
//!   newest supported version first).
//! - [`Session`]: a `Read` of the NetTrace stream; always stopped (see [`session`]).
//! - [`SessionConfig`] / [`parse_providers`]: typed session configuration.
//! - [`parse_reply`], [`ProcessInfo::parse`], …: pure decoders (fuzzed by `fuzz/ipc_reply`).
//!
//! Command support measured against real runtimes (tests/ipc_live*.rs):
//!
//! | command | .NET Core 3.1.23 | .NET 8.0.4 |
//! |---|---|---|
//! | CollectTracing / CollectTracing2 (0x0202/0x0203) | yes | yes |
//! | CollectTracing3/4/5 (0x0204–0x0206) | UNKNOWN_COMMAND | UNKNOWN_COMMAND |
//! | StopTracing (0x0201) | yes | yes |
//! | ProcessInfo / ProcessInfo2 (0x0400/0x0404) | UNKNOWN_COMMAND | yes ("8.0.4") |
//! | ResumeRuntime (0x0401) | UNKNOWN_COMMAND | yes |
//! | EnablePerfMap / DisablePerfMap (0x0405/0x0406) | UNKNOWN_COMMAND | yes |
//!
//! UNKNOWN_COMMAND is HRESULT 0x80131385 on the wire (BAD_ENCODING is 0x80131384).
mod client;
mod codec;
mod collect;
mod config;
mod config_parse;
mod discovery;
mod error;
mod header;
mod hresult;
mod process;
mod reply;
pub mod session;
mod transport;

pub use client::{Client, PerfMapType};
pub use codec::{PayloadReader, PayloadWriter};
pub use collect::CollectTracingVersion;
pub use config::{
    DEFAULT_RUNDOWN_KEYWORD, Level, ProviderConfig, RUNDOWN_PROVIDER, RUNTIME_KEYWORDS, RUNTIME_PROVIDER,
    SAMPLE_PROFILER_PROVIDER, SessionConfig, runtime_keyword,
};
pub use config_parse::{ConfigError, parse_providers};
pub use discovery::find_socket;
pub use error::{DecodeError, EncodeError, IpcError};
pub use header::{CommandId, HEADER_LEN, Header, MAGIC, command_set, encode_message};
pub use hresult::ServerError;
pub use process::{ProcessDetails, ProcessInfo, ProcessInfo2};
pub use reply::{OkReply, parse_reply, read_reply};
pub use session::{Session, StopHandle};
pub use transport::{Connection, Endpoint};
