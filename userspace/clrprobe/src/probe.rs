//! `clrprobe probe`: the end-to-end check of the BPF path. Loads the programs, samples the
//! target's CPU and counts a uprobe in it, then reports per-pid counts and the BPF log lines.
use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use serde::Serialize;

use crate::bpf::{BpfError, Loaded};

/// Arguments of `clrprobe probe`, independent of the CLI parser.
#[derive(Debug, Clone)]
pub struct ProbeArgs {
    pub pids: Vec<u32>,
    pub duration: Duration,
    pub freq: u64,
    /// Library path or name ("libc", "/path/libcoreclr.so") and symbol.
    pub uprobe: Option<(PathBuf, String)>,
}

#[derive(Debug, Serialize)]
pub struct ProbeReport {
    pub cpus: usize,
    /// CPU samples per pid.
    pub samples: BTreeMap<u32, u64>,
    /// Distinct (tid, stack) keys per pid.
    pub sample_keys: BTreeMap<u32, usize>,
    /// Uprobe hits per pid.
    pub uprobe_hits: BTreeMap<u32, u64>,
    pub user_stack_errors: u64,
    pub kernel_stack_errors: u64,
    pub dropped_map_full: u64,
    pub bpf_logs: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(transparent)]
    Bpf(#[from] BpfError),
    #[error("process {0} does not exist (it may have exited); check the pid with `ps`")]
    NoProcess(u32),
}

/// Runs the probe; `on_attached` is called once every program is attached.
pub fn run(args: &ProbeArgs, on_attached: impl FnOnce()) -> Result<ProbeReport, ProbeError> {
    for &pid in &args.pids {
        if pid != 0 && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(ProbeError::NoProcess(pid));
        }
    }
    // No stack copies here: the smallest stack-copy ring.
    let mut bpf = Loaded::load_with_ring(crate::bpf::MIN_RING_BYTES)?;
    bpf.add_targets(&args.pids)?;
    let cpus = bpf.attach_sampler(args.freq)?;
    if let Some((lib, sym)) = &args.uprobe {
        bpf.attach_uprobe(lib, sym, None)?;
    }
    on_attached();
    let end = Instant::now() + args.duration;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50).min(end.saturating_duration_since(Instant::now())));
        bpf.poll_logs();
    }
    bpf.poll_logs();
    let mut samples = BTreeMap::new();
    let mut sample_keys = BTreeMap::new();
    for (k, n) in bpf.sample_counts()? {
        *samples.entry(k.pid).or_insert(0) += n;
        *sample_keys.entry(k.pid).or_insert(0) += 1;
    }
    let stats = bpf.stats()?;
    Ok(ProbeReport {
        cpus,
        samples,
        sample_keys,
        uprobe_hits: bpf.uprobe_counts()?.into_iter().collect(),
        user_stack_errors: stats.user_stack_errors,
        kernel_stack_errors: stats.kernel_stack_errors,
        dropped_map_full: stats.dropped_map_full,
        bpf_logs: bpf.logs.lines(),
    })
}
