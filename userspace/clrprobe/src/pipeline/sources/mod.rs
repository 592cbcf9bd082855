//! Where records come from. Linux only: the host source (BPF, discovery, /proc) and one
//! EventPipe reader per .NET process.
mod eventpipe;
mod host;
mod proc_stat;

pub use eventpipe::EventPipeSource;
pub use host::{AllocDuty, HostConfig, HostSource, SourceError, spawn};
pub use proc_stat::{container_id, monotonic_ns, ppid};
