//! The streaming pipeline on Linux: sources (BPF sampler and off-CPU drains, one EventPipe
//! reader per .NET process, discovery, /proc CPU times) send plain-data records over a
//! crossbeam channel to one aggregator thread, which owns the symbolizer and all
//! per-process state ([`clrprobe_pipeline::stream::Aggregator`]); sinks ask it for snapshots
//! (HTTP for `clrprobe agent`).
pub mod aggregate;
pub mod fold;
pub mod recorder;
pub mod reply;
pub mod sinks;
pub mod sources;
pub mod stop;
