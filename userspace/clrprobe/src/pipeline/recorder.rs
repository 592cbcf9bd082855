//! `record`: a thin front end of the streaming pipeline (every recording; the old one-shot
//! `record::run` was removed in round 10). The host source (the attach recipe, the sampler, one
//! EventPipe reader per .NET process) feeds the aggregator thread, which owns symbolization and
//! per-process state, as for `top` and the agent; when the recording ends the aggregator builds
//! `record`'s combined profile (every kind, samples at their times, the event reports and GC
//! markers), written as `record` writes it.
//!
//! `--save-raw DIR` saves what the aggregator absorbs and each session's stream, in the
//! layout `report --replay` reads; `--http`/`--providers` read their EventSources with a
//! collector on each session's reader, and the aggregator names the requests and places the
//! slowest among its timed samples; `--cxa-throw` places the uprobes as each .NET process is
//! set up; event kinds alone need no BPF.
use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use clrprobe_pipeline::{
    EventReport,
    stream::{AggregatorConfig, CombinedOptions, Health},
};
use clrprobe_profile::Profile;
use crossbeam_channel::Sender;

use super::{
    aggregate::{self, Combined, Query},
    sources::{self, HostConfig, HostReport, RecordingMode, SourceError, monotonic_ns},
};
use crate::record::{RecordArgs, Status, alive};

/// What a recording on the pipeline kept.
pub struct Recorded {
    /// Every kind in one profile, with the event reports as comments and the GC markers:
    /// the profile `record` writes.
    pub profile: Profile,
    pub reports: Vec<(u32, EventReport)>,
    pub health: Health,
    pub warnings: Vec<String>,
    pub duration: Duration,
    pub time_to_attach: Duration,
    /// From the end of the recording to the profile built.
    pub stop_time: Duration,
    /// Followed processes: pid, name, events read, events the runtime dropped, JIT methods.
    pub processes: Vec<(u32, String, u64, u64, u64)>,
    /// The BPF sampler ran (not the perf_event fallback).
    pub bpf: bool,
    /// Off-CPU time was recorded (the sched_switch program attached).
    pub offcpu: bool,
    /// The host source's account (None: it did not stop in time).
    pub host: Option<HostReport>,
    /// Named processes that are not .NET (followed without a set-up).
    pub natives: Vec<u32>,
    /// `--save-raw`: where the raw inputs went (the summary's line).
    pub saved_raw: Option<String>,
    /// `--http` / `--providers`: per process, the requests and EventSource summaries.
    pub http: Vec<crate::http::HttpReport>,
    /// `--all`: the processes folded as they exited (their reports are in `reports`).
    pub folded: Option<super::fold::Folded>,
}

#[derive(Debug, thiserror::Error)]
pub enum PipelineRecordError {
    #[error("process {0} does not exist (it may have exited); check the pid with `ps`")]
    NoProcess(u32),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("starting the aggregator thread: {0}")]
    Thread(std::io::Error),
    #[error("the aggregator did not hand over the profiles: {0}")]
    Aggregator(String),
    #[error("--save-raw: {0}")]
    SaveRaw(clrprobe_profile::safe_file::SafeFileError),
}

/// The recording loop's longest sleep: how soon it sees Ctrl-C (the stop flag) when a signal
/// cannot wake it ([`crate::signals::wake_fd`]).
const LOOP_TICK: Duration = Duration::from_millis(100);
/// … when a signal wakes it: the status's pace. At LOOP_TICK, its ten wake-ups a second were
/// most of the recording thread's CPU (~0.9 ms a second with three busy processes).
const WOKEN_TICK: Duration = Duration::from_secs(1);

/// How long the end of a recording waits for the sessions to stop (their rundowns name the
/// JIT code) and the perf maps to be switched off.
const STOP_DEADLINE: Duration = Duration::from_secs(10);
/// How long the end of a recording stopped by Ctrl-C waits for the sources.
const INTERRUPTED_STOP: Duration = Duration::from_millis(1000);
/// How long the aggregator may take to name and build the profiles.
const BUILD_DEADLINE: Duration = Duration::from_secs(60);

/// Records until `stop` is set, the duration passes, or every target has exited.
pub fn run(args: &RecordArgs, stop: &'static AtomicBool, mut on_status: impl FnMut(&Status)) -> Result<Recorded, PipelineRecordError> {
    for &pid in &args.pids {
        if !alive(pid) {
            return Err(PipelineRecordError::NoProcess(pid));
        }
    }
    // Malloc arenas capped before threads start.
    crate::record::memory::cap_arenas();
    let started = Instant::now();
    let start_mono = monotonic_ns().max(0) as u64;
    let unix_offset_ns = unix_now_ns() as i64 - start_mono as i64;
    // `--save-raw`: the aggregator saves what it absorbs, the sessions their streams (a
    // directory that cannot hold them fails now).
    let saving = match &args.save_raw {
        Some(dir) => Some(
            crate::record::save_raw::start(dir, crate::record::save_raw_meta(args, start_mono as i64, start_mono.saturating_add_signed(unix_offset_ns)))
                .map_err(PipelineRecordError::SaveRaw)?,
        ),
        None => None,
    };
    let events = clrprobe_pipeline::Kinds { alloc: args.kinds.alloc, exceptions: args.kinds.exceptions, contention: args.kinds.contention };
    let cfg = AggregatorConfig {
        freq_hz: args.freq,
        // The whole recording: no CPU second rolls out, no exited process is let go.
        buckets: usize::MAX,
        exited_grace_ns: u64::MAX,
        kinds: events,
        unix_offset_ns,
        keep_gc_history: true,
        keep_times: true,
        ..AggregatorConfig::default()
    };
    // Host-wide, the CPU samples of the whole recording add up in one bucket (a bucket a
    // second kept each second's copy of every stack of every process on the host, and memory
    // grew with the time recorded); the profile merges the buckets all the same.
    let cfg = if args.all { AggregatorConfig { bucket_ns: u64::MAX, buckets: 1, max_cpu_keys: ALL_CPU_KEYS, ..cfg } } else { cfg };
    // Named processes that are not .NET. A launched one is the stopped shell that execs the
    // command: looked at once it runs (followed as not .NET if it has not loaded the runtime
    // 2 s after its start, set up after all if it loads it later).
    let natives: Vec<u32> = if args.resume_after_attach { args.pids.clone() } else { args.pids.iter().copied().filter(|&p| !crate::record::is_dotnet(p)).collect() };
    let (warn_tx, warn_rx) = crossbeam_channel::unbounded();
    let (report_tx, report_rx) = crossbeam_channel::bounded(1);
    // `--http` / `--providers`: each session's collector outcome when its stream ends.
    let (net_tx, net_rx) = crossbeam_channel::unbounded();
    let net_on = args.net.collector().is_some();
    let stopping = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
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
        recording: Some(RecordingMode {
            launched: args.resume_after_attach,
            report: Some(report_tx),
            stopping: stopping.clone(),
            no_cpu: !args.kinds.cpu,
            natives: natives.clone(),
            cxa: args.kinds.exceptions && (args.cxa_throw || !args.eventpipe),
            net: args.net.clone(),
            net_parts: net_on.then(|| net_tx.clone()),
        }),
    };
    // Off-CPU stacks copied and unwound as `record` does.
    crate::sampler::set_offcpu_copies(args.kinds.offcpu);
    let (rec_tx, rec_rx) = crossbeam_channel::bounded(RECORD_CHANNEL);
    let (q_tx, q_rx) = crossbeam_channel::unbounded();
    let aggregator = aggregate::spawn(cfg, rec_rx, q_rx).map_err(PipelineRecordError::Thread)?;
    if !args.resume_after_attach {
        // The named processes' code is named from their first samples (a launched one is
        // still the shell that execs it).
        let _ = q_tx.send(Query::Expect(args.pids.clone()));
    }
    let (host, fallback, offcpu_on) = sources::spawn(host, rec_tx, stop)?;
    let bpf = fallback.is_none();
    // Off-CPU time is recorded only where the sched_switch program attached (BPF sampler):
    // without it, no empty off-CPU profile is written and the summary says so.
    let offcpu = args.kinds.offcpu && offcpu_on;
    // Loading BPF ran code that nothing runs again (see own_pages).
    crate::own_pages::release_code("loading BPF");
    let mut warnings: Vec<String> = fallback.into_iter().collect();
    let attached = started.elapsed();
    // `--http` / `--providers`: where the requests are placed among the samples.
    let net_clock = crate::record::http::Clock {
        started_mono_ns: start_mono as i64,
        start_unix_ns: start_mono.saturating_add_signed(unix_offset_ns),
        cpu_period_ms: 1e3 / args.freq.max(1) as f64,
        offcpu,
    };
    // Host-wide: exited processes are folded as they go (their files written then; with
    // `--http`, their requests named and placed among their samples then).
    if args.all {
        let at = start_mono.saturating_add(attached.as_nanos() as u64);
        let base = CombinedOptions {
            start_mono_ns: at,
            start_unix_ns: at.saturating_add_signed(unix_offset_ns),
            duration_ns: 0,
            cpu: args.kinds.cpu,
            offcpu,
            gc_root: crate::record::gc::gc_frame(),
            thread_roots: args.thread_roots,
        };
        // The columns of the combined profile.
        use clrprobe_profile::{SampleType, kinds, units};
        let mut types = Vec::new();
        if args.kinds.cpu {
            types.push(SampleType::new(kinds::CPU, units::SAMPLES));
        }
        types.extend(events.sample_types());
        if offcpu {
            types.push(SampleType::new(kinds::OFF_CPU, units::NANOSECONDS));
        }
        let mut folding = super::fold::Folding::new(base, types, args.fold_files.clone());
        if net_on {
            folding = folding.with_net(net_rx.clone(), net_clock);
        }
        let _ = q_tx.send(Query::Fold(Box::new(folding)));
    }
    if args.resume_after_attach {
        // Launch mode: the command runs from its first instruction, sampled.
        for &pid in &args.pids {
            // SAFETY: kill(2) with a pid and a signal number has no memory effects.
            unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        }
    }
    // Samples stamped after a planned end are left out however late the last drain runs.
    let planned_end = args.duration.map(|d| start_mono.saturating_add((attached + d).as_nanos() as u64));
    if let Some(end) = planned_end {
        let _ = q_tx.send(Query::EndAt(end));
        crate::record::save_raw::end_at(end as i64);
    }
    let mut last_status = Instant::now();
    let mut seconds = 0u32;
    let exits = crate::lifecycle::exits::Exits::watch(if args.all { &[] } else { &args.pids });
    // `stop` is the signals' flag (main's): their pipe wakes the loop at Ctrl-C.
    let wake = crate::signals::wake_fd().filter(|_| crate::signals::is_stop_flag(stop));
    let tick = if wake.is_some() { WOKEN_TICK } else { LOOP_TICK };
    loop {
        // Woken by a target's exit, the planned end, Ctrl-C, or each tick for the status (and
        // Ctrl-C without the signals' pipe). A 20 ms sleep was 50 wake-ups a second: 5 % of a
        // busy recording's CPU.
        let to_end = args.duration.map_or(tick, |d| (d + attached).saturating_sub(started.elapsed()));
        exits.wait_or(wake, to_end.min(tick));
        let elapsed = started.elapsed();
        let done = stop.load(Ordering::SeqCst)
            || args.duration.is_some_and(|d| elapsed >= d + attached)
            || (!args.all && exits.all_exited());
        if done {
            break;
        }
        if last_status.elapsed() >= Duration::from_secs(1) {
            last_status = Instant::now();
            // Each second: freed heap back to the kernel, and the code of set-up and the
            // first seconds given back (see own_pages).
            seconds += 1;
            crate::record::memory::trim();
            if seconds <= 2 {
                crate::own_pages::release_code("recording");
            }
            if let Some((samples, lost, symbolized)) = ask(&q_tx, Query::Progress, Duration::from_millis(200)) {
                on_status(&Status { elapsed: elapsed.saturating_sub(attached), samples, lost, symbolized });
            }
        }
    }
    // Ctrl-C: everything after it is bounded to end within ~2 s.
    let interrupted = stop.load(Ordering::SeqCst);
    let done_at = Instant::now();
    super::stop::raise_priority();
    let duration = started.elapsed().saturating_sub(attached).min(args.duration.unwrap_or(Duration::MAX));
    // Ended by Ctrl-C: now is the end. Ended by the targets' exit: their last events are
    // kept whatever their times (an event just before the exit can be stamped a few ms after
    // the moment the exit was seen: the runtime's clock is shifted onto the host's).
    if interrupted {
        let end = (monotonic_ns().max(0) as u64).min(planned_end.unwrap_or(u64::MAX));
        let _ = q_tx.send(Query::EndAt(end));
        crate::record::save_raw::end_at(end as i64);
    }
    // The host source stops every session (the rundowns arrive), reads the last samples and
    // switches the perf maps off; bounded (a runtime that never answers is given up on).
    stop.store(true, Ordering::SeqCst);
    // Ctrl-C: the recording ends within ~2 s whatever its targets do (the host source sent
    // its samples up to the end first; a runtime that does not answer is left to the source).
    let deadline = if interrupted { done_at + INTERRUPTED_STOP } else { Instant::now() + STOP_DEADLINE };
    while !host.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let host_finished = host.is_finished();
    log::info!("stop: host source {} after {:?}", if host_finished { "ended" } else { "given up on" }, done_at.elapsed());
    if host_finished {
        let _ = host.join();
    }
    if !host_finished {
        warnings.push("the sessions did not all stop in time: a perf map left on is switched off by the guardian or the next clrprobe".into());
    }
    let opts = CombinedOptions {
        start_mono_ns: start_mono.saturating_add(attached.as_nanos() as u64),
        start_unix_ns: start_mono.saturating_add(attached.as_nanos() as u64).saturating_add_signed(unix_offset_ns),
        duration_ns: duration.as_nanos() as u64,
        cpu: args.kinds.cpu,
        offcpu,
        gc_root: crate::record::gc::gc_frame(),
        thread_roots: args.thread_roots,
    };
    // Building the profile runs other code than recording did (see own_pages); and what
    // the sources freed goes back first.
    crate::record::memory::trim();
    crate::own_pages::release_code("recording");
    let symbolize_by = done_at + if interrupted { INTERRUPTED_SYMBOLIZE } else { UNHURRIED_SYMBOLIZE };
    log::info!("stop: asking for the profile after {:?}", done_at.elapsed());
    let mut c: Combined = ask(&q_tx, |reply| Query::Combined { opts: opts.clone(), symbolize_by: Some(symbolize_by), reply }, BUILD_DEADLINE)
        .ok_or_else(|| PipelineRecordError::Aggregator("no answer in time".into()))?
        .map_err(PipelineRecordError::Aggregator)?;
    drop(net_tx);
    // `--http` / `--providers`: the requests named and placed among the samples by the
    // aggregator (sessions left behind by a runtime that did not answer have none); those of
    // folded processes were, when they were folded.
    let http = if net_on {
        let (mut http, mut parts) = match c.folded.as_mut() {
            Some(f) => (std::mem::take(&mut f.http), std::mem::take(&mut f.net_pending)),
            None => (Vec::new(), Vec::new()),
        };
        parts.extend(net_rx.try_iter());
        let by = interrupted.then_some(symbolize_by);
        http.extend(ask(&q_tx, |reply| Query::Http { parts, clock: net_clock, symbolize_by: by, reply }, BUILD_DEADLINE).unwrap_or_default());
        http
    } else {
        Vec::new()
    };
    // Every record absorbed (saved); the streams' readers have ended or are left behind.
    // The kernel's symbols are the aggregator's (loaded while recording).
    let kernel = if saving.is_some() { ask(&q_tx, Query::Kernel, Duration::from_secs(2)).flatten() } else { None };
    drop(q_tx);
    crate::record::save_raw::end_at(opts.start_mono_ns.saturating_add(opts.duration_ns) as i64);
    let saved_raw = match saving.as_ref().and_then(|_| crate::record::save_raw::finish(kernel)) {
        Some(Ok(line)) => Some(line),
        Some(Err(e)) => {
            warnings.push(format!("--save-raw: {e}"));
            None
        }
        None => None,
    };
    drop(saving);
    if !host_finished {
        // Which sessions were still being stopped (all of them if the source had not begun).
        let mut late: Vec<u32> = stopping.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect();
        if late.is_empty() {
            late = c.processes.iter().map(|p| p.0).filter(|&p| alive(p) && !natives.contains(&p)).collect();
        }
        if late.is_empty() {
            // Stopped while still setting them up (a runtime that does not answer).
            late = args.pids.iter().copied().filter(|&p| alive(p) && crate::record::is_dotnet(p)).collect();
        }
        late.sort_unstable();
        let budget = if interrupted { crate::record::clr_session::STOP_DEADLINE } else { crate::record::clr_session::stop_deadline() };
        warnings.extend(late.into_iter().map(|p| sources::late_line(p, budget)));
    }
    // The aggregator ends once the sources have: not waited for after Ctrl-C (a source still
    // stopping a runtime that does not answer holds it).
    if !interrupted && ended_soon(&aggregator) {
        let _ = aggregator.join();
        // Its state (symbolizers, samples) is freed: back to the kernel before the outputs.
        crate::record::memory::trim();
    }
    if c.out_of_time > 0 {
        warnings.push(format!(
            "{} address lookups were left unnamed: symbolizing ran out of its time after the recording ended ({:.1} s)",
            c.out_of_time,
            symbolize_by.saturating_duration_since(done_at).as_secs_f64()
        ));
    }
    if c.left_out > 0 {
        warnings.push(format!(
            "{} records that arrived during the stop were left out: the recording ended within Ctrl-C's bound ({:.1} s)",
            c.left_out,
            symbolize_by.saturating_duration_since(done_at).as_secs_f64()
        ));
    }
    log::info!("stop: profile built after {:?}", done_at.elapsed());
    let host_report = report_rx.try_recv().ok();
    // A launched command: the processes found not to be .NET while it ran.
    let natives = match (&host_report, args.resume_after_attach) {
        (Some(h), true) => h.natives.clone(),
        _ => natives,
    };
    // Processes that are not .NET have no event report.
    c.reports.retain(|(pid, _)| !natives.contains(pid));
    if let Some(h) = &host_report {
        // GC threads' CPU from the kernel's accounting where it ran, as record has it (/proc
        // stays as the cross-check).
        for (pid, r) in &mut c.reports {
            if let Some(mut cpu) = crate::record::gc::gc_cpu(*pid, &h.thread_cpu, "bpf sched_switch") {
                cpu.user_thread_gc_ns = r.gc.cpu.as_ref().map_or(0, |c| c.user_thread_gc_ns);
                r.gc.cpu = Some(cpu);
            }
        }
    }
    // The folded processes' reports (GC CPU from /proc, read up to their exit) first.
    let mut folded = c.folded.take();
    if let Some(f) = folded.as_mut() {
        let mut reports = std::mem::take(&mut f.reports);
        reports.append(&mut c.reports);
        c.reports = reports;
    }
    // The event reports in the profile (`clrprobe report`, events.json), the GCs as markers.
    let profile = crate::record::attach_reports(c.profile, &c.reports);
    let profile = crate::record::gc::add_markers(profile, &c.reports, opts.start_mono_ns as i64).map_err(|e| PipelineRecordError::Aggregator(e.to_string()))?;
    let profile = crate::record::http::add_markers(profile, &http).map_err(|e| PipelineRecordError::Aggregator(e.to_string()))?;
    warnings.extend(warn_rx.try_iter());
    warnings.dedup();
    Ok(Recorded { profile, reports: c.reports, health: c.health, warnings, duration, time_to_attach: attached, stop_time: done_at.elapsed(), processes: c.processes, bpf, offcpu, host: host_report, natives, saved_raw, http, folded })
}

/// Slots of the channel from the sources to the aggregator. Each is 88 bytes and every one is
/// written when the channel is made (8,192 slots were 0.7 MB resident for the whole run); a
/// second's drain of a `-p` recording at 99 Hz is a few hundred records, and a full channel
/// holds the sender until the aggregator has absorbed some.
const RECORD_CHANNEL: usize = 1024;

/// Most distinct CPU stacks (per process and thread) a host-wide recording keeps; more are
/// counted as lost (`cpu-keys-full`).
const ALL_CPU_KEYS: usize = 1 << 19;

/// Symbolizing after a Ctrl-C ends this long after it (the rundowns run meanwhile).
const INTERRUPTED_SYMBOLIZE: Duration = Duration::from_millis(1200);
/// … and after an end by the duration or the targets' exit.
const UNHURRIED_SYMBOLIZE: Duration = Duration::from_secs(30);

/// Sends the query `make(reply)` and waits for the answer until `timeout`.
fn ask<T>(q: &Sender<Query>, make: impl FnOnce(tokio::sync::oneshot::Sender<T>) -> Query, timeout: Duration) -> Option<T> {
    let (reply, rx) = tokio::sync::oneshot::channel();
    q.send(make(reply)).ok()?;
    super::reply::wait(rx, Instant::now() + timeout)
}

/// Has the thread ended (the aggregator: its sources gone, no query left)? Waits a moment.
fn ended_soon(t: &std::thread::JoinHandle<()>) -> bool {
    let until = Instant::now() + Duration::from_secs(2);
    while !t.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    t.is_finished()
}

fn unix_now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// The end-of-run summary `record` prints (and `--json`), from a recording on the pipeline.
pub fn summary(r: &Recorded, args: &RecordArgs) -> crate::record::RecordSummary {
    use crate::record::{Limits, OwnMemory, RecordSummary, RecordedPid};
    let mut s = RecordSummary {
        sampler: args.kinds.cpu.then_some(if r.bpf { crate::sampler::SamplerKind::Bpf } else { crate::sampler::SamplerKind::PerfEvent }),
        time_to_attach: r.time_to_attach,
        duration: r.duration,
        offcpu: r.offcpu,
        events: r.reports.clone(),
        warnings: r.warnings.clone(),
        stop_time: r.stop_time,
        memory: OwnMemory::at_recording_end(),
        saved_raw: r.saved_raw.clone(),
        http: r.http.clone(),
        ..RecordSummary::default()
    };
    s.sampler_stats.lost_samples = r.health.lost.iter().filter(|(k, _)| k.starts_with("cpu")).map(|(_, n)| n).sum();
    if let Some(h) = &r.host {
        if args.kinds.cpu {
            s.sampler = h.sampler;
        }
        s.sampler_stats = h.stats;
        s.unwind = h.unwind.clone();
        s.thread_cpu = h.thread_cpu.clone();
        s.perf_maps = h.perf_maps.clone();
        s.eventpipe_providers = h.providers.clone();
        s.cxa_throw_probed = h.cxa.probed.clone();
        s.cxa_throws = h.cxa.throws.clone();
        s.uprobe_cost_ns = h.cxa.cost_ns;
    }
    // `--all`: the processes folded as they exited count as followed .NET processes.
    let no_fold = super::fold::Folded::default();
    let folded = r.folded.as_ref().unwrap_or(&no_fold);
    let followed: Vec<&(u32, String, u64, u64, u64)> = folded.processes.iter().chain(&r.processes).collect();
    // Named or launched, then the children followed, then the .NET processes found (--all).
    let name_of = |pid: u32| {
        followed.iter().find(|p| p.0 == pid).map(|p| p.1.clone()).filter(|n| !n.is_empty()).unwrap_or_else(|| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim_end().to_string()).unwrap_or_else(|_| pid.to_string())
        })
    };
    let dotnet = |pid: u32| followed.iter().any(|p| p.0 == pid) && !r.natives.contains(&pid);
    let children = r.host.as_ref().map(|h| h.children.clone()).unwrap_or_default();
    let mut pids: Vec<(u32, Option<u32>)> = args.pids.iter().map(|&p| (p, None)).collect();
    pids.extend(children.iter().map(|&(c, p)| (c, Some(p))));
    pids.extend(followed.iter().map(|p| (p.0, None)).filter(|(p, _)| !args.pids.contains(p) && !children.iter().any(|c| c.0 == *p)));
    pids.sort_unstable();
    pids.dedup_by_key(|p| p.0);
    s.recorded = pids.into_iter().map(|(pid, parent)| RecordedPid { pid, name: name_of(pid), parent, dotnet: dotnet(pid) }).collect();
    s.eventpipe = followed.iter().filter(|p| !r.natives.contains(&p.0)).map(|p| (p.0, p.2, p.3, p.4 as usize)).collect();
    s.folded_processes = folded.processes.len() as u64 + folded.others;
    s.reports_in_files = folded.reports_in_files;
    s.folded_file_pids = folded.file_pids.clone();
    s.folded_files_more = folded.more_files;
    // Beyond the first folded processes, their session's providers are in their files' stead.
    let gone: std::collections::HashSet<u32> = folded.processes.iter().map(|f| f.0).filter(|p| !folded.kept.contains(p)).collect();
    s.eventpipe_providers.retain(|(p, _)| !gone.contains(p));
    s.fill_from(&r.profile);
    s.limits = Limits::measure(&s);
    s
}
