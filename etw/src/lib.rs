//! Windows ETW source for clrprobe: the CLR runtime and rundown events of .NET Core and .NET
//! Framework 4.x read from ETW, kernel CPU samples with stacks, native image loads, and the
//! .NET Framework counters from the CLR's shared IPC block, all fed into the same pipeline
//! (`clrprobe-pipeline`) and profile model (`clrprobe-profile`) as the Linux EventPipe path.
//!
//! Everything but the ferrisetw/Win32 layer ([`session`], `ipcblock_windows`, [`record`] and
//! [`counters`] functions) is platform-neutral and unit-tested on Linux:
//! * [`record`]: the ETW-shaped record → `clr_events::RawEvent` + `clrprobe_pipeline::EventInput`;
//! * [`stackwalk`]: attaching ClrStackWalk / kernel StackWalk events to their events;
//! * [`methods`]: the method/module table that names stack addresses (the perf-map equivalent);
//! * [`collector`]: the composition, records in → profile and report out;
//! * [`ipcblock`]: the `Cor_SxSPublic_IPCBlock` counters layout for x86 and x64 writers.
//!
//! See README.md for what has (and has not) run on a real Windows machine.

pub mod collector;
pub mod counters;
pub mod error;
pub mod ipcblock;
pub mod kernel;
pub mod methods;
pub mod plan;
pub mod providers;
pub mod record;
pub mod stackwalk;

#[cfg(windows)]
mod ipcblock_windows;
#[cfg(windows)]
pub mod session;

pub use collector::{Collector, CollectorStats, RecordKinds};
pub use error::EtwError;
pub use ipcblock::{ClrCounters, CountersError};
pub use record::EtwRecord;

#[cfg(windows)]
pub use ipcblock_windows::counters;

/// Records `duration` of the given kinds from process `pid` (`None`: all processes) over ETW,
/// and returns the profile and the event report. Needs an elevated prompt (kernel logger).
#[cfg(windows)]
pub fn record(
    pid: Option<u32>,
    duration: std::time::Duration,
    kinds: RecordKinds,
) -> Result<(clrprobe_profile::Profile, clrprobe_pipeline::EventReport), EtwError> {
    let (profile, report, _stats) = session::record(&session::SessionConfig::new(pid, kinds), duration)?;
    Ok((profile, report))
}
