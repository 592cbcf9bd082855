//! clrprobe: a kernel-assisted profiler for .NET.
pub mod cli;
pub mod doctor;
pub mod formats;
pub mod output;
pub mod report;

#[cfg(target_os = "linux")]
pub mod bpf;
#[cfg(target_os = "linux")]
pub mod probe;
pub mod trace;
#[cfg(target_os = "linux")]
pub mod sampler;
#[cfg(target_os = "linux")]
pub mod record;
#[cfg(target_os = "linux")]
pub mod signals;
#[cfg(target_os = "linux")]
pub mod discover;
#[cfg(target_os = "linux")]
pub mod launch;
#[cfg(target_os = "linux")]
pub mod lifecycle;
#[cfg(target_os = "linux")]
pub mod ps;
#[cfg(target_os = "linux")]
pub mod top;
