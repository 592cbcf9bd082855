//! The host source: the CPU sampler and off-CPU drains, discovery of .NET processes (their
//! perf map switched on, an EventPipe session each), their CPU times from /proc, and the
//! clock ticks that roll the aggregator's windows. Runs on its own thread until stopped.
use std::{
    collections::{HashMap, HashSet},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use clrprobe_pipeline::{
    Kinds,
    stream::{ProcessInfo, Record},
};
use crossbeam_channel::Sender;

use super::{EventPipeSource, container_id, monotonic_ns, proc_stat::cpu_records};
use crate::{
    record::{PerfMapGuard, alive, is_dotnet, recipe},
    sampler::{self, Sampler, SamplerChoice, SamplerError},
};

/// What the host source samples and follows.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Sample every process's CPU and follow every .NET process found (new ones too).
    pub all: bool,
    /// With `all`: sample only the .NET processes' CPU.
    pub dotnet_only: bool,
    /// Processes to follow (without `all`).
    pub pids: Vec<u32>,
    pub freq: u64,
    pub sampler: SamplerChoice,
    /// Off-CPU intervals (sched_switch) of at least `offcpu_min`.
    pub offcpu: bool,
    pub offcpu_min: Duration,
    /// On-CPU time per thread from sched_switch (with or without `offcpu`), as `record`
    /// counts it.
    pub oncpu: bool,
    /// Event kinds asked of each runtime (allocations, exceptions, contention).
    pub kinds: Kinds,
    pub eventpipe: bool,
    pub perf_map: bool,
    /// Follow only .NET processes whose parent is this process (a supervisor, a shell).
    pub parent: Option<u32>,
    /// Without `all`: the descendants of `pids` too (sampled from when they are found, .NET
    /// ones set up), as `record -p` follows them.
    pub children: bool,
    /// Copy user stacks for DWARF unwinding (else frame pointers only).
    pub stack_copies: bool,
    /// The runtime's System.Runtime EventCounters every this many seconds (thread pool).
    pub counters_interval_s: Option<u32>,
    /// The runtime's rundown at the end of each session (names of code that ran before it
    /// started, for the profiles served after; `top` needs none).
    pub rundown: bool,
    /// Allocation events in slices of time (a second, allocation-only session per process
    /// open for `slice` of every `period`); None: all of them, in the process's session.
    pub alloc_slices: Option<AllocDuty>,
    /// Where problems met while following processes go, one line each (None: the log).
    pub warnings: Option<Sender<String>>,
    /// `record`'s ways (None: the agent's and `top`'s).
    pub recording: Option<RecordingMode>,
}

/// How `record` follows processes, where it differs from the agent: new processes looked for
/// every 250 ms (a short recording misses less of a new process), `parent` any ancestor (not
/// only the direct parent), and in launch mode the perf maps are on by the environment.
#[derive(Debug, Clone, Default)]
pub struct RecordingMode {
    /// The named processes were launched by clrprobe (`record -- CMD`): their tree has its
    /// perf maps on through the environment.
    pub launched: bool,
    /// Where the source's account goes when it has stopped (for `record`'s summary).
    pub report: Option<Sender<HostReport>>,
    /// The processes whose sessions are being stopped and have not ended yet (a recording
    /// that gives up waiting says which).
    pub stopping: std::sync::Arc<std::sync::Mutex<HashSet<u32>>>,
    /// No CPU samples (BPF for off-CPU time and per-thread CPU time only).
    pub no_cpu: bool,
    /// Named processes that are not .NET: followed (samples at their times, off-CPU time)
    /// without a set-up.
    pub natives: Vec<u32>,
    /// Count each .NET process's `__cxa_throw` calls with a uprobe (`--cxa-throw`, or
    /// exceptions without EventPipe).
    pub cxa: bool,
    /// `--http` / `--providers`: their providers in each session, and the sessions'
    /// requests and summaries sent to `net_parts` when their streams end.
    pub net: crate::record::http::NetArgs,
    pub net_parts: Option<Sender<crate::record::http::NetPart>>,
}

/// What the host source did, for `record`'s summary: sent once it has stopped.
#[derive(Debug, Default)]
pub struct HostReport {
    pub sampler: Option<crate::sampler::SamplerKind>,
    pub stats: crate::sampler::SamplerStats,
    pub unwind: Option<crate::unwind::UnwindSummary>,
    /// On-CPU time per thread of the followed processes (BPF sched_switch).
    pub thread_cpu: Vec<crate::bpf::ThreadCpuTime>,
    /// Each followed process's perf map, as its set-up found or left it.
    pub perf_maps: Vec<(u32, crate::record::PerfMapState)>,
    /// Each EventPipe session's providers (`trace --providers` form).
    pub providers: Vec<(u32, String)>,
    /// Descendants of the named processes followed: (child, parent).
    pub children: Vec<(u32, u32)>,
    /// The `__cxa_throw` uprobes and their counts.
    pub cxa: super::CxaReport,
    /// Named processes followed as not .NET (a launched program that is not `dotnet`).
    pub natives: Vec<u32>,
}

/// Reports a problem where `cfg` says.
fn warn(cfg: &HostConfig, line: String) {
    match &cfg.warnings {
        Some(tx) => {
            let _ = tx.send(line);
        }
        None => log::warn!("{line}"),
    }
}

/// The duty cycle of allocation events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocDuty {
    pub slice: Duration,
    pub period: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    #[error("starting the host source thread: {0}")]
    Thread(std::io::Error),
}

/// Starts the host source on its own thread (the sampler's BPF handles stay on the thread
/// that loaded them), running until `stop` is set; returns once it is loaded, with why the
/// BPF sampler was not used, if it was not, and whether off-CPU time is recorded (the
/// sched_switch program attached: not with the perf_event sampler or when attaching failed).
pub fn spawn(cfg: HostConfig, tx: Sender<Record>, stop: &'static AtomicBool) -> Result<(std::thread::JoinHandle<()>, Option<String>, bool), SourceError> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let host = std::thread::Builder::new()
        .name("host-source".into())
        .spawn(move || match HostSource::start(cfg, tx) {
            Ok(source) => {
                let _ = ready_tx.send(Ok((source.fallback.clone(), source.offcpu_on)));
                source.run(stop);
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
            }
        })
        .map_err(SourceError::Thread)?;
    match ready_rx.recv() {
        Ok(Ok((fallback, offcpu_on))) => Ok((host, fallback, offcpu_on)),
        Ok(Err(e)) => {
            let _ = host.join();
            Err(e)
        }
        Err(_) => Err(SourceError::Thread(std::io::Error::other("the host source thread ended"))),
    }
}

/// A followed .NET process.
struct Followed {
    guard: Option<PerfMapGuard>,
    session: Option<EventPipeSource>,
    /// Its exceptions' own session ([`recipe::exceptions_session`]; None: none, or they come
    /// in `session`).
    exceptions: Option<EventPipeSource>,
    /// Its allocation slices (None: no allocation events, or all in `session`).
    alloc: Option<Slices>,
}

/// A process's allocation-only session, opened and closed on a schedule.
struct Slices {
    next_open: Instant,
    /// The session and when it opened (host monotonic ns).
    open: Option<(EventPipeSource, u64)>,
}

pub struct HostSource {
    cfg: HostConfig,
    tx: Sender<Record>,
    sampler: Box<dyn Sampler>,
    /// Why the BPF sampler was not used, if it was not.
    pub fallback: Option<String>,
    /// Problems met while following processes (one line each), for the log.
    pub offcpu_on: bool,
    followed: HashMap<u32, Followed>,
    /// Pids seen and set up (or given up on), so they are not set up twice.
    done: HashSet<u32>,
    waiting: recipe::SocketWait,
    scanner: crate::discover::Scanner,
    lost_sent: u64,
    /// Descendants of the named processes found so far (`children`).
    child_scan: crate::lifecycle::children::ChildScan,
    children: HashSet<u32>,
    /// Set-ups so far, for a recording's [`HostReport`].
    perf_maps: Vec<(u32, crate::record::PerfMapState)>,
    providers: Vec<(u32, String)>,
    child_parents: Vec<(u32, u32)>,
    /// A recording's `__cxa_throw` uprobes.
    cxa: super::cxa::CxaProbes,
    /// Named processes followed as not .NET (set up after all if they load the runtime).
    natives_followed: HashSet<u32>,
    /// A recording's set-ups, off this thread (None: the agent's and `top`'s, run here).
    setups: Option<SetUpWorker>,
}

/// Discovery period: an agent is not in a hurry, and each scan reads /proc/PID/maps of
/// every young process on the host (`record --all` scans every 250 ms).
const POLL: Duration = Duration::from_secs(1);
/// How long the rest of an exited process's EventPipe stream may take to read at the end.
const EXITED_STREAM: Duration = Duration::from_secs(5);
/// Discovery period of a recording.
const RECORDING_POLL: Duration = Duration::from_millis(250);
const DRAIN: Duration = Duration::from_secs(1);
/// The loop's longest sleep: stack copies wait this long to be unwound (the ring's own thread
/// keeps the ring from filling meanwhile). At 50 ms its 20 wake-ups a second (each looking at
/// the perf maps and the ring: ~50 µs of CPU at load 7) were ~20 % of the host source's CPU
/// with three busy processes.
const NAP: Duration = Duration::from_millis(100);
/// … with allocation slices (the agent's), whose opening and closing it times.
const SLICES_NAP: Duration = Duration::from_millis(50);
/// Every process's maps are read again this often (runtimes loaded late by native hosts);
/// new processes are checked at every poll while young.
const FULL_RESCAN: Duration = Duration::from_secs(30);

impl HostSource {
    /// Loads the sampler (and the off-CPU program) and returns the source, not yet running.
    pub fn start(cfg: HostConfig, tx: Sender<Record>) -> Result<Self, SourceError> {
        let targets = if cfg.all && !cfg.dotnet_only { vec![0] } else { cfg.pids.clone() };
        let (mut sampler, fallback) = if cfg.recording.as_ref().is_some_and(|r| r.no_cpu) {
            // BPF without CPU sampling for sched_switch (off-CPU time, per-thread CPU time)
            // and the __cxa_throw uprobe; event kinds only: no BPF.
            super::no_cpu::sampler(&targets, cfg.offcpu || cfg.kinds.exceptions)
        } else {
            sampler::start_with_copies(cfg.sampler, &targets, cfg.freq, cfg.stack_copies)?
        };
        let mut offcpu_on = false;
        if let Some(b) = sampler.as_bpf()
            && cfg.all
            && !cfg.dotnet_only
            && cfg.recording.is_some()
        {
            // `record --all`: stack copies of the .NET processes are unwound (each added as it
            // is found), every other process keeps its frame-pointer stacks.
            b.unwind_only(&cfg.pids);
        }
        if let Some(b) = sampler.as_bpf() {
            // Per-sample times: CPU samples inside a thread's own GC pause are GC work.
            if let Err(e) = crate::record::gc::enable_sample_time(b.loaded()) {
                warn(&cfg, format!("no sample times (GC on user threads not measured): {e}"));
            }
            if cfg.offcpu {
                match b.loaded().attach_sched_switch(true, cfg.oncpu, cfg.offcpu_min.as_nanos() as u64) {
                    Ok(()) => offcpu_on = true,
                    Err(e) => warn(&cfg, format!("no off-CPU profile: {e}")),
                }
                // `record --http`: off-CPU intervals with their start, placed in requests.
                if cfg.recording.as_ref().is_some_and(|r| r.net.http)
                    && let Err(e) = crate::record::http::enable_offcpu_times(b.loaded())
                {
                    warn(&cfg, format!("no off-CPU times for HTTP requests: {e}"));
                }
            } else if cfg.oncpu
                && let Err(e) = b.loaded().attach_sched_switch(false, true, 0)
            {
                // On-CPU time per thread only (GC thread CPU), as record counts it.
                warn(&cfg, format!("no per-thread on-CPU time: {e}"));
            }
        }
        // Loading the object parsed the kernel's BTF: give that memory back.
        // SAFETY: malloc_trim only walks the allocator's own free lists.
        unsafe { libc::malloc_trim(0) };
        Ok(Self {
            cfg,
            tx,
            sampler,
            fallback,
            offcpu_on,
            followed: HashMap::new(),
            done: HashSet::new(),
            waiting: recipe::SocketWait::default(),
            scanner: crate::discover::Scanner::new().with_full_rescan(FULL_RESCAN),
            lost_sent: 0,
            child_scan: Default::default(),
            children: HashSet::new(),
            perf_maps: Vec::new(),
            providers: Vec::new(),
            child_parents: Vec::new(),
            cxa: Default::default(),
            natives_followed: HashSet::new(),
            setups: None,
        })
    }

    /// Runs until `stop` is set; then stops every session and restores every perf map.
    pub fn run(mut self, stop: &'static AtomicBool) {
        let poll = if self.cfg.recording.is_some() { RECORDING_POLL } else { POLL };
        if self.cfg.recording.is_some() {
            match SetUpWorker::start(self.cfg.clone(), self.tx.clone(), stop) {
                Ok(w) => self.setups = Some(w),
                Err(e) => log::warn!("no set-up thread ({e}): processes are set up on the host source's"),
            }
        }
        let mut last_poll = Instant::now() - poll;
        let mut last_drain = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            self.collect_setups();
            if last_poll.elapsed() >= poll {
                last_poll = Instant::now();
                self.discover(stop);
                log::debug!("discovery took {:?}", last_poll.elapsed());
            }
            // A stop seen during discovery goes to the stop at once (the drain and the stack
            // copies of 20 processes just set up took 6 s at load 45).
            if stop.load(Ordering::SeqCst) {
                break;
            }
            if last_drain.elapsed() >= DRAIN {
                last_drain = Instant::now();
                if self.drain().is_err() {
                    break; // the aggregator is gone
                }
                log::debug!("drain took {:?}", last_drain.elapsed());
            }
            if stop.load(Ordering::SeqCst) || self.slices().is_err() {
                break;
            }
            // Stack copies are unwound while the processes are as they were, and the ring
            // does not fill between drains.
            if self.cfg.stack_copies
                && let Some(b) = self.sampler.as_bpf()
                && let Err(e) = b.poll_copies()
            {
                warn(&self.cfg, format!("reading stack copies: {e}"));
            }
            // Until the next drain is due, at most a nap (discovery waits for the next wake-up).
            let nap = if self.cfg.alloc_slices.is_some() { SLICES_NAP } else { NAP };
            std::thread::sleep(DRAIN.saturating_sub(last_drain.elapsed()).clamp(Duration::from_millis(1), nap));
        }
        let left = Instant::now();
        if self.cfg.recording.is_some() {
            // A recording's samples up to its end, before the sessions' stop (bounded, but a
            // runtime that does not answer takes its whole bound).
            let _ = self.drain();
            self.warn_not_started();
            // Set-ups under way end (each IPC exchange is bounded) and are stopped with the
            // others; one still going then is left to its thread.
            self.finish_setups(left + SETUPS_AT_STOP);
        }
        log::info!("stop: host source drained in {:?}", left.elapsed());
        self.stop_followed();
        log::info!("stop: host source stopped {} followed processes after {:?}", self.followed.len(), left.elapsed());
        // A recording's last drain still knows the followed processes (their off-CPU
        // intervals of the last second are sent). The agent and `top` serve nothing after
        // their stop: no last drain (with 20 processes just set up it took 2-3 s at load 40,
        // past the 2 s bound).
        if self.cfg.recording.is_some() {
            let _ = self.drain();
        }
        log::info!("stop: last drain done after {:?}", left.elapsed());
        self.followed.clear();
        if let Some(tx) = self.cfg.recording.as_ref().and_then(|r| r.report.clone()) {
            let thread_cpu = self.sampler.as_bpf().and_then(|b| b.loaded().thread_cpu().ok()).unwrap_or_default();
            let cxa = self.cxa.report(self.sampler.as_bpf());
            let mut natives: Vec<u32> = self.natives_followed.iter().copied().collect();
            natives.sort_unstable();
            let _ = tx.send(HostReport {
                cxa,
                natives,
                sampler: Some(self.sampler.kind()),
                stats: self.sampler.stats(),
                unwind: self.sampler.unwind_summary(),
                thread_cpu,
                perf_maps: std::mem::take(&mut self.perf_maps),
                providers: std::mem::take(&mut self.providers),
                children: std::mem::take(&mut self.child_parents),
            });
        }
    }

    /// Every followed process at once, each on its own thread and in this order: its perf map
    /// switched off, then its sessions stopped (a runtime's diagnostics server serves one
    /// command at a time, and StopTracing holds it for the whole rundown). Bounded: one after
    /// the other, 20 busy processes' rundowns and switch-offs took seconds.
    fn stop_followed(&mut self) {
        // A recording ended by its duration gives the rundowns longer; the agent's and
        // `top`'s stops, and any after a signal, keep to the bound.
        let budget = if self.cfg.recording.is_some() { crate::record::clr_session::stop_deadline() } else { crate::record::clr_session::STOP_DEADLINE };
        let deadline = Instant::now() + budget;
        let (tx, rx) = std::sync::mpsc::channel::<(u32, Option<String>)>();
        let mut waiting: HashSet<u32> = HashSet::new();
        let mut any_exited = false;
        let mut n = 0;
        for (&pid, f) in self.followed.iter_mut() {
            let guard = f.guard.take();
            let alloc = f.alloc.as_mut().and_then(|a| a.open.take()).map(|(s, _)| s);
            let exceptions = f.exceptions.take();
            let session = f.session.take();
            let t = tx.clone();
            // An exited process's stream is finite: read to its end (what the runtime wrote
            // before it exited), however loaded the host.
            let exited = !alive(pid);
            let deadline = if exited { deadline + EXITED_STREAM } else { deadline };
            if session.is_some() && !exited {
                waiting.insert(pid);
            }
            any_exited |= exited;
            let spawned = std::thread::Builder::new().name(format!("stop-{pid}")).spawn(move || {
                if let Some(mut g) = guard
                    && let Err(e) = g.restore()
                {
                    log::warn!("switching the perf map of {pid} off: {e}");
                }
                let mut late = None;
                // The sessions without rundown first: their stops are quick.
                for s in alloc.into_iter().chain(exceptions).chain(session) {
                    if !s.stop_by(deadline) {
                        late = Some(late_line(pid, budget));
                    }
                }
                let _ = t.send((pid, late));
            });
            // Without a thread, what the closure held was dropped here (stopped on this one).
            n += usize::from(spawned.is_ok());
        }
        let until = deadline + Duration::from_millis(700) + if any_exited { EXITED_STREAM } else { Duration::ZERO };
        // A session not ended shortly after the deadline is said to be late then (a recording
        // stopped by Ctrl-C may not wait for the rest).
        log::info!("stop: {} followed processes stopping, {} sessions", n, waiting.len());
        let stopping = self.cfg.recording.as_ref().map(|r| r.stopping.clone());
        let note = |w: &HashSet<u32>| {
            if let Some(s) = &stopping {
                *s.lock().unwrap_or_else(|e| e.into_inner()) = w.clone();
            }
        };
        note(&waiting);
        let mut told = Some(deadline + Duration::from_millis(100));
        let mut left = n;
        while left > 0 {
            let by = told.map_or(until, |t| t.min(until));
            match rx.recv_timeout(by.saturating_duration_since(Instant::now())) {
                Ok((pid, late)) => {
                    left -= 1;
                    if waiting.remove(&pid)
                        && let Some(l) = late
                    {
                        warn(&self.cfg, l);
                    }
                    note(&waiting);
                }
                Err(_) if told.is_some() && Instant::now() < until => {
                    told = None;
                    for pid in waiting.drain() {
                        warn(&self.cfg, late_line(pid, budget));
                    }
                    note(&waiting);
                }
                Err(_) => {
                    warn(&self.cfg, "a followed process did not stop in time: a perf map left on is switched off by the guardian or the next clrprobe".into());
                    break;
                }
            }
        }
    }

    /// Sets up the new .NET processes, one after the other (each bounded); a stop is seen
    /// between them (20 processes started at once took 30 s to set up at load 45, and the
    /// agent's stop waited for all of them).
    fn discover(&mut self, stop: &AtomicBool) {
        let parent = self.cfg.parent;
        // A recording's --parent is any ancestor, the agent's the direct parent.
        let ancestor = self.cfg.recording.is_some();
        let under = move |pid: u32, p: u32| if ancestor { crate::lifecycle::children::descends_from(pid, p) } else { super::ppid(pid) == Some(p) };
        let natives: Vec<u32> = self.cfg.recording.as_ref().map(|r| r.natives.clone()).unwrap_or_default();
        for pid in natives {
            // A process just started may be a runtime not yet loaded: looked at again until
            // it is old enough (a .NET one is set up below once it is).
            if !self.done.contains(&pid) && alive(pid) && !is_dotnet(pid) && age(pid).is_some_and(|a| a >= NATIVE_AFTER) {
                self.done.insert(pid);
                self.natives_followed.insert(pid);
                self.follow_native(pid);
            }
        }
        // One that has loaded the runtime since (a launched program that starts it late) is
        // set up below after all.
        let upgraded: Vec<u32> = self.natives_followed.iter().copied().filter(|&p| alive(p) && is_dotnet(p)).collect();
        for pid in upgraded {
            self.natives_followed.remove(&pid);
            self.done.remove(&pid);
        }
        let candidates: Vec<u32> = if self.cfg.all {
            self.scanner.scan_where(|pid| parent.is_none_or(|p| under(pid, p)))
        } else {
            if self.cfg.children {
                self.find_children();
            }
            // Only pids not yet set up are looked at (reading a .NET process's maps takes
            // its mmap lock and 0.12 ms of CPU here: each target every 250 ms was ~3 % of a
            // three-target recording's CPU).
            self.cfg.pids.iter().chain(&self.children).copied().filter(|p| !self.done.contains(p) && is_dotnet(*p)).collect()
        };
        for pid in candidates {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            if self.done.contains(&pid) || parent.is_some_and(|p| !under(pid, p)) {
                continue;
            }
            if !self.waiting.ready(pid, self.cfg.eventpipe || self.cfg.perf_map) {
                continue;
            }
            // No IPC before the runtime has finished starting (looked at again next round).
            if crate::lifecycle::startup::state(pid) == crate::lifecycle::startup::Startup::Starting {
                continue;
            }
            self.done.insert(pid);
            if self.cfg.all
                && let Some(b) = self.sampler.as_bpf()
            {
                b.unwind_pid(pid);
            }
            if let Some(w) = self.setups.as_mut() {
                w.hand_over(pid);
            } else if alive(pid) {
                self.follow(pid);
            }
        }
        // Forget exited pids that were never followed (a reused pid is new again).
        self.done.retain(|p| self.followed.contains_key(p) || alive(*p));
    }

    /// The named processes (and their children) that are .NET but were never set up because
    /// their runtime had not finished starting (suspended at start-up): one line each.
    fn warn_not_started(&self) {
        for &pid in self.cfg.pids.iter().chain(&self.children) {
            if !self.followed.contains_key(&pid)
                && alive(pid)
                && is_dotnet(pid)
                && crate::lifecycle::startup::state(pid) == crate::lifecycle::startup::Startup::Starting
            {
                warn(&self.cfg, crate::lifecycle::startup::NotStarted::Ended(pid).to_string());
            }
        }
    }

    /// New descendants of the named processes: sampled from now on (set up when .NET).
    fn find_children(&mut self) {
        for (child, parent) in self.child_scan.descendants(&self.cfg.pids) {
            if self.cfg.pids.contains(&child) || !self.children.insert(child) {
                continue;
            }
            if self.cfg.recording.is_some() {
                self.child_parents.push((child, parent));
            }
            if let Err(e) = self.sampler.add_pids(&[child]) {
                warn(&self.cfg, format!("sampling child {child}: {e}"));
            }
        }
        // Exited children go (a reused pid is a new process).
        self.children.retain(|p| self.followed.contains_key(p) || alive(*p));
    }

    /// A named process that is not .NET: followed as it is (no perf map, no session).
    fn follow_native(&mut self, pid: u32) {
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim_end().to_string()).unwrap_or_default();
        let info = ProcessInfo { pid, name, container_id: container_id(pid), runtime_version: String::new() };
        if self.tx.send(Record::Started(info)).is_err() {
            return;
        }
        let mut recs = Vec::new();
        cpu_records(pid, true, &mut recs);
        for r in recs {
            if self.tx.send(r).is_err() {
                return;
            }
        }
        self.followed.insert(pid, Followed { guard: None, session: None, exceptions: None, alloc: None });
    }

    fn follow(&mut self, pid: u32) {
        let (cfg, tx, sampler) = (&self.cfg, &self.tx, &mut self.sampler);
        let mut add_pid = |pid: u32| {
            if let Err(e) = sampler.add_pids(&[pid]) {
                warn(cfg, format!("sampling {pid}: {e}"));
            }
        };
        if let Some(done) = set_up_process(cfg, tx, pid, &mut add_pid) {
            self.adopt(done);
        }
    }

    /// Takes the set-ups that ended (and samples the processes they announced).
    fn collect_setups(&mut self) {
        let Some(w) = self.setups.as_mut() else { return };
        let msgs: Vec<SetUpMsg> = w.results.try_iter().collect();
        for m in msgs {
            self.on_setup(m);
        }
    }

    fn on_setup(&mut self, m: SetUpMsg) {
        match m {
            SetUpMsg::Sample(pid) => {
                if let Err(e) = self.sampler.add_pids(&[pid]) {
                    warn(&self.cfg, format!("sampling {pid}: {e}"));
                }
            }
            SetUpMsg::Done(pid, done) => {
                if let Some(w) = self.setups.as_mut() {
                    w.pending.remove(&pid);
                }
                if let Some(d) = done {
                    self.adopt(*d);
                }
            }
        }
    }

    /// Waits until `deadline` for the set-ups under way (none is begun after the stop).
    fn finish_setups(&mut self, deadline: Instant) {
        let Some(w) = self.setups.as_mut() else { return };
        w.queue = None;
        while self.setups.as_ref().is_some_and(|w| !w.pending.is_empty()) {
            let Some(w) = self.setups.as_ref() else { break };
            match w.results.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(m) => self.on_setup(m),
                Err(_) => {
                    let mut left: Vec<u32> = w.pending.iter().copied().collect();
                    left.sort_unstable();
                    log::info!("stop: set-ups of {left:?} still under way: left to their thread");
                    for pid in left {
                        warn(&self.cfg, setup_late_line(pid));
                    }
                    break;
                }
            }
        }
    }

    /// Takes a process whose set-up has ended into the followed ones.
    fn adopt(&mut self, done: SetUpDone) {
        if self.cfg.recording.is_some() {
            if let Some(state) = done.perf_map {
                self.perf_maps.push((done.pid, state));
            }
            for p in done.providers {
                self.providers.push((done.pid, p));
            }
        }
        if self.cfg.recording.as_ref().is_some_and(|r| r.cxa)
            && let Some(b) = self.sampler.as_bpf()
        {
            let cfg = &self.cfg;
            self.cxa.place(b, done.pid, |line| warn(cfg, line));
        }
        self.followed.insert(done.pid, done.followed);
    }

    /// Opens and closes the allocation slices that are due. Err: the aggregator is gone.
    fn slices(&mut self) -> Result<(), crossbeam_channel::SendError<Record>> {
        let Some(duty) = self.cfg.alloc_slices else { return Ok(()) };
        let now = Instant::now();
        for (&pid, f) in &mut self.followed {
            let Some(a) = f.alloc.as_mut() else { continue };
            match a.open.take() {
                Some((s, opened)) if Duration::from_nanos((monotonic_ns() as u64).saturating_sub(opened)) >= duty.slice => {
                    // Events stop when the runtime has the stop; the reader then sends the
                    // slice's last events before the close record.
                    let closed = monotonic_ns() as u64;
                    s.stop();
                    self.tx.send(Record::AllocSampling { pid, time_ns: closed, on: false })?;
                }
                Some(open) => a.open = Some(open),
                None if now >= a.next_open => {
                    a.next_open += duty.period;
                    if a.next_open < now {
                        // Late (a stalled runtime, a loaded host): the next one a period on.
                        a.next_open = now + duty.period;
                    }
                    match EventPipeSource::start_keeping(pid, &recipe::alloc_session(), self.tx.clone(), Some(clrprobe_pipeline::stream::allocation)) {
                        Ok(s) => {
                            let opened = monotonic_ns() as u64;
                            self.tx.send(Record::AllocSampling { pid, time_ns: opened, on: true })?;
                            a.open = Some((s, opened));
                        }
                        Err(e) => warn(&self.cfg, format!("no allocation slice for {pid}: {e}")),
                    }
                }
                None => {}
            }
        }
        Ok(())
    }

    /// Sends the samples, off-CPU time and CPU times gathered since the last drain, lets
    /// exited processes go, then a tick. Err: the aggregator is gone.
    fn drain(&mut self) -> Result<(), crossbeam_channel::SendError<Record>> {
        // Read before the sampler's maps: every sample taken before this moment is in this
        // batch, which is what the tick promises (the GC pauses are kept until then).
        let now = monotonic_ns() as u64;
        match self.sampler.drain() {
            Ok(batch) => {
                log::debug!("{} CPU sample entries", batch.len());
                // Host-wide, clrprobe's own threads add up by role (a thread per process
                // followed: `eventpipe-PID`, `stop-PID`…).
                let me = (self.cfg.all && !self.cfg.dotnet_only).then(std::process::id);
                for mut s in batch {
                    if Some(s.pid) == me {
                        crate::record::own_thread(&mut s);
                    }
                    self.tx.send(Record::Cpu(s.into()))?;
                }
            }
            Err(e) => warn(&self.cfg, format!("reading samples: {e}")),
        }
        if self.offcpu_on
            && let Some(b) = self.sampler.as_bpf()
        {
            match b.drain_offcpu() {
                Ok(batch) => {
                    // The block profile is the followed processes' (the aggregator drops the
                    // rest): the host's other threads' intervals are not sent.
                    for s in batch.into_iter().filter(|s| self.followed.contains_key(&s.pid)) {
                        self.tx.send(Record::OffCpu(s.into()))?;
                    }
                }
                Err(e) => warn(&self.cfg, format!("reading off-CPU time: {e}")),
            }
        }
        let lost = self.sampler.stats().lost_samples;
        if lost > self.lost_sent {
            self.tx.send(Record::Lost { pid: None, source: "cpu-samples", count: lost - self.lost_sent })?;
            self.lost_sent = lost;
        }
        // One reading of /proc/PID/stat each: whether it has exited, and its CPU times.
        let mut recs = Vec::new();
        let mut exited = Vec::new();
        for &pid in self.followed.keys() {
            if !cpu_records(pid, self.cfg.recording.is_some(), &mut recs) {
                exited.push(pid);
            }
        }
        if !exited.is_empty()
            && !self.cxa.probed.is_empty()
            && let Some(b) = self.sampler.as_bpf()
        {
            self.cxa.detach_exited(b);
        }
        if self.cfg.all
            && !exited.is_empty()
            && let Some(b) = self.sampler.as_bpf()
        {
            // Host-wide: what unwinding the exited processes needed goes with them.
            b.forget_processes(&exited.iter().copied().collect(), &HashSet::new());
        }
        for pid in exited {
            // Dropping the source and the guard: the stream has ended, the map files go.
            self.followed.remove(&pid);
            self.tx.send(Record::Exited { pid, time_ns: now })?;
        }
        for r in recs {
            self.tx.send(r)?;
        }
        self.tx.send(Record::Tick { time_ns: now })
    }

    /// Pids followed now.
    pub fn followed(&self) -> Vec<u32> {
        self.followed.keys().copied().collect()
    }

    /// Is the session of `pid` still reading?
    pub fn session_alive(&self, pid: u32) -> bool {
        self.followed.get(&pid).and_then(|f| f.session.as_ref()).is_some_and(|s| !s.ended() && s.pid() == pid)
    }
}

/// How long the stop of a recording waits for set-ups under way (an IPC exchange with a
/// runtime that does not answer takes up to 2 s): writing the files
/// after a Ctrl-C took up to 1.5 s of the 2 s on a loaded host (debug build, load 18).
const SETUPS_AT_STOP: Duration = Duration::from_millis(300);

/// A recording's set-ups, on a thread of their own and one after the other: the host source
/// goes on draining samples while a runtime takes its time to answer (each IPC exchange waits
/// up to 2 s; the source drained nothing meanwhile, and a Ctrl-C then had no samples to write).
struct SetUpWorker {
    queue: Option<std::sync::mpsc::Sender<u32>>,
    results: std::sync::mpsc::Receiver<SetUpMsg>,
    /// Pids handed over whose set-up has not ended.
    pending: HashSet<u32>,
}

enum SetUpMsg {
    /// Sample this process's CPU from now on (the sampler is the host source's).
    Sample(u32),
    /// The set-up of the process ended (None: not followed: gone, or the aggregator is).
    Done(u32, Option<Box<SetUpDone>>),
}

impl SetUpWorker {
    fn start(cfg: HostConfig, tx: Sender<Record>, stop: &'static AtomicBool) -> std::io::Result<Self> {
        let (queue, pids) = std::sync::mpsc::channel::<u32>();
        let (out, results) = std::sync::mpsc::channel();
        std::thread::Builder::new().name("set-ups".into()).spawn(move || {
            for pid in pids {
                let done = if stop.load(Ordering::SeqCst) || !alive(pid) {
                    None
                } else {
                    let sample = out.clone();
                    set_up_process(&cfg, &tx, pid, &mut |p| {
                        let _ = sample.send(SetUpMsg::Sample(p));
                    })
                    .map(Box::new)
                };
                // The host source gone: what was set up is undone as it drops.
                if out.send(SetUpMsg::Done(pid, done)).is_err() {
                    return;
                }
            }
        })?;
        Ok(Self { queue: Some(queue), results, pending: HashSet::new() })
    }

    fn hand_over(&mut self, pid: u32) {
        if let Some(q) = &self.queue
            && q.send(pid).is_ok()
        {
            self.pending.insert(pid);
        }
    }
}

/// A process set up (or given up on, and followed all the same).
struct SetUpDone {
    pid: u32,
    followed: Followed,
    perf_map: Option<crate::record::PerfMapState>,
    /// Each session's providers, the process's own first.
    providers: Vec<String>,
}

/// Sets `pid` up (perf map on, EventPipe session started) and announces it to the aggregator;
/// `add_pid` has its CPU sampled from then on (on the thread owning the sampler). None: the
/// aggregator is gone. Blocks for the set-up's IPC (each exchange bounded).
fn set_up_process(cfg: &HostConfig, tx: &Sender<Record>, pid: u32, add_pid: &mut dyn FnMut(u32)) -> Option<SetUpDone> {
    let described = crate::discover::describe(pid);
    let info = ProcessInfo {
        pid,
        name: described.as_ref().map(|d| d.comm.clone()).unwrap_or_default(),
        container_id: container_id(pid),
        runtime_version: described.and_then(|d| d.runtime_version).unwrap_or_default(),
    };
    let runtime_version = info.runtime_version.clone();
    // One clrprobe at a time sets a target up (bounded: this loop waits for it); one that
    // cannot is sampled without its IPC set-up.
    let plan = recipe::Plan { perf_map: cfg.perf_map, launched: cfg.recording.as_ref().is_some_and(|r| r.launched) };
    let mut providers = Vec::new();
    let mut info = Some(info);
    // The aggregator follows the process from here (its session's events need that); the
    // perf map is on by then, so the aggregator's first read of it names JIT code.
    let mut announce = |info: &mut Option<ProcessInfo>| -> bool {
        let Some(info) = info.take() else { return true };
        if tx.send(Record::Started(info)).is_err() {
            return false;
        }
        // Its CPU times now: where its GC CPU window starts (as its timed samples do).
        let mut recs = Vec::new();
        cpu_records(pid, cfg.recording.is_some(), &mut recs);
        for r in recs {
            if tx.send(r).is_err() {
                return false;
            }
        }
        if !cfg.all || cfg.dotnet_only {
            add_pid(pid);
        }
        true
    };
    let set_up = recipe::set_up(pid, plan, recipe::Wait::Lock(Instant::now() + Duration::from_secs(2)), |perf_map_names| {
        if !announce(&mut info) || !cfg.eventpipe {
            return None;
        }
        let (mut config, sliced, apart) = dotnet_session(cfg, perf_map_names, &runtime_version);
        // `record --http` / `--providers`: their EventSources in the session, read by a
        // collector on the session's reader.
        let net = cfg.recording.as_ref().and_then(|r| {
            r.net.extend_session(&mut config);
            Some(super::eventpipe::NetTap { collector: r.net.collector()?, parts: r.net_parts.clone()? })
        });
        providers.push(crate::record::clr_session::providers_spec(&config));
        match EventPipeSource::start_net(pid, &config, tx.clone(), net) {
            Ok(s) => {
                let exceptions = apart.then(|| {
                    let config = recipe::exceptions_session();
                    providers.push(crate::record::clr_session::providers_spec(&config));
                    EventPipeSource::start(pid, &config, tx.clone())
                        .inspect_err(|e| warn(cfg, format!("no exceptions session for {pid} (no exception events): {e}")))
                        .ok()
                });
                Some((s, sliced, exceptions.flatten()))
            }
            Err(e) => {
                warn(cfg, format!("no EventPipe session for {pid}: {e}"));
                None
            }
        }
    });
    let perf_map = set_up.as_ref().ok().and_then(|s| s.guard.as_ref()).map(|g| g.state.clone());
    let (guard, session, sliced, exceptions) = match set_up {
        Ok(s) => {
            let (session, sliced, exceptions) = s.session.map_or((None, false, None), |(s, sliced, ex)| (Some(s), sliced, ex));
            (s.guard, session, sliced, exceptions)
        }
        Err(e) => {
            warn(cfg, format!("no perf map or EventPipe session for {pid}: {e}"));
            (None, None, false, None)
        }
    };
    // Without a set-up (or a session) it is followed and sampled all the same.
    if !announce(&mut info) {
        return None;
    }
    let alloc = (sliced && session.is_some()).then(|| Slices { next_open: Instant::now(), open: None });
    Some(SetUpDone { pid, followed: Followed { guard, session, exceptions, alloc }, perf_map, providers })
}

/// A .NET process's own EventPipe session, whether its allocation events come in slices
/// (then from [`recipe::alloc_session`]) and whether its exceptions come from a session of
/// their own ([`recipe::exceptions_session`]).
fn dotnet_session(cfg: &HostConfig, perf_map_names: bool, runtime_version: &str) -> (clrprobe_eventpipe::ipc::SessionConfig, bool, bool) {
    // Allocation events in slices need the process's own session at Informational (no
    // AllocationTick: the perf map names JIT code) and CollectTracing2 (a session
    // without rundown: .NET 5+).
    let sliced = cfg.alloc_slices.is_some() && cfg.kinds.alloc && perf_map_names && !runtime_before_5(runtime_version);
    // Exceptions apart, at Error: only ExceptionThrown, not the catch/finally/filter events
    // (each with a stack walk in the target) the Informational level adds. A session without
    // rundown needs CollectTracing2 (.NET 5+); before, they stay in the process's own.
    let apart = cfg.kinds.exceptions && !runtime_before_5(runtime_version);
    let kinds = if sliced { Kinds { alloc: false, ..cfg.kinds } } else { cfg.kinds };
    let mut config = if apart { recipe::session_without_exceptions(kinds, perf_map_names, cfg.rundown) } else { recipe::session(kinds, perf_map_names, cfg.rundown) };
    if let Some(s) = cfg.counters_interval_s {
        config.providers.push(super::eventpipe::runtime_counters(s));
    }
    (config, sliced, apart)
}

/// The sessions these settings open in a .NET 5+ process whose perf map names JIT code, as
/// `clrprobe trace --providers` takes them: its own session, its allocation slices' (None:
/// no slices) and its exceptions' (None: none, or in its own). `agent --print-sessions`:
/// `cargo xtask bench-agent` opens the same with a client that only reads (the targets'
/// floor).
pub fn dotnet_session_specs(cfg: &HostConfig) -> SessionSpecs {
    let (config, sliced, apart) = dotnet_session(cfg, true, "8.0.0");
    let spec = crate::record::clr_session::providers_spec;
    SessionSpecs { session: spec(&config), slice: sliced.then(|| spec(&recipe::alloc_session())), exceptions: apart.then(|| spec(&recipe::exceptions_session())) }
}

/// [`dotnet_session_specs`]: `trace --providers` forms.
pub struct SessionSpecs {
    pub session: String,
    pub slice: Option<String>,
    pub exceptions: Option<String>,
}

/// Why a process has no runtime events: its set-up had not ended when the recording stopped.
pub fn setup_late_line(pid: u32) -> String {
    format!(
        "the runtime of pid {pid} did not finish its EventPipe session set-up by the end of the recording (stopped or not answering): its samples are kept, its runtime events are not"
    )
}

/// Why a session's events end early.
pub fn late_line(pid: u32, budget: Duration) -> String {
    format!(
        "the runtime of pid {pid} did not finish its EventPipe session within {:.1} s of StopTracing (stopped or not answering): kept the events read before",
        budget.as_secs_f64()
    )
}

/// Is this runtime version (`3.1.23`) older than .NET 5 (no CollectTracing2)? Unknown: no.
/// A named process not .NET by this age is followed as native.
const NATIVE_AFTER: Duration = Duration::from_secs(2);

/// How long ago the process started (None: gone).
fn age(pid: u32) -> Option<Duration> {
    let start = crate::lifecycle::state::start_time(pid)?;
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let up: f64 = std::fs::read_to_string("/proc/uptime").ok()?.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_secs_f64((up - start as f64 / hz).max(0.0)))
}

fn runtime_before_5(version: &str) -> bool {
    version.split('.').next().and_then(|m| m.parse::<u32>().ok()).is_some_and(|m| m < 5)
}

#[cfg(test)]
mod tests {
    #[test]
    fn runtimes_before_5_are_told_apart() {
        assert!(super::runtime_before_5("3.1.23"));
        assert!(!super::runtime_before_5("8.0.4"));
        assert!(!super::runtime_before_5("10.0.0"));
        assert!(!super::runtime_before_5(""));
    }
}
