//! clrprobe: a kernel-assisted profiler for .NET.
pub mod cli;
pub mod doctor;

#[cfg(target_os = "linux")]
pub mod bpf;
#[cfg(target_os = "linux")]
pub mod probe;
#[cfg(target_os = "linux")]
pub mod sampler;
