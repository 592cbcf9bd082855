//! `clrprobe record`: CPU samples from the kernel, names from perf maps, ReadyToRun images,
//! ELF and kallsyms, runtime events from EventPipe, all into one profile.
mod clr_collect;
mod clr_session;
mod frames;
mod output;
mod perfmap;
mod summary;

pub use clr_collect::{ClrCollector, JitMethod};
pub use frames::FrameResolver;
pub use output::{Format, Written, write_all};
pub use perfmap::{PerfMapGuard, PerfMapState, perf_map_path};
pub use summary::{RecordSummary, TopFrame, summary_text};

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use clrprobe_profile::{LabelSet, Period, Profile, ProfileBuilder, SampleType, kinds, units};

use crate::sampler::{self, RawSample, SamplerChoice, SamplerError};
use clr_session::{RuntimeSession, naming_config};

/// Arguments of a recording, independent of the CLI parser.
#[derive(Debug, Clone)]
pub struct RecordArgs {
    pub pids: Vec<u32>,
    /// None: until Ctrl-C or until every target exits.
    pub duration: Option<Duration>,
    pub freq: u64,
    pub sampler: SamplerChoice,
    /// Open an EventPipe session per .NET target (method names, rundown).
    pub eventpipe: bool,
    /// Switch perf maps on over IPC where the target has none (.NET 8+).
    pub perf_map: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("process {0} does not exist (it may have exited); check the pid with `ps`")]
    NoProcess(u32),
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    #[error(transparent)]
    Profile(#[from] clrprobe_profile::ProfileError),
}

/// Live progress, reported about once a second.
#[derive(Debug, Clone, Copy, Default)]
pub struct Status {
    pub elapsed: Duration,
    pub samples: u64,
    pub lost: u64,
    /// Share of user frames named so far (0..=1).
    pub symbolized: f64,
}

/// Is `pid` a .NET (CoreCLR) process? libcoreclr mapped.
pub fn is_dotnet(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains("libcoreclr.so"))
}

type AggKey = (u32, u32, String, Arc<[u64]>, Arc<[u64]>);

/// Records until `stop` is set, the duration passes, or every target has exited.
pub fn run(
    args: &RecordArgs,
    stop: &AtomicBool,
    mut on_status: impl FnMut(&Status),
) -> Result<(Profile, RecordSummary), RecordError> {
    for &pid in &args.pids {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(RecordError::NoProcess(pid));
        }
    }
    let started = Instant::now();
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut summary = RecordSummary::default();
    // Samples first: the time to the first sample is what a user waits for.
    let (mut sampler, fallback) = sampler::start(args.sampler, &args.pids, args.freq)?;
    summary.sampler = Some(sampler.kind());
    if let Some(why) = fallback {
        summary.warnings.push(why);
    }
    summary.time_to_attach = started.elapsed();
    let mut guards = Vec::new();
    let mut sessions = Vec::new();
    let mut resolver = FrameResolver::new();
    for &pid in &args.pids {
        resolver.add_process(pid);
        if !is_dotnet(pid) {
            continue;
        }
        if args.perf_map {
            let g = PerfMapGuard::ensure(pid);
            summary.perf_maps.push((pid, g.state.clone()));
            guards.push(g);
        }
        if args.eventpipe {
            match RuntimeSession::start(pid, &naming_config(0)) {
                Ok(s) => sessions.push(s),
                Err(e) => summary.warnings.push(format!("no EventPipe session for {pid}: {e}")),
            }
        }
    }

    let mut agg: HashMap<AggKey, u64> = HashMap::new();
    let absorb = |agg: &mut HashMap<AggKey, u64>, batch: Vec<RawSample>, resolver: &mut FrameResolver| {
        for s in batch {
            resolver.note_addresses(s.pid, &s.user, s.count);
            *agg.entry((s.pid, s.tid, s.comm, s.kernel, s.user)).or_insert(0) += s.count;
        }
    };
    let mut last_drain = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let elapsed = started.elapsed();
        let done = stop.load(Ordering::SeqCst)
            || args.duration.is_some_and(|d| elapsed >= d + summary.time_to_attach)
            || args.pids.iter().all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists());
        if done || last_drain.elapsed() >= Duration::from_secs(1) {
            last_drain = Instant::now();
            // Read perf maps and /proc/PID/maps while the targets are alive.
            for &pid in &args.pids {
                resolver.refresh(pid);
            }
            match sampler.drain() {
                Ok(batch) => absorb(&mut agg, batch, &mut resolver),
                Err(e) => summary.warnings.push(format!("reading samples: {e}")),
            }
            let st = sampler.stats();
            on_status(&Status {
                elapsed,
                samples: agg.values().sum(),
                lost: st.lost_samples,
                symbolized: resolver.named_share(),
            });
        }
        if done {
            break;
        }
    }
    summary.duration = started.elapsed().saturating_sub(summary.time_to_attach);
    summary.sampler_stats = sampler.stats();
    drop(sampler);

    for s in sessions {
        let pid = s.pid();
        let outcome = s.finish();
        if let Some(e) = &outcome.error {
            summary.warnings.push(e.to_string());
        } else if outcome.status != clrprobe_eventpipe::nettrace::StreamStatus::Complete
            && std::path::Path::new(&format!("/proc/{pid}")).exists()
        {
            summary.warnings.push(format!("the EventPipe stream of {pid} ended before its end marker"));
        }
        summary.eventpipe.push((pid, outcome.stats.events, outcome.stats.dropped_events, outcome.collector.jit_methods.len()));
        resolver.add_jit_methods(pid, &outcome.collector.jit_methods);
    }

    let profile = build_profile(&agg, &mut resolver, args.freq, start_unix_ns, summary.duration)?;
    for mut g in guards {
        if let Err(e) = g.restore() {
            summary.warnings.push(format!("switching the perf map off: {e}"));
        }
    }
    summary.fill_from(&profile);
    Ok((profile, summary))
}

fn build_profile(
    agg: &HashMap<AggKey, u64>,
    resolver: &mut FrameResolver,
    freq: u64,
    start_unix_ns: u64,
    duration: Duration,
) -> Result<Profile, RecordError> {
    let cpu = SampleType::new(kinds::CPU, units::SAMPLES);
    let mut b = ProfileBuilder::new(vec![cpu]);
    b.set_period(Period { sample_type: SampleType::new(kinds::CPU, units::NANOSECONDS), value: (1_000_000_000 / freq.max(1)) as i64 });
    b.set_start_time_ns(start_unix_ns);
    b.set_duration_ns(duration.as_nanos() as u64);
    let mut process_names: HashMap<u32, String> = HashMap::new();
    for ((pid, tid, comm, kernel, user), &count) in agg {
        let frames = resolver.stack(*pid, kernel, user);
        let mut ids = Vec::with_capacity(frames.len());
        for f in frames {
            ids.push(b.intern_frame(f)?);
        }
        let stack = b.intern_stack(&ids)?;
        let pname = process_names.entry(*pid).or_insert_with(|| process_name(*pid)).clone();
        let mut labels = LabelSet::thread(*pid, *tid);
        labels.thread_name = Some(comm.as_str().into());
        labels.process_name = Some(pname.as_str().into());
        let labels = b.intern_labels(labels)?;
        b.add_sample(stack, &[count as i64], labels)?;
    }
    Ok(b.build())
}

fn process_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim_end().to_string()).unwrap_or_else(|_| pid.to_string())
}

/// Where outputs go by default: `clrprobe-PID-YYYYmmdd-HHMMSS` style, but without a clock
/// dependency: `clrprobe-PID`.
pub fn default_prefix(pids: &[u32]) -> PathBuf {
    PathBuf::from(format!("clrprobe-{}", pids.first().copied().unwrap_or(0)))
}
