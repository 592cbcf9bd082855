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
    /// On-CPU time per thread from sched_switch (with `offcpu`), as `record` counts it.
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
/// BPF sampler was not used, if it was not.
pub fn spawn(cfg: HostConfig, tx: Sender<Record>, stop: &'static AtomicBool) -> Result<(std::thread::JoinHandle<()>, Option<String>), SourceError> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let host = std::thread::Builder::new()
        .name("host-source".into())
        .spawn(move || match HostSource::start(cfg, tx) {
            Ok(source) => {
                let _ = ready_tx.send(Ok(source.fallback.clone()));
                source.run(stop);
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
            }
        })
        .map_err(SourceError::Thread)?;
    match ready_rx.recv() {
        Ok(Ok(fallback)) => Ok((host, fallback)),
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
}

/// Discovery period: an agent is not in a hurry, and each scan reads /proc/PID/maps of
/// every young process on the host (`record --all` scans every 250 ms).
const POLL: Duration = Duration::from_secs(1);
const DRAIN: Duration = Duration::from_secs(1);
/// Every process's maps are read again this often (runtimes loaded late by native hosts);
/// new processes are checked at every poll while young.
const FULL_RESCAN: Duration = Duration::from_secs(30);

impl HostSource {
    /// Loads the sampler (and the off-CPU program) and returns the source, not yet running.
    pub fn start(cfg: HostConfig, tx: Sender<Record>) -> Result<Self, SourceError> {
        let targets = if cfg.all && !cfg.dotnet_only { vec![0] } else { cfg.pids.clone() };
        let (mut sampler, fallback) = sampler::start_with_copies(cfg.sampler, &targets, cfg.freq, cfg.stack_copies)?;
        let mut offcpu_on = false;
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
        })
    }

    /// Runs until `stop` is set; then stops every session and restores every perf map.
    pub fn run(mut self, stop: &AtomicBool) {
        let mut last_poll = Instant::now() - POLL;
        let mut last_drain = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            if last_poll.elapsed() >= POLL {
                last_poll = Instant::now();
                self.discover();
                log::debug!("discovery took {:?}", last_poll.elapsed());
            }
            if last_drain.elapsed() >= DRAIN {
                last_drain = Instant::now();
                if self.drain().is_err() {
                    break; // the aggregator is gone
                }
                log::debug!("drain took {:?}", last_drain.elapsed());
            }
            if self.slices().is_err() {
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
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop_followed();
        // The last drain still knows the followed processes (their off-CPU intervals of the
        // last second are sent).
        let _ = self.drain();
        self.followed.clear();
    }

    /// Every followed process at once, each on its own thread and in this order: its perf map
    /// switched off, then its sessions stopped (a runtime's diagnostics server serves one
    /// command at a time, and StopTracing holds it for the whole rundown). Bounded: one after
    /// the other, 20 busy processes' rundowns and switch-offs took seconds.
    fn stop_followed(&mut self) {
        let deadline = Instant::now() + crate::record::clr_session::STOP_DEADLINE;
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let mut n = 0;
        for (&pid, f) in self.followed.iter_mut() {
            let guard = f.guard.take();
            let alloc = f.alloc.as_mut().and_then(|a| a.open.take()).map(|(s, _)| s);
            let session = f.session.take();
            let t = tx.clone();
            let spawned = std::thread::Builder::new().name(format!("stop-{pid}")).spawn(move || {
                if let Some(mut g) = guard
                    && let Err(e) = g.restore()
                {
                    log::warn!("switching the perf map of {pid} off: {e}");
                }
                for s in alloc.into_iter().chain(session) {
                    s.stop_by(deadline);
                }
                let _ = t.send(());
            });
            // Without a thread, what the closure held was dropped here (stopped on this one).
            n += usize::from(spawned.is_ok());
        }
        let until = deadline + Duration::from_millis(700);
        for _ in 0..n {
            if rx.recv_timeout(until.saturating_duration_since(Instant::now())).is_err() {
                warn(&self.cfg, "a followed process did not stop in time: a perf map left on is switched off by the guardian or the next clrprobe".into());
                break;
            }
        }
    }

    fn discover(&mut self) {
        let parent = self.cfg.parent;
        let candidates: Vec<u32> = if self.cfg.all {
            self.scanner.scan_where(|pid| parent.is_none_or(|p| super::ppid(pid) == Some(p)))
        } else {
            if self.cfg.children {
                self.find_children();
            }
            self.cfg.pids.iter().chain(&self.children).copied().filter(|&p| is_dotnet(p)).collect()
        };
        for pid in candidates {
            if self.done.contains(&pid) || self.cfg.parent.is_some_and(|p| super::ppid(pid) != Some(p)) {
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
            if alive(pid) {
                self.follow(pid);
            }
        }
        // Forget exited pids that were never followed (a reused pid is new again).
        self.done.retain(|p| self.followed.contains_key(p) || alive(*p));
    }

    /// New descendants of the named processes: sampled from now on (set up when .NET).
    fn find_children(&mut self) {
        for (child, _) in self.child_scan.descendants(&self.cfg.pids) {
            if self.cfg.pids.contains(&child) || !self.children.insert(child) {
                continue;
            }
            if let Err(e) = self.sampler.add_pids(&[child]) {
                warn(&self.cfg, format!("sampling child {child}: {e}"));
            }
        }
        // Exited children go (a reused pid is a new process).
        self.children.retain(|p| self.followed.contains_key(p) || alive(*p));
    }

    fn follow(&mut self, pid: u32) {
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
        let plan = recipe::Plan { perf_map: self.cfg.perf_map, launched: false };
        let (cfg, tx, sampler) = (&self.cfg, &self.tx, &mut self.sampler);
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
            cpu_records(pid, &mut recs);
            for r in recs {
                if tx.send(r).is_err() {
                    return false;
                }
            }
            if (!cfg.all || cfg.dotnet_only)
                && let Err(e) = sampler.add_pids(&[pid])
            {
                warn(cfg, format!("sampling {pid}: {e}"));
            }
            true
        };
        let set_up = recipe::set_up(pid, plan, recipe::Wait::Lock(Instant::now() + Duration::from_secs(2)), |perf_map_names| {
            if !announce(&mut info) || !cfg.eventpipe {
                return None;
            }
            // Allocation events in slices need the process's own session at Informational (no
            // AllocationTick: the perf map names JIT code) and CollectTracing2 (a session
            // without rundown: .NET 5+).
            let sliced = cfg.alloc_slices.is_some() && cfg.kinds.alloc && perf_map_names && !runtime_before_5(&runtime_version);
            let kinds = if sliced { Kinds { alloc: false, ..cfg.kinds } } else { cfg.kinds };
            let mut config = recipe::session(kinds, perf_map_names, cfg.rundown);
            if let Some(s) = cfg.counters_interval_s {
                config.providers.push(super::eventpipe::runtime_counters(s));
            }
            match EventPipeSource::start(pid, &config, tx.clone()) {
                Ok(s) => Some((s, sliced)),
                Err(e) => {
                    warn(cfg, format!("no EventPipe session for {pid}: {e}"));
                    None
                }
            }
        });
        let (guard, session, sliced) = match set_up {
            Ok(s) => {
                let (session, sliced) = s.session.map_or((None, false), |(s, sliced)| (Some(s), sliced));
                (s.guard, session, sliced)
            }
            Err(e) => {
                warn(&self.cfg, format!("no perf map or EventPipe session for {pid}: {e}"));
                (None, None, false)
            }
        };
        // Without a set-up (or a session) it is followed and sampled all the same.
        if !announce(&mut info) {
            return;
        }
        let alloc = (sliced && session.is_some()).then(|| Slices { next_open: Instant::now(), open: None });
        self.followed.insert(pid, Followed { guard, session, alloc });
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
                for s in batch {
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
        let exited: Vec<u32> = self.followed.keys().copied().filter(|&p| !alive(p)).collect();
        for pid in exited {
            // Dropping the source and the guard: the stream has ended, the map files go.
            self.followed.remove(&pid);
            self.tx.send(Record::Exited { pid, time_ns: now })?;
        }
        let mut recs = Vec::new();
        for &pid in self.followed.keys() {
            cpu_records(pid, &mut recs);
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

/// Is this runtime version (`3.1.23`) older than .NET 5 (no CollectTracing2)? Unknown: no.
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
