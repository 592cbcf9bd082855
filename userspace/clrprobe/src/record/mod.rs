//! `clrprobe record`: CPU samples and off-CPU time from the kernel, allocation / exception /
//! contention samples from EventPipe, names from perf maps, ReadyToRun images, ELF and
//! kallsyms — all into one profile with a sample type per kind.
mod jit;
pub(crate) mod clr_session;
pub(crate) mod cxa;
pub(crate) mod fold_files;
mod frames;
mod limits;
pub(crate) mod gc;
pub mod http;
mod mappings;
pub(crate) mod memory;
mod perfmap;
pub mod recipe;
pub mod save_raw;
mod split;
pub mod stop_priority;
mod summary;

pub use jit::JitMethod;
pub use frames::FrameResolver;
pub use crate::output::{Format, Written, write_all};
pub use perfmap::{PerfMapGuard, PerfMapState, namespaced_pid, perf_map_path};
pub use split::{split_by_process, write_per_process};
pub use recipe::EVENTPIPE_BUFFER_MB;
pub use limits::{Limits, limits_text};
pub use memory::OwnMemory;
pub use summary::{RecordSummary, RecordedPid, TopFrame, summary_text};
pub use clrprobe_pipeline::EventReport;

use std::{path::PathBuf, time::Duration};

use clrprobe_profile::Profile;

use crate::sampler::{RawSample, SamplerChoice};

/// What to record. `Default` records every kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordKinds {
    pub cpu: bool,
    pub alloc: bool,
    pub exceptions: bool,
    pub contention: bool,
    pub offcpu: bool,
}

impl Default for RecordKinds {
    fn default() -> Self {
        Self { cpu: true, alloc: true, exceptions: true, contention: true, offcpu: true }
    }
}

/// Arguments of a recording, independent of the CLI parser.
#[derive(Debug, Clone)]
pub struct RecordArgs {
    pub pids: Vec<u32>,
    /// None: until Ctrl-C or until every target exits.
    pub duration: Option<Duration>,
    pub freq: u64,
    pub sampler: SamplerChoice,
    pub kinds: RecordKinds,
    /// Off-CPU intervals shorter than this are not recorded.
    pub offcpu_min: Duration,
    /// Open an EventPipe session per .NET target (method names, rundown, events).
    pub eventpipe: bool,
    /// Switch perf maps on over IPC where the target has none (.NET 8+).
    pub perf_map: bool,
    /// Every process on the host (`--all`): samples all CPUs, finds .NET processes each second.
    pub all: bool,
    /// `--all`: the output prefix of per-process files; each recorded process's
    /// `PREFIX.PID.*.pb.gz` are written when it exits and is folded (None: not written here).
    pub fold_files: Option<PathBuf>,
    /// The targets were started stopped by `record -- CMD`: SIGCONT them once sampling runs.
    pub resume_after_attach: bool,
    /// Each thread at the root of its stacks (`--thread-roots`).
    pub thread_roots: bool,
    /// `--http` and `--providers`.
    pub net: http::NetArgs,
    /// Count `__cxa_throw` with a uprobe even where EventPipe delivers the exceptions.
    pub cxa_throw: bool,
    /// `--save-raw DIR`: keep the sources' raw inputs for `report --replay`.
    pub save_raw: Option<PathBuf>,
    /// `--all --parent PID`: only .NET processes descending from PID get perf maps and
    /// EventPipe sessions (the host is still sampled).
    pub parent: Option<u32>,
}

/// Live progress, reported about once a second.
#[derive(Debug, Clone, Copy, Default)]
pub struct Status {
    pub elapsed: Duration,
    pub samples: u64,
    pub lost: u64,
    /// Share of sampled managed frames named so far (0..=1).
    pub symbolized: f64,
}

/// Is `pid` a .NET (CoreCLR) process? libcoreclr mapped.
pub fn is_dotnet(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains("libcoreclr.so"))
}

/// Is the process still running? A zombie (exited, not yet reaped by its parent) is not.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| alive_in_stat(&stat))
}

/// Does a /proc/…/stat line say the process runs (its state neither a zombie's nor a dead
/// one's)?
pub fn alive_in_stat(stat: &str) -> bool {
    stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()).is_some_and(|st| st != "Z" && st != "X")
}

pub(crate) fn save_raw_meta(args: &RecordArgs, started_mono: i64, start_unix_ns: u64) -> clrprobe_pipeline::stream::raw::RawMeta {
    clrprobe_pipeline::stream::raw::RawMeta {
        freq_hz: args.freq,
        start_mono_ns: started_mono.max(0) as u64,
        start_unix_ns,
        alloc: args.kinds.alloc,
        exceptions: args.kinds.exceptions,
        contention: args.kinds.contention,
        offcpu: args.kinds.offcpu,
        version: env!("CARGO_PKG_VERSION").into(),
    }
}

/// clrprobe's own threads add up by role, without their tid: a long `--all` recording starts
/// threads per target (`attach-PID`, `eventpipe-PID`, `stop-PID`…), and each one's samples and
/// labels were kept apart to the end (4,600 label sets of a 60-minute soak).
pub(crate) fn own_thread(s: &mut RawSample) {
    s.tid = 0;
    if let Some(i) = s.comm.rfind('-')
        && i + 1 < s.comm.len()
        && s.comm[i + 1..].bytes().all(|b| b.is_ascii_digit())
    {
        s.comm.truncate(i);
    }
}

use crate::report::REPORT_COMMENT;

/// Keeps each process's event report (exception counts, wait percentiles, allocation totals)
/// in the profile, so `clrprobe report` can print it from the pprof file alone.
pub fn attach_reports(profile: Profile, reports: &[(u32, clrprobe_pipeline::EventReport)]) -> Profile {
    // Markers and comments need no interning: added to the built profile, not copied.
    let mut b = profile;
    for (pid, r) in reports {
        let json = serde_json::to_string(r).unwrap_or_default();
        b.add_comment(format!("{REPORT_COMMENT}{pid} {json}"));
    }
    b
}

/// Where outputs go by default: `clrprobe-PID`.
pub fn default_prefix(pids: &[u32]) -> PathBuf {
    PathBuf::from(format!("clrprobe-{}", pids.first().copied().unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_threads_add_up_by_role() {
        let sample = |comm: &str| crate::sampler::RawSample {
            pid: std::process::id(),
            tid: 4242,
            comm: comm.into(),
            kernel: std::sync::Arc::from(vec![]),
            user: std::sync::Arc::from(vec![]),
            count: 1,
            time_ns: 0,
        };
        for (comm, role) in [("attach-12345", "attach"), ("eventpipe-9", "eventpipe"), ("clrprobe-elf-sy", "clrprobe-elf-sy"), ("stop-", "stop-"), ("aggregator", "aggregator")] {
            let mut s = sample(comm);
            super::own_thread(&mut s);
            assert_eq!((s.tid, s.comm.as_str()), (0, role));
        }
    }
}
