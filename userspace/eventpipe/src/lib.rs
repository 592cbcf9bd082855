//! .NET diagnostics IPC client and streaming NetTrace reader.
pub mod ipc;
pub mod nettrace;
