//! `clrprobe record`: CPU samples and off-CPU time from the kernel, allocation / exception /
//! contention samples from EventPipe, names from perf maps, ReadyToRun images, ELF and
//! kallsyms — all into one profile with a sample type per kind.
mod clr_collect;
pub(crate) mod clr_session;
mod census;
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
mod retire;
mod split;
pub mod stop_priority;
mod summary;
mod targets;
mod timed_keys;
mod timeline;

pub use clr_collect::{ClrCollector, JitMethod};
pub use frames::FrameResolver;
pub use crate::output::{Format, Written, write_all};
pub use perfmap::{PerfMapGuard, PerfMapState, namespaced_pid, perf_map_path};
pub use split::{split_by_process, write_per_process};
pub use targets::EVENTPIPE_BUFFER_MB;
pub use limits::{Limits, limits_text};
pub use memory::OwnMemory;
pub use summary::{RecordSummary, RecordedPid, TopFrame, summary_text};
pub(crate) use timeline::container_id;
pub use clrprobe_pipeline::EventReport;

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use clrprobe_pipeline::{EventProfiles, Kinds};
use clrprobe_profile::{Period, Profile, ProfileBuilder, SampleType, kinds, units};

use crate::sampler::{self, RawSample, Sampler, SamplerChoice, SamplerError};

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

impl RecordKinds {
    fn events(&self) -> Kinds {
        Kinds { alloc: self.alloc, exceptions: self.exceptions, contention: self.contention }
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

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("process {0} does not exist (it may have exited); check the pid with `ps`")]
    NoProcess(u32),
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    #[error(transparent)]
    Profile(#[from] clrprobe_profile::ProfileError),
    #[error("--save-raw: {0}")]
    SaveRaw(clrprobe_profile::safe_file::SafeFileError),
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

type AggKey = (u32, u32, String, Arc<[u64]>, Arc<[u64]>);

/// Is the process still running? A zombie (exited, not yet reaped by its parent) is not.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()).is_some_and(|st| st != "Z" && st != "X"),
        Err(_) => false,
    }
}

/// Records until `stop` is set, the duration passes, or every target has exited.
pub fn run(
    args: &RecordArgs,
    stop: &AtomicBool,
    mut on_status: impl FnMut(&Status),
) -> Result<(Profile, RecordSummary), RecordError> {
    for &pid in &args.pids {
        if !alive(pid) {
            return Err(RecordError::NoProcess(pid));
        }
    }
    memory::cap_arenas();
    let started = Instant::now();
    let started_mono = gc::monotonic_ns();
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut summary = RecordSummary::default();
    let kinds = args.kinds;
    let _saving = match &args.save_raw {
        Some(dir) => Some(save_raw::start(dir, save_raw_meta(args, started_mono, start_unix_ns)).map_err(RecordError::SaveRaw)?),
        None => None,
    };

    // TARGET_PIDS key 0 means every process.
    let sampler_pids = if args.all { vec![0] } else { args.pids.clone() };
    if args.all {
        // Host-wide, only the .NET targets' copies are unwound (read every 100 ms): 4 MiB
        // (8 MiB resident, mapped twice) instead of 16 MiB.
        crate::bpf::set_ustack_ring_bytes(4 << 20);
    }
    // Samples first: the time to the first sample is what a user waits for.
    sampler::set_offcpu_copies(kinds.offcpu);
    let (mut sampler, fallback): (Option<Box<dyn Sampler>>, Option<String>) = if kinds.cpu {
        let (s, why) = sampler::start(args.sampler, &sampler_pids, args.freq)?;
        (Some(s), why)
    } else if kinds.offcpu || kinds.exceptions {
        // BPF without CPU sampling: for sched_switch and the __cxa_throw uprobe.
        match sampler::BpfSampler::start_with(&sampler_pids, None) {
            Ok(s) => (Some(Box::new(s)), None),
            Err(e) => (None, Some(format!("BPF unavailable ({e}): no off-CPU profile or __cxa_throw count"))),
        }
    } else {
        (None, None)
    };
    summary.sampler = if kinds.cpu { sampler.as_ref().map(|s| s.kind()) } else { None };
    if let Some(why) = fallback {
        summary.warnings.push(why);
    }
    summary.time_to_attach = started.elapsed();
    // Loading BPF ran code that nothing runs again (see own_pages).
    crate::own_pages::release_code("loading BPF");
    let mut bpf = sampler.as_mut().and_then(|s| s.as_bpf());
    if args.all
        && let Some(b) = bpf.as_deref_mut()
    {
        // Host-wide: stack copies of the .NET targets are unwound, the rest keep frame pointers.
        b.unwind_only(&args.pids);
    }
    if kinds.offcpu {
        match bpf.as_deref_mut() {
            Some(b) => match b.loaded().attach_sched_switch(true, true, args.offcpu_min.as_nanos() as u64) {
                Ok(()) => summary.offcpu = true,
                Err(e) => summary.warnings.push(format!("no off-CPU profile: {e}")),
            },
            None => summary.warnings.push("no off-CPU profile: it needs the BPF sampler".into()),
        }
        if args.net.http
            && let Some(b) = bpf.as_deref_mut()
            && let Err(e) = http::enable_offcpu_times(b.loaded())
        {
            summary.warnings.push(format!("no off-CPU times for HTTP requests: {e}"));
        }
    } else if let Some(b) = bpf.as_deref_mut() {
        // On-CPU time per thread only (GC thread CPU).
        if let Err(e) = b.loaded().attach_sched_switch(false, true, 0) {
            summary.warnings.push(format!("no per-thread on-CPU time: {e}"));
        }
    }
    // Sample times place CPU samples in workstation-GC windows. Under --all too (one map
    // entry per sample: 99 Hz × CPUs a second, far below the map's 65,536 keys per drain);
    // only the .NET targets' timed samples are kept.
    if let (true, Some(b)) = (kinds.cpu, bpf.as_deref_mut())
        && let Err(e) = gc::enable_sample_time(b.loaded())
    {
        summary.warnings.push(format!("no sample times (workstation GC not separated): {e}"));
    }

    // GC thread CPU pulled from /proc at the end of each drain period (no BPF needed); the
    // first read right after sched_switch starts counting, so both cover the same window.
    let mut proc_cpu = gc::ProcCpu::default();
    for &pid in &args.pids {
        proc_cpu.read(pid);
    }
    let mut resolver = FrameResolver::new();
    resolver.preload_kernel();
    resolver.light_for_others(args.all);
    let mut targets = targets::Targets::new(args);
    for &pid in &args.pids {
        resolver.add_process(pid);
    }
    targets.poll(args, &mut summary, bpf, &mut resolver);
    crate::own_pages::release_code("set-up");
    let mut drains = 0u32;
    if args.resume_after_attach {
        for &pid in &args.pids {
            // SAFETY: kill(2) with a pid and a signal number has no memory effects.
            unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        }
    }

    // The profile is built while recording: exited processes are folded into it (`--all`).
    let types = sample_types(args);
    let mut builder = ProfileBuilder::new(types.clone());
    let mut processes = timeline::ProcessLabels::default();
    let mut retired = retire::Retired::default();
    let fold = args.all && !args.net.http;
    let mut fold_files = args.fold_files.clone().filter(|_| fold).map(fold_files::FoldFiles::start);
    // The profile's clock starts when sampling starts (after attaching), as its duration does.
    let attach_ns = summary.time_to_attach.as_nanos() as u64;
    let origin_mono = started_mono.saturating_add(attach_ns as i64);
    let mut cpu: HashMap<AggKey, u64> = HashMap::new();
    let mut timed = gc::TimedSamples::default();
    let mut offcpu: HashMap<AggKey, u64> = HashMap::new();
    let mut thread_names: HashMap<(u32, u64), String> = HashMap::new();
    let mut last_drain = Instant::now();
    // Sessions of exited targets, ended by themselves.
    let mut finished = Vec::new();
    let mut jit_counts: HashMap<u32, usize> = HashMap::new();
    // Ctrl-C: everything after it is bounded to end within ~2 s. A recording that ended by its
    // duration or its targets' exit may take longer to name what it collected.
    let mut interrupted;
    // When the sessions must have stopped (set when the recording ends).
    let mut sessions_by = Instant::now();
    let mut stop_sent: std::collections::HashSet<u32> = std::collections::HashSet::new();
    let mut census = census::Census::default();
    let mut early_restores = None;
    let done_at = loop {
        // 100 ms between rounds; Ctrl-C is seen within 10 ms.
        let tick = Instant::now() + Duration::from_millis(100);
        while Instant::now() < tick && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let elapsed = started.elapsed();
        interrupted = stop.load(Ordering::SeqCst);
        let done = interrupted
            || args.duration.is_some_and(|d| elapsed >= d + summary.time_to_attach)
            || targets.all_exited();
        if done {
            log::info!("stop: CPU used so far {:.2} s", stop_priority::cpu_s());
            if let Some(nice) = stop_priority::stop_nice() {
                let raised = stop_priority::raise(nice);
                log::info!("stop: {raised} threads raised to nice {nice}");
            }
            // The perf maps go off before the sessions stop: a runtime's diagnostics server
            // serves one command at a time, and StopTracing holds it for the whole rundown
            // (DisablePerfMap sent after it timed out behind the rundowns of 20 busy
            // processes). The maps are read first; the symbolizer keeps each open, so what
            // the runtime appends until it switches off is still read after the files go.
            for &pid in &targets.pids {
                save_raw::snapshot(pid);
                resolver.refresh(pid);
            }
            // The runtimes' rundowns run while the last samples are read and named.
            sessions_by = Instant::now() + clr_session::stop_deadline();
            early_restores = Some(restore_then_stop(std::mem::take(&mut targets.guards), &targets.sessions, sessions_by));
            stop_sent = targets.sessions.iter().map(|s| s.pid()).collect();
        }
        // Stack copies arrive through a ring buffer: read it every 100 ms.
        if let Some(b) = sampler.as_mut().and_then(|s| s.as_bpf())
            && let Err(e) = b.poll_copies()
        {
            summary.warnings.push(format!("reading stack copies: {e}"));
        } else if let Some(s) = sampler.as_mut() {
            s.poll();
        }
        let done_at = Instant::now();
        if !done && targets.poll_due() {
            let bpf = sampler.as_mut().and_then(|s| s.as_bpf());
            targets.poll(args, &mut summary, bpf, &mut resolver);
            // Events past a planned end make no samples, however late the loop sees it.
            if let Some(d) = args.duration {
                targets.end_samples_at(started_mono.saturating_add((d + summary.time_to_attach).as_nanos() as i64));
            }
        }
        if done || last_drain.elapsed() >= Duration::from_secs(1) {
            last_drain = Instant::now();
            // The first drains load new code (unwind tables, libraries' symbols): what ran
            // since set-up is given back before and after them (see own_pages).
            drains += 1;
            if drains <= 2 && !done {
                crate::own_pages::release_code("recording");
            }
            // Symbolizing is bounded per drain (Ctrl-C is seen within ~0.6 s); what is left
            // is named in a later drain or at the end.
            resolver.set_deadline(Some(last_drain + if done && interrupted { STOP_SYMBOLIZE } else if done { UNHURRIED_SYMBOLIZE } else { DRAIN_SYMBOLIZE }));
            resolver.work_backlog();
            // Read perf maps, /proc/PID/maps and thread names while the targets are alive.
            for &pid in &targets.pids {
                save_raw::snapshot(pid);
                resolver.refresh(pid);
                // One walk of /proc/PID/task: the stat files give CPU times and names.
                proc_cpu.read(pid);
                for (tid, name) in proc_cpu.thread_names(pid) {
                    if thread_names.get(&(pid, tid as u64)).is_none_or(|n| n != name) {
                        thread_names.insert((pid, tid as u64), name.to_string());
                    }
                }
            }
            if drains <= 2 && !done {
                crate::own_pages::release_code("naming");
            }
            if let Some(s) = sampler.as_mut() {
                // Samples stamped after the recording's end are not recorded (on a loaded
                // machine a drain can start late, and sampling goes on until the last one).
                // Only the last drain cuts at "now": an earlier one keeps what was stamped while
                // it ran (its CPU part can take a second under load, and what it cut off was
                // deleted from the maps: off-CPU intervals and timed samples were lost).
                let planned = args.duration.map_or(i64::MAX, |d| started_mono.saturating_add((d + summary.time_to_attach).as_nanos() as i64));
                let end = if done { gc::monotonic_ns().min(planned) } else { planned };
                let end = (end < i64::MAX).then_some(end.max(0) as u64);
                let mut into = DrainInto { cpu: &mut cpu, offcpu: &mut offcpu, resolver: &mut resolver, processes: &mut processes };
                drain(s.as_mut(), &mut into, &mut summary, &mut timed, &targets.pids, end);
            }
            save_raw::tick(&targets.pids);
            for s in &targets.sessions {
                let stacks = std::mem::take(&mut s.live.lock().unwrap_or_else(|e| e.into_inner()).new_stacks);
                for st in stacks {
                    resolver.note_addresses(s.pid(), &st, 0);
                }
            }
            let before = finished.len();
            targets.retire_exited(&mut finished);
            // Name the exited processes' code with their method events now, then free what
            // naming them needed (see FrameResolver::retire_exited).
            for (pid, o) in &mut finished[before..] {
                // Stacks that arrived after the last look at the live session: named now,
                // while the process's symbolizer is still held.
                for st in std::mem::take(&mut o.collector.new_stacks) {
                    resolver.note_addresses(*pid, &st, 0);
                }
                resolver.add_jit_methods(*pid, &o.collector.jit_methods);
                jit_counts.insert(*pid, o.collector.jit_methods.len());
                o.collector.jit_methods = Vec::new();
            }
            // Without `--all`, processes are few: their symbolizers are kept to the end, so
            // event stacks their sessions deliver after they exit are still named.
            let ready = if args.all { resolver.retire_exited(|p| !targets.settled(p)) } else { Vec::new() };
            if fold {
                let elapsed_ns = started.elapsed().saturating_sub(summary.time_to_attach).as_nanos() as u64;
                let mut live = retire::Live {
                    builder: &mut builder,
                    types: &types,
                    cpu: &mut cpu,
                    offcpu: &mut offcpu,
                    timed: &mut timed,
                    resolver: &mut resolver,
                    processes: &mut processes,
                    thread_names: &mut thread_names,
                    summary: &mut summary,
                    finished: &mut finished,
                    jit_counts: &mut jit_counts,
                    start_mono_ns: origin_mono,
                    thread_roots: args.thread_roots,
                    proc_cpu: &mut proc_cpu,
                    clock: retire::Clock {
                        period: args.kinds.cpu.then(|| cpu_period(args)),
                        start_unix_ns: start_unix_ns.saturating_add(attach_ns),
                        elapsed_ns,
                        period_ns: 1_000_000_000 / args.freq.max(1),
                    },
                    files: fold_files.as_mut(),
                };
                let bpf = sampler.as_mut().and_then(|s| s.as_bpf());
                if let Err(e) = retired.fold(ready, &mut live, &mut targets, bpf) {
                    summary.warnings.push(format!("folding exited processes into the profile: {e}"));
                }
            }
            if let Some(b) = sampler.as_mut().and_then(|s| s.as_bpf()) {
                for pid in b.loaded().uprobed_pids().into_iter().filter(|&p| !alive(p)) {
                    b.loaded().detach_uprobes(pid);
                }
            }
            memory::trim();
            if drains <= 2 && !done {
                crate::own_pages::release_code("a drain");
            }
            census.log(&census::Parts {
                cpu: &cpu,
                offcpu: &offcpu,
                timed: &timed,
                builder: &builder,
                resolver: &resolver,
                thread_names: thread_names.len(),
                summary: &summary,
                targets: &targets.pids,
            });
            on_status(&Status {
                elapsed,
                samples: cpu.values().sum(),
                lost: sampler.as_ref().map(|s| s.stats().lost_samples).unwrap_or(0),
                symbolized: resolver.named_share(),
            });
        }
        if done {
            break done_at;
        }
    };
    summary.duration = started.elapsed().saturating_sub(summary.time_to_attach).min(args.duration.unwrap_or(Duration::MAX));
    // Runtime events after the recording's end (they go on until the sessions stop) make no samples.
    let end_mono = started_mono.saturating_add((summary.duration + summary.time_to_attach).as_nanos() as i64);
    targets.end_samples_at(end_mono);
    save_raw::end_at(end_mono);
    summary.memory = OwnMemory::at_recording_end();
    // Building and writing the outputs runs other code than recording did.
    crate::own_pages::release_code("recording");
    // The last /proc read at the moment the kernel's per-thread times are read.
    for &pid in &targets.pids {
        proc_cpu.read(pid);
    }
    if let Some(s) = sampler.as_mut() {
        summary.sampler_stats = s.stats();
        if let Some(b) = s.as_bpf() {
            summary.thread_cpu = b.loaded().thread_cpu().unwrap_or_default();
            summary.cxa_throws = b.loaded().cxa_throws().unwrap_or_default().into_iter().collect();
        }
        summary.unwind = s.unwind_summary();
    }
    log::info!("stop: samples drained after {:?}", done_at.elapsed());
    drop(sampler);

    // Everything below is bounded: set-ups in flight, the sessions' stop (StopTracing, rundown)
    // and the perf maps' switch-off run at once, and a runtime that does not answer is given up on.
    let stopping = done_at;
    log::info!("stop: final drain done after {:?}", stopping.elapsed());
    targets.finish_attaching(&mut summary, &mut resolver, stopping + Duration::from_millis(300));
    // Maps switched on by set-ups that ended after the others went off.
    let restores = restore_all(std::mem::take(&mut targets.guards));
    log::info!("stop: set-ups collected after {:?}", stopping.elapsed());
    let mut outcomes = finished;
    // Sessions set up after StopTracing was sent to the others get their own full time,
    // unless the recording was interrupted (Ctrl-C: everything ends within 2 s).
    let late_setups = targets.sessions.iter().any(|s| !stop_sent.contains(&s.pid()));
    let by = if late_setups && !interrupted { Instant::now() + clr_session::stop_deadline() } else { sessions_by };
    // While the runtimes finish their rundowns, the addresses left are named.
    resolver.set_deadline(Some(by));
    let sessions = std::mem::take(&mut targets.sessions);
    outcomes.extend(clr_session::finish_all_while(sessions, by, || {
        if resolver.has_backlog() {
            resolver.work_backlog();
        }
    }));
    let mut event_profiles = Vec::new();
    let mut net_parts = Vec::new();
    log::info!("stop: {} sessions stopped after {:?}", outcomes.len(), stopping.elapsed());
    for (pid, outcome) in outcomes {
        event_profiles.push(absorb_outcome(pid, outcome, &mut summary, &mut resolver, &thread_names, &jit_counts, Some(&mut net_parts)));
    }

    log::info!("stop: sessions done after {:?}", stopping.elapsed());
    // The perf maps have been going off since before the sessions stopped: they get
    // RESTORE_DEADLINE more from here, not from the end of building the profile.
    let restore_by = Instant::now() + RESTORE_DEADLINE;
    match save_raw::finish(resolver.image_cache().kernel().ok()) {
        Some(Ok(line)) => summary.saved_raw = Some(line),
        Some(Err(e)) => summary.warnings.push(format!("--save-raw: {e}")),
        None => {}
    }
    // CPU samples with their time stay one by one in the profile (timeline formats); the few
    // taken before times were switched on stay aggregated.
    let cpu_timed = !timed.overflowed && timed.total() > 0;
    let cpu_untimed = if cpu_timed { timeline::untimed(&cpu, timed.entries()) } else { HashMap::new() };
    let windows = gc::GcWindows::from_reports(&summary.events);
    let (gc_cpu, user_gc_samples) = timed.split_gc(&mut cpu, &windows);
    let (cpu, gc_cpu) = if cpu_timed { (cpu_untimed, HashMap::new()) } else { (cpu, gc_cpu) };
    let offcpu = if timed.offcpu.has_times() { timeline::untimed(&offcpu, timed.offcpu.intervals()) } else { offcpu };
    let period_ns = 1_000_000_000 / args.freq.max(1);
    let user_gc_ns: HashMap<u32, u64> =
        user_gc_samples.into_iter().chain(std::mem::take(&mut retired.user_gc_samples)).map(|(p, n)| (p, n * period_ns)).collect();
    if timed.overflowed {
        summary.warnings.push("too many timed CPU samples: later ones were not checked against GC windows".into());
    }
    resolver.out_of_time = 0;
    let build_symbolize = if interrupted { BUILD_SYMBOLIZE } else { UNHURRIED_SYMBOLIZE };
    resolver.set_deadline(Some(done_at + build_symbolize));
    let times = Times {
        cpu: cpu_timed.then_some((&timed, &windows)),
        offcpu: timed.offcpu.has_times().then_some(&timed.offcpu),
        start_mono_ns: origin_mono,
    };
    let parts = Parts { cpu: &cpu, offcpu: &offcpu, gc_cpu: &gc_cpu, events: &event_profiles };
    let profile = build_profile(args, builder, &mut processes, &parts, &mut resolver, start_unix_ns.saturating_add(attach_ns), summary.duration, &times)?;
    // Reports of folded processes were completed when they were folded.
    let unfolded = retired.completed_reports.min(summary.events.len());
    gc::complete_reports(&mut summary.events[unfolded..], &summary.thread_cpu, &proc_cpu, &user_gc_ns, summary.duration.as_nanos() as u64);
    let profile = attach_reports(profile, &summary.events)?;
    let profile = gc::add_markers(profile, &summary.events, origin_mono)?;
    let clock = http::Clock { started_mono_ns: started_mono, start_unix_ns, cpu_period_ms: period_ns as f64 / 1e6, offcpu: summary.offcpu };
    summary.http = http::finish(net_parts, &mut resolver, &timed, clock);
    let profile = http::add_markers(profile, &summary.http)?;
    log::info!("stop: profile built after {:?} (CPU used so far {:.2} s)", stopping.elapsed(), stop_priority::cpu_s());
    if let Some(r) = early_restores {
        summary.warnings.extend(r.wait(restore_by));
    }
    summary.warnings.extend(restores.wait(restore_by));
    summary.stop_time = stopping.elapsed();
    summary.recorded = recorded_pids(&targets);
    summary.folded_processes = retired.folded;
    if let Some(f) = fold_files {
        (summary.folded_files, summary.folded_file_pids, summary.folded_files_more) = f.finish(done_at + FOLD_FILES_DEADLINE);
    }
    summary.perf_map_names_corrected = resolver.perf_map_names_corrected();
    summary.warnings.extend(resolver.file_warnings());
    if resolver.out_of_time > 0 {
        summary.warnings.push(format!(
            "{} address lookups were left unnamed: symbolizing ran out of its time after the recording ended ({:.1} s)",
            resolver.out_of_time,
            build_symbolize.as_secs_f64()
        ));
    }
    summary.fill_from(&profile);
    summary.limits = Limits::measure(&summary);
    log::info!("stop: summary filled after {:?}", stopping.elapsed());
    Ok((profile, summary))
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

/// Symbolizing budget of one drain while recording.
const DRAIN_SYMBOLIZE: Duration = Duration::from_millis(500);
/// Symbolizing budget of the final drain after the recording ended.
const STOP_SYMBOLIZE: Duration = Duration::from_millis(300);
/// From the end of recording (Ctrl-C), until when building the profile may still symbolize.
const BUILD_SYMBOLIZE: Duration = Duration::from_millis(1300);
/// The same budgets when the recording ended by its duration or its targets' exit.
const UNHURRIED_SYMBOLIZE: Duration = Duration::from_secs(30);

/// From the end of recording, until when the files of folded processes may still be written.
const FOLD_FILES_DEADLINE: Duration = Duration::from_millis(1500);

/// How long switching perf maps off may still take once the sessions have stopped.
const RESTORE_DEADLINE: Duration = Duration::from_millis(300);

/// Perf maps being switched off, one thread each.
pub(crate) struct Restores {
    rx: std::sync::mpsc::Receiver<Option<String>>,
    n: usize,
}

/// Switches the perf maps of `guards` off at once, each on its own thread.
pub(crate) fn restore_all(guards: Vec<PerfMapGuard>) -> Restores {
    restore_then_stop(guards, &[], Instant::now())
}

/// Switches the perf maps of `guards` off and begins stopping `sessions` (StopTracing, to end
/// by `stop_by`), at once for every target, and for each target in that order on one helper
/// thread: a runtime's diagnostics server serves one command at a time and StopTracing holds
/// it for the whole rundown, so a DisablePerfMap sent after it waited out its deadline behind
/// the rundowns of 20 busy processes.
pub(crate) fn restore_then_stop(guards: Vec<PerfMapGuard>, sessions: &[clr_session::RuntimeSession], stop_by: Instant) -> Restores {
    let (tx, rx) = std::sync::mpsc::channel();
    let n = guards.len();
    let restore = |mut g: PerfMapGuard, t: std::sync::mpsc::Sender<Option<String>>| {
        move || {
            let pid = g.pid();
            let _ = t.send(g.restore().err().map(|e| format!("switching the perf map of {pid} off: {e}")));
        }
    };
    let mut guards = guards;
    for s in sessions {
        match guards.iter().position(|g| g.pid() == s.pid()) {
            Some(i) => s.begin_stop_after(stop_by, restore(guards.swap_remove(i), tx.clone())),
            None => s.begin_stop_after(stop_by, || {}),
        }
    }
    for g in guards {
        let name = format!("restore-{}", g.pid());
        if std::thread::Builder::new().name(name).spawn(restore(g, tx.clone())).is_err() {
            let _ = tx.send(Some("switching a perf map off: no thread".into()));
        }
    }
    Restores { rx, n }
}

impl Restores {
    /// Waits for every switch-off until `deadline`; returns the warnings.
    pub(crate) fn wait(self, deadline: Instant) -> Vec<String> {
        let mut warnings = Vec::new();
        for _ in 0..self.n {
            match self.rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(w) => warnings.extend(w),
                Err(_) => {
                    warnings.push("a perf map was not switched off in time: the guardian or the next clrprobe does it".into());
                    break;
                }
            }
        }
        warnings
    }
}

/// The processes recorded (named or launched, then the children followed), for the summary.
fn recorded_pids(targets: &targets::Targets) -> Vec<RecordedPid> {
    let mut pids: Vec<u32> = targets.retired.iter().chain(&targets.pids).copied().collect();
    pids.sort_unstable();
    pids.iter()
        .map(|&pid| RecordedPid { pid, name: process_name(pid), parent: targets.children.get(&pid).copied(), dotnet: targets.is_set_up(pid) })
        .collect()
}

/// Where a drain puts the samples it reads.
struct DrainInto<'a> {
    cpu: &'a mut HashMap<AggKey, u64>,
    offcpu: &'a mut HashMap<AggKey, u64>,
    resolver: &'a mut FrameResolver,
    processes: &'a mut timeline::ProcessLabels,
}

/// Moves the sampler's new samples into the aggregates (those timed after `end`, monotonic
/// ns, are left out).
fn drain(
    s: &mut dyn Sampler,
    into: &mut DrainInto<'_>,
    summary: &mut RecordSummary,
    timed: &mut gc::TimedSamples,
    targets: &[u32],
    end: Option<u64>,
) {
    let before_end = |s: &RawSample| end.is_none_or(|e| s.time_ns == 0 || s.time_ns <= e);
    match s.drain() {
        Ok(mut batch) => {
            batch.retain(before_end);
            save_raw::samples(false, &batch);
            batch.iter().filter(|s| targets.contains(&s.pid)).for_each(|s| timed.note(s));
            absorb(into.cpu, batch, into.resolver, into.processes)
        }
        Err(e) => summary.warnings.push(format!("reading samples: {e}")),
    }
    if summary.offcpu
        && let Some(b) = s.as_bpf() {
            match b.drain_offcpu() {
                Ok(mut batch) => {
                    batch.retain(before_end);
                    save_raw::samples(true, &batch);
                    // Host-wide: one entry per interval of every thread on the host would grow
                    // without bound; only the targets' intervals are kept with their times.
                    batch.iter().filter(|s| targets.contains(&s.pid)).for_each(|s| timed.offcpu.note(s));
                    absorb(into.offcpu, batch, into.resolver, into.processes)
                }
                Err(e) => summary.warnings.push(format!("reading off-CPU time: {e}")),
            }
        }
}

fn absorb(agg: &mut HashMap<AggKey, u64>, batch: Vec<RawSample>, resolver: &mut FrameResolver, processes: &mut timeline::ProcessLabels) {
    let me = std::process::id();
    for mut s in batch {
        if s.pid == me {
            own_thread(&mut s);
        }
        // The process's name is read while it runs (a folded process's would be its pid).
        processes.seen(s.pid, s.tid, &s.comm);
        resolver.ensure_process(s.pid);
        resolver.note_addresses(s.pid, &s.user, s.count);
        resolver.note_kernel(&s.kernel);
        *agg.entry((s.pid, s.tid, s.comm, s.kernel, s.user)).or_insert(0) += s.count;
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

/// The timed samples to use instead of the aggregates, per kind (None: aggregated).
struct Times<'a> {
    cpu: Option<(&'a gc::TimedSamples, &'a gc::GcWindows)>,
    offcpu: Option<&'a timeline::OffCpuTimes>,
    start_mono_ns: i64,
}

/// The sample types of a recording, in column order.
fn sample_types(args: &RecordArgs) -> Vec<SampleType> {
    let mut types = Vec::new();
    if args.kinds.cpu {
        types.push(SampleType::new(kinds::CPU, units::SAMPLES));
    }
    types.extend(args.kinds.events().sample_types());
    if args.kinds.offcpu {
        types.push(SampleType::new(kinds::OFF_CPU, units::NANOSECONDS));
    }
    types
}

/// Frames of a sample's stacks: the resolver, or (folded processes) [`retire::Unplaced`].
trait StackSource {
    fn stack(&mut self, pid: u32, kernel: &[u64], user: &[u64]) -> Vec<clrprobe_profile::Frame>;
}

impl StackSource for FrameResolver {
    fn stack(&mut self, pid: u32, kernel: &[u64], user: &[u64]) -> Vec<clrprobe_profile::Frame> {
        FrameResolver::stack(self, pid, kernel, user)
    }
}

/// What is left to add at the end: aggregates and the sessions' event samples.
struct Parts<'a> {
    cpu: &'a HashMap<AggKey, u64>,
    offcpu: &'a HashMap<AggKey, u64>,
    /// Samples of user threads inside their GC pauses.
    gc_cpu: &'a HashMap<AggKey, u64>,
    events: &'a [EventProfiles],
}

/// Finishes the profile `b` (which may hold folded processes already).
#[allow(clippy::too_many_arguments)]
fn build_profile(
    args: &RecordArgs,
    mut b: ProfileBuilder,
    processes: &mut timeline::ProcessLabels,
    parts: &Parts<'_>,
    resolver: &mut FrameResolver,
    start_unix_ns: u64,
    duration: Duration,
    times: &Times<'_>,
) -> Result<Profile, RecordError> {
    let t0 = Instant::now();
    let types = b.sample_types().to_vec();
    if args.kinds.cpu {
        b.set_period(cpu_period(args));
    }
    b.set_start_time_ns(start_unix_ns);
    b.set_duration_ns(duration.as_nanos() as u64);
    let column = |k: &str| types.iter().position(|t| t.kind == k);
    if let (Some(col), Some((timed, windows))) = (column(kinds::CPU), times.cpu) {
        let view = timed.entries();
        let samples = view.iter().map(|(key, t, n)| timeline::TimedInput {
            key,
            time_mono_ns: *t,
            value: *n as i64,
            column: col,
            in_gc: windows.contains(key.0, key.1, *t),
        });
        timeline::add_timed(&mut b, types.len(), samples, resolver, processes, times.start_mono_ns)?;
    }
    if let (Some(col), Some(off)) = (column(kinds::OFF_CPU), times.offcpu) {
        let view = off.intervals();
        let samples = view.iter().map(|(key, t, ns)| timeline::TimedInput {
            key,
            time_mono_ns: *t,
            value: *ns as i64,
            column: col,
            in_gc: false,
        });
        timeline::add_timed(&mut b, types.len(), samples, resolver, processes, times.start_mono_ns)?;
    }
    log::info!("build: timed samples added in {:?}", t0.elapsed());
    // GC work: samples of GC threads, and of user threads inside their GC pauses (`gc_cpu`).
    let (cpu_col, offcpu_col) = (column(kinds::CPU), column(kinds::OFF_CPU));
    for (agg, col, gc_work) in [(parts.cpu, cpu_col, false), (parts.gc_cpu, cpu_col, true), (parts.offcpu, offcpu_col, false)] {
        let Some(col) = col else { continue };
        let is_offcpu = Some(col) == offcpu_col;
        add_aggregates(&mut b, types.len(), col, is_offcpu, agg.iter().map(|(k, n)| (k, *n, gc_work)), resolver, processes, args.thread_roots)?;
    }
    log::info!("build: aggregates added after {:?}", t0.elapsed());
    // Allocation, exception and contention samples at their times too (when every one kept it).
    for e in parts.events {
        e.write_into_at(&mut b, resolver, Some(times.start_mono_ns))?;
    }
    log::info!("build: event samples added after {:?}", t0.elapsed());
    Ok(b.build())
}

/// The CPU sampling period.
fn cpu_period(args: &RecordArgs) -> Period {
    Period { sample_type: SampleType::new(kinds::CPU, units::NANOSECONDS), value: (1_000_000_000 / args.freq.max(1)) as i64 }
}

/// Adds aggregated samples `(key, count, GC work)` to column `col`. The threads of a process
/// share their stacks (thread pools, waits): each distinct stack is named and interned once,
/// each thread's labels once (most of the time building a host-wide profile took).
#[allow(clippy::too_many_arguments)]
fn add_aggregates<'a>(
    b: &mut ProfileBuilder,
    width: usize,
    col: usize,
    is_offcpu: bool,
    samples: impl Iterator<Item = (&'a AggKey, u64, bool)>,
    resolver: &mut dyn StackSource,
    processes: &mut timeline::ProcessLabels,
    thread_roots: bool,
) -> Result<(), clrprobe_profile::ProfileError> {
    // (pid, kernel, user, GC work) → (frame ids, wait kind); thread roots are added per thread.
    type Named = (Vec<clrprobe_profile::FrameId>, Option<&'static str>);
    type Key<'k> = (u32, &'k [u64], &'k [u64], bool);
    let mut stacks: clrprobe_profile::hash::FastMap<Key<'a>, Named> = Default::default();
    let mut labels_of: clrprobe_profile::hash::FastMap<(u32, u32, &'a str, Option<&'static str>), clrprobe_profile::LabelSetId> = Default::default();
    let mut values = vec![0i64; width];
    let mut ids = Vec::new();
    for ((pid, tid, comm, kernel, user), count, gc_work) in samples {
        let in_gc = gc_work || gc::is_gc_thread(comm);
        let key = (*pid, &kernel[..], &user[..], in_gc);
        let (fids, wait) = match stacks.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let frames = gc::under_gc_root(in_gc, resolver.stack(*pid, kernel, user));
                let wait = is_offcpu.then(|| {
                    crate::unwind::wait::kind(frames.iter().filter(|f| f.kind == clrprobe_profile::FrameKind::Kernel).map(|f| f.name.as_ref()))
                });
                let mut fids = Vec::with_capacity(frames.len());
                for f in frames {
                    fids.push(b.intern_frame(f)?);
                }
                v.insert((fids, wait))
            }
        };
        ids.clear();
        if thread_roots {
            let root = clrprobe_profile::Frame::new(format!("thread {comm} ({tid})"), String::new(), clrprobe_profile::FrameKind::Synthetic);
            ids.push(b.intern_frame(root)?);
        }
        ids.extend_from_slice(fids);
        let stack = b.intern_stack(&ids)?;
        let labels = match labels_of.get(&(*pid, *tid, comm.as_ref(), *wait)) {
            Some(&id) => id,
            None => {
                let mut l = processes.labels(*pid, *tid, comm);
                if let Some(w) = wait {
                    l = l.with_string("wait", *w);
                }
                let id = b.intern_labels(l)?;
                labels_of.insert((*pid, *tid, comm.as_ref(), *wait), id);
                id
            }
        };
        values.iter_mut().for_each(|v| *v = 0);
        values[col] = count as i64;
        b.add_sample(stack, &values, labels)?;
    }
    Ok(())
}

/// Takes what an ended EventPipe session collected: warnings, counts and the event report go
/// to the summary, JIT method ranges to the resolver, HTTP requests to `net_parts` (None:
/// dropped); returns the event samples.
fn absorb_outcome(
    pid: u32,
    mut outcome: clr_session::SessionOutcome,
    summary: &mut RecordSummary,
    resolver: &mut FrameResolver,
    thread_names: &HashMap<(u32, u64), String>,
    jit_counts: &HashMap<u32, usize>,
    net_parts: Option<&mut Vec<http::NetPart>>,
) -> EventProfiles {
    if let (Some(net), Some(parts)) = (outcome.collector.net.take(), net_parts) {
        parts.push(http::NetPart { pid, outcome: net.finish(), origin_mono_ns: outcome.collector.profiles.clock.map(|c| c.0) });
    }
    if let Some(e) = &outcome.error {
        summary.warnings.push(e.to_string());
    } else if outcome.status != clrprobe_eventpipe::nettrace::StreamStatus::Complete && alive(pid) {
        summary.warnings.push(format!("the EventPipe stream of {pid} ended before its end marker"));
    }
    let jit_named = jit_counts.get(&pid).copied().unwrap_or(outcome.collector.jit_methods.len());
    summary.eventpipe.push((pid, outcome.stats.events, outcome.stats.dropped_events, jit_named));
    resolver.add_jit_methods(pid, &outcome.collector.jit_methods);
    let mut profiles = outcome.collector.profiles;
    for ((p, tid), name) in thread_names {
        if *p == pid {
            profiles.threads.set_name(pid, *tid, name.clone());
        }
    }
    summary.events.push((pid, profiles.report()));
    if !profiles.has_times() && !profiles.pending().is_empty() {
        summary.warnings.push(format!("the event samples of {pid} are aggregated without their times (more than {} events)", clrprobe_pipeline::MAX_TIMED_EVENTS));
    }
    profiles
}


use crate::report::REPORT_COMMENT;

/// Keeps each process's event report (exception counts, wait percentiles, allocation totals)
/// in the profile, so `clrprobe report` can print it from the pprof file alone.
pub fn attach_reports(profile: Profile, reports: &[(u32, clrprobe_pipeline::EventReport)]) -> Result<Profile, RecordError> {
    if reports.is_empty() {
        return Ok(profile);
    }
    // Markers and comments need no interning: added to the built profile, not copied.
    let mut b = profile;
    for (pid, r) in reports {
        let json = serde_json::to_string(r).unwrap_or_default();
        b.add_comment(format!("{REPORT_COMMENT}{pid} {json}"));
    }
    Ok(b)
}

fn process_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim_end().to_string()).unwrap_or_else(|_| pid.to_string())
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
