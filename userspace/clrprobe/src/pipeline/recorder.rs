//! `record --pipeline`: `record` as a thin front end of the streaming pipeline. The host
//! source (the attach recipe, the sampler, one EventPipe reader per .NET process) feeds the
//! aggregator thread, which owns symbolization and per-process state, as for `top` and the
//! agent; when the recording ends the files sink writes the profiles the aggregator kept, by
//! kind, under the names `record` gives its files.
//!
//! Not yet on this path (refused with a clear line): launching a command, `--save-raw`,
//! `--http`/`--providers`, `--thread-roots`, `--cxa-throw`, recording without CPU samples.
use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use clrprobe_pipeline::stream::{AggregatorConfig, Health};
use clrprobe_profile::{Profile, events::Events};
use crossbeam_channel::Sender;

use super::{
    aggregate::{self, Final, Query},
    sources::{self, HostConfig, SourceError, monotonic_ns},
};
use crate::record::{RecordArgs, Status, alive};

/// What a recording on the pipeline kept.
pub struct Recorded {
    /// By the file kind names `record` writes (`cpu`, `alloc`, …); kinds without samples left out.
    pub profiles: Vec<(&'static str, Profile)>,
    pub events: Events,
    pub health: Health,
    pub warnings: Vec<String>,
    pub duration: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum PipelineRecordError {
    #[error("record --pipeline does not do {0} yet: drop --pipeline")]
    Unsupported(&'static str),
    #[error("process {0} does not exist (it may have exited); check the pid with `ps`")]
    NoProcess(u32),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("starting the aggregator thread: {0}")]
    Thread(std::io::Error),
    #[error("the aggregator did not hand over the profiles: {0}")]
    Aggregator(String),
}

/// How long the end of a recording waits for the sessions to stop (their rundowns name the
/// JIT code) and the perf maps to be switched off.
const STOP_DEADLINE: Duration = Duration::from_secs(10);
/// How long the aggregator may take to name and build the profiles.
const BUILD_DEADLINE: Duration = Duration::from_secs(60);

/// Records until `stop` is set, the duration passes, or every target has exited.
pub fn run(args: &RecordArgs, stop: &'static AtomicBool, mut on_status: impl FnMut(&Status)) -> Result<Recorded, PipelineRecordError> {
    refuse_unsupported(args)?;
    for &pid in &args.pids {
        if !alive(pid) {
            return Err(PipelineRecordError::NoProcess(pid));
        }
    }
    let started = Instant::now();
    let start_mono = monotonic_ns().max(0) as u64;
    let unix_offset_ns = unix_now_ns() as i64 - start_mono as i64;
    let events = clrprobe_pipeline::Kinds { alloc: args.kinds.alloc, exceptions: args.kinds.exceptions, contention: args.kinds.contention };
    let cfg = AggregatorConfig {
        freq_hz: args.freq,
        // The whole recording: no CPU second rolls out, no exited process is let go.
        buckets: usize::MAX,
        exited_grace_ns: u64::MAX,
        kinds: events,
        unix_offset_ns,
        keep_gc_history: true,
        ..AggregatorConfig::default()
    };
    let (warn_tx, warn_rx) = crossbeam_channel::unbounded();
    let host = HostConfig {
        all: args.all,
        dotnet_only: false,
        pids: args.pids.clone(),
        freq: args.freq,
        sampler: args.sampler,
        offcpu: args.kinds.offcpu,
        offcpu_min: args.offcpu_min,
        oncpu: true,
        kinds: events,
        eventpipe: args.eventpipe,
        perf_map: args.perf_map,
        rundown: true,
        parent: args.parent,
        children: true,
        stack_copies: true,
        counters_interval_s: None,
        alloc_slices: None,
        warnings: Some(warn_tx),
    };
    // Off-CPU stacks copied and unwound as `record` does.
    crate::sampler::set_offcpu_copies(args.kinds.offcpu);
    let (rec_tx, rec_rx) = crossbeam_channel::bounded(65_536);
    let (q_tx, q_rx) = crossbeam_channel::unbounded();
    let aggregator = aggregate::spawn(cfg, rec_rx, q_rx).map_err(PipelineRecordError::Thread)?;
    let (host, fallback) = sources::spawn(host, rec_tx, stop)?;
    let mut warnings: Vec<String> = fallback.into_iter().collect();
    let attached = started.elapsed();
    // Samples stamped after a planned end are left out however late the last drain runs.
    let planned_end = args.duration.map(|d| start_mono.saturating_add((attached + d).as_nanos() as u64));
    if let Some(end) = planned_end {
        let _ = q_tx.send(Query::EndAt(end));
    }
    let mut last_status = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let elapsed = started.elapsed();
        let done = stop.load(Ordering::SeqCst)
            || args.duration.is_some_and(|d| elapsed >= d + attached)
            || (!args.all && args.pids.iter().all(|&p| !alive(p)));
        if done {
            break;
        }
        if last_status.elapsed() >= Duration::from_secs(1) {
            last_status = Instant::now();
            if let Some((samples, lost)) = ask(&q_tx, Query::Progress, Duration::from_millis(200)) {
                on_status(&Status { elapsed: elapsed.saturating_sub(attached), samples, lost, symbolized: 0.0 });
            }
        }
    }
    let duration = started.elapsed().saturating_sub(attached).min(args.duration.unwrap_or(Duration::MAX));
    // Ended early (Ctrl-C, the targets exited): now is the end.
    let end = (monotonic_ns().max(0) as u64).min(planned_end.unwrap_or(u64::MAX));
    let _ = q_tx.send(Query::EndAt(end));
    // The host source stops every session (the rundowns arrive), reads the last samples and
    // switches the perf maps off; bounded (a runtime that never answers is given up on).
    stop.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + STOP_DEADLINE;
    while !host.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if host.is_finished() {
        let _ = host.join();
    } else {
        warnings.push("the sessions did not all stop in time: a perf map left on is switched off by the guardian or the next clrprobe".into());
    }
    let fin: Final = ask(&q_tx, |reply| Query::Final { start_unix_ns: start_mono.saturating_add_signed(unix_offset_ns), duration_ns: duration.as_nanos() as u64, reply }, BUILD_DEADLINE)
        .ok_or_else(|| PipelineRecordError::Aggregator("no answer in time".into()))?
        .map_err(PipelineRecordError::Aggregator)?;
    drop(q_tx);
    if ended_soon(&aggregator) {
        let _ = aggregator.join();
    }
    warnings.extend(warn_rx.try_iter());
    warnings.dedup();
    Ok(Recorded { profiles: fin.profiles, events: fin.events, health: fin.health, warnings, duration })
}

/// Sends the query `make(reply)` and waits for the answer until `timeout`.
fn ask<T>(q: &Sender<Query>, make: impl FnOnce(tokio::sync::oneshot::Sender<T>) -> Query, timeout: Duration) -> Option<T> {
    let (reply, mut rx) = tokio::sync::oneshot::channel();
    q.send(make(reply)).ok()?;
    let deadline = Instant::now() + timeout;
    loop {
        match rx.try_recv() {
            Ok(v) => return Some(v),
            Err(tokio::sync::oneshot::error::TryRecvError::Empty) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => return None,
        }
    }
}

/// Has the thread ended (the aggregator: its sources gone, no query left)? Waits a moment.
fn ended_soon(t: &std::thread::JoinHandle<()>) -> bool {
    let until = Instant::now() + Duration::from_secs(2);
    while !t.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    t.is_finished()
}

fn refuse_unsupported(args: &RecordArgs) -> Result<(), PipelineRecordError> {
    let no = PipelineRecordError::Unsupported;
    if args.resume_after_attach {
        return Err(no("launching a command"));
    }
    if args.save_raw.is_some() {
        return Err(no("--save-raw"));
    }
    if args.net.http || !args.net.providers.is_empty() {
        return Err(no("--http or --providers"));
    }
    if args.thread_roots {
        return Err(no("--thread-roots"));
    }
    if args.cxa_throw {
        return Err(no("--cxa-throw"));
    }
    if !args.kinds.cpu {
        return Err(no("recording without CPU samples"));
    }
    Ok(())
}

fn unix_now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// The lines printed after a recording on the pipeline: duration, each kind's stacks and
/// total, the records absorbed and what was lost.
pub fn summary_text(r: &Recorded) -> String {
    let mut s = format!("recorded {:.1} s on the pipeline: {} records, {} processes followed\n", r.duration.as_secs_f64(), r.health.records, r.health.processes_followed);
    for (kind, p) in &r.profiles {
        s.push_str(&format!("  {kind}: {} stacks, {} in all\n", p.samples().count(), p.total(0)));
    }
    for (source, n) in &r.health.lost {
        s.push_str(&format!("  lost: {n} from {source}\n"));
    }
    if r.health.decode_errors > 0 {
        s.push_str(&format!("  {} runtime events did not decode\n", r.health.decode_errors));
    }
    s
}
