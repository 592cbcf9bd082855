//! Client for the .NET diagnostics IPC protocol (dotnet/diagnostics `ipc-protocol.md`).
//!
//! - [`find_socket`]: locate a process's diagnostics endpoint.
//! - [`Client`]: one command per connection — ProcessInfo/ProcessInfo2, ResumeRuntime,
//!   EnablePerfMap/DisablePerfMap, StopTracing, and [`Client::start_session`] (CollectTracing,
//!   newest supported version first).
//! - [`Session`]: a `Read` of the NetTrace stream; always stopped (see [`session`]).
//! - [`SessionConfig`] / [`parse_providers`]: typed session configuration.
//! - [`parse_reply`], [`ProcessInfo::parse`], …: pure decoders (fuzzed by `fuzz/ipc_reply`).
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
