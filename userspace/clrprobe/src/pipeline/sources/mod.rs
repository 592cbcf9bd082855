//! Where records come from. Linux only: the host source (BPF, discovery, /proc) and one
//! EventPipe reader per .NET process.
mod cxa;
mod eventpipe;
mod host;
mod no_cpu;
mod proc_stat;

pub use cxa::CxaReport;
pub use eventpipe::{EventPipeSource, NetTap, read_stream, received, recycle};
pub use host::{AllocDuty, HostConfig, HostReport, HostSource, RecordingMode, SessionSpecs, SourceError, dotnet_session_specs, late_line, spawn};
pub use proc_stat::{container_id, monotonic_ns, ppid};
