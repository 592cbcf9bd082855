//! The processes a recording follows, and the set-up each .NET one gets (perf map switched on,
//! EventPipe session, `__cxa_throw` uprobe). With `--all` the host is scanned for new .NET
//! processes four times a second ([`crate::discover::Scanner`]); a named or launched target
//! that had not loaded the runtime yet gets its set-up once libcoreclr is mapped (checked each
//! second). Without `--all`, the descendants of the named or launched processes are followed
//! too (found by polling /proc), and .NET ones get the same set-up.
//!
//! The set-up of a .NET process talks to its runtime over IPC, which a stopped or hostile
//! process may never answer: it runs on a thread per process, so the recording loop (and
//! Ctrl-C) never waits for it; its result is picked up by the next poll.
use std::{
    collections::HashSet,
    sync::mpsc,
    time::{Duration, Instant},
};

use super::{FrameResolver, PerfMapGuard, RecordArgs, RecordSummary, alive, clr_session::RuntimeSession, cxa, is_dotnet, recipe};
use crate::sampler::BpfSampler;

/// Per-process EventPipe buffer (the session's circular buffer in the target, in MB).
pub const EVENTPIPE_BUFFER_MB: u32 = 64;

pub(super) struct Targets {
    /// Every process followed (named, launched or discovered) and not retired.
    pub pids: Vec<u32>,
    /// Exited processes folded into the profile and forgotten ([`Targets::forget`]).
    pub retired: Vec<u32>,
    /// `--all --parent PID`: only descendants of PID get the .NET set-up.
    parent: Option<u32>,
    /// .NET processes whose set-up is done (or was tried).
    attached: HashSet<u32>,
    /// Folded processes that were set up (for the summary).
    retired_set_up: HashSet<u32>,
    pub guards: Vec<PerfMapGuard>,
    pub sessions: Vec<RuntimeSession>,
    all: bool,
    scanner: crate::discover::Scanner,
    last_poll: Instant,
    /// .NET processes seen without their diagnostics socket yet (the runtime maps libcoreclr
    /// before it starts its diagnostics server).
    waiting: recipe::SocketWait,
    /// Followed processes that are not named or launched: child → parent.
    pub children: std::collections::HashMap<u32, u32>,
    child_scan: crate::lifecycle::children::ChildScan,
    /// Set-ups in flight (threads), and their results.
    in_flight: HashSet<u32>,
    tx: mpsc::Sender<Attached>,
    rx: mpsc::Receiver<Attached>,
    /// Set when the recording ends: set-ups still waiting for their runtime to start give up.
    ended: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The IPC half of a .NET process's set-up, done on its own thread.
struct Attached {
    pid: u32,
    guard: Option<PerfMapGuard>,
    session: Option<Result<RuntimeSession, super::clr_session::SessionError>>,
    /// The session's providers as `trace --providers` takes them (the bench's floor).
    providers: Option<String>,
    /// Why it got no set-up (its runtime never finished starting, another clrprobe kept
    /// setting it up).
    refused: Option<String>,
}

impl Targets {
    pub fn new(args: &RecordArgs) -> Self {
        let (tx, rx) = mpsc::channel();
        Self {
            children: std::collections::HashMap::new(),
            child_scan: Default::default(),
            in_flight: HashSet::new(),
            tx,
            rx,
            ended: Default::default(),
            pids: args.pids.clone(),
            retired: Vec::new(),
            parent: args.parent,
            attached: HashSet::new(),
            retired_set_up: HashSet::new(),
            guards: Vec::new(),
            sessions: Vec::new(),
            all: args.all,
            scanner: crate::discover::Scanner::new(),
            last_poll: Instant::now(),
            waiting: recipe::SocketWait::default(),
        }
    }

    /// Is it time for the next [`Targets::poll`]? Every 250 ms (children are found by polling).
    /// Runtime events of every session after `end_mono_ns` (host monotonic) make no samples.
    pub fn end_samples_at(&self, end_mono_ns: i64) {
        for s in &self.sessions {
            s.live.lock().unwrap_or_else(|e| e.into_inner()).profiles.end_mono_ns = Some(end_mono_ns);
        }
    }

    pub fn poll_due(&self) -> bool {
        self.last_poll.elapsed() >= Duration::from_millis(250)
    }

    /// Finds .NET processes not set up yet (new ones on the host with `--all`; named targets
    /// that have loaded the runtime since) and sets them up.
    pub fn poll(
        &mut self,
        args: &RecordArgs,
        summary: &mut RecordSummary,
        mut bpf: Option<&mut BpfSampler>,
        resolver: &mut FrameResolver,
    ) {
        self.last_poll = Instant::now();
        self.collect(summary, resolver);
        if !self.all {
            self.follow_children(args, summary, bpf.as_deref_mut(), resolver);
        }
        // Processes set up already are not looked at again (reading a .NET process's maps
        // or walking its parents at every poll was a tenth of `record -p`'s CPU).
        let candidates: Vec<u32> = if self.all {
            let attached = &self.attached;
            let mut found = self.scanner.scan_where(|p| !attached.contains(&p));
            if let Some(parent) = self.parent {
                found.retain(|&p| crate::lifecycle::children::descends_from(p, parent));
            }
            found
        } else {
            self.pids.iter().copied().filter(|p| !self.attached.contains(p) && is_dotnet(*p)).collect()
        };
        for pid in candidates {
            if self.attached.contains(&pid) {
                continue;
            }
            if !self.waiting.ready(pid, args.eventpipe || args.perf_map) {
                continue;
            }
            if !self.pids.contains(&pid) {
                self.pids.push(pid);
                resolver.add_process(pid);
            }
            self.attached.insert(pid);
            if let Some(b) = bpf.as_deref_mut() {
                b.unwind_pid(pid);
            }
            self.attach(pid, args, summary, bpf.as_deref_mut());
        }
    }

    /// Picks up finished set-ups.
    fn collect(&mut self, summary: &mut RecordSummary, resolver: &mut FrameResolver) {
        while let Ok(a) = self.rx.try_recv() {
            self.in_flight.remove(&a.pid);
            if let Some(g) = a.guard {
                summary.perf_maps.push((a.pid, g.state.clone()));
                self.guards.push(g);
            }
            if let Some(p) = a.providers {
                summary.eventpipe_providers.push((a.pid, p));
            }
            if let Some(why) = a.refused {
                summary.warnings.push(why);
            }
            match a.session {
                Some(Ok(s)) => self.sessions.push(s),
                Some(Err(e)) => summary.warnings.push(format!("no EventPipe session for {}: {e}", a.pid)),
                None => {}
            }
            // The perf map switched on over IPC lists the code JIT-compiled so far: read it now,
            // as a short-lived process may be gone by the next drain.
            resolver.refresh(a.pid);
        }
    }

    /// Waits (until `deadline`) for set-ups in flight, so what they switched on is switched
    /// off with the rest; one still running then cleans up after itself on its thread.
    pub fn finish_attaching(&mut self, summary: &mut RecordSummary, resolver: &mut FrameResolver, deadline: Instant) {
        self.ended.store(true, std::sync::atomic::Ordering::Relaxed);
        while !self.in_flight.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            self.collect(summary, resolver);
        }
        for pid in std::mem::take(&mut self.in_flight) {
            summary.warnings.push(match crate::lifecycle::startup::state(pid) {
                crate::lifecycle::startup::Startup::Starting => crate::lifecycle::startup::NotStarted::Ended(pid).to_string(),
                _ => format!("the runtime of {pid} did not answer its set-up (perf map, EventPipe) in time"),
            });
        }
    }

    /// Follows new descendants of the named (or launched) processes, as `perf -p` with
    /// inheritance would: sampled from now on, set up when they are .NET.
    fn follow_children(&mut self, args: &RecordArgs, summary: &mut RecordSummary, mut bpf: Option<&mut BpfSampler>, resolver: &mut FrameResolver) {
        for (child, parent) in self.child_scan.descendants(&args.pids) {
            if self.pids.contains(&child) {
                continue;
            }
            self.pids.push(child);
            self.children.insert(child, parent);
            resolver.add_process(child);
            match bpf.as_deref_mut() {
                Some(b) => {
                    if let Err(e) = b.loaded().add_targets(&[child]) {
                        summary.warnings.push(format!("sampling child {child}: {e}"));
                    }
                }
                None => summary.warnings.push(format!("child {child} of {parent} is not sampled: following children needs the BPF sampler")),
            }
        }
    }

    fn attach(&mut self, pid: u32, args: &RecordArgs, summary: &mut RecordSummary, bpf: Option<&mut BpfSampler>) {
        let kinds = args.kinds;
        let (perf_map, eventpipe) = (args.perf_map, args.eventpipe);
        // Launch mode: the launched tree has its perf maps on through the environment.
        let launched = args.resume_after_attach;
        let tx = self.tx.clone();
        let net = args.net.clone();
        let ended = self.ended.clone();
        let spawned = std::thread::Builder::new().name(format!("attach-{pid}")).spawn(move || {
            let plan = recipe::Plan { perf_map, launched };
            let set_up = recipe::set_up(pid, plan, recipe::Wait::Started(&ended), |perf_map_names| {
                eventpipe.then(|| {
                    let mut config = recipe::session(kinds.events(), perf_map_names, true);
                    net.extend_session(&mut config);
                    (super::clr_session::providers_spec(&config), RuntimeSession::start_with(pid, &config, kinds.events(), net.collector()))
                })
            });
            let a = match set_up {
                Ok(s) => {
                    let (providers, session) = match s.session {
                        Some((p, s)) => (Some(p), Some(s)),
                        None => (None, None),
                    };
                    Attached { pid, guard: s.guard, session, providers, refused: None }
                }
                Err(e) => Attached { pid, guard: None, session: None, providers: None, refused: (!e.gone()).then(|| e.to_string()) },
            };
            // If the recording has ended meanwhile, dropping these switches them off again.
            let _ = tx.send(a);
        });
        match spawned {
            Ok(_) => {
                self.in_flight.insert(pid);
            }
            Err(e) => summary.warnings.push(format!("no set-up for {pid}: {e}")),
        }
        // Not host-wide: a uprobe per process costs an RCU grace period each to remove (seconds
        // at the end of an `--all` run with dozens of .NET processes). The uprobe traps at every
        // throw: placed only when asked for, or when EventPipe is off; priced first.
        if kinds.exceptions
            && !self.all
            && (args.cxa_throw || !args.eventpipe)
            && let Some(b) = bpf {
                if summary.uprobe_cost_ns.is_none() {
                    match cxa::price(b.loaded()) {
                        Ok(d) => summary.uprobe_cost_ns = Some(d.as_nanos() as u64),
                        Err(e) => summary.warnings.push(format!("uprobe self-test: {e}")),
                    }
                }
                match cxa::attach(b.loaded(), pid) {
                    Ok(()) => summary.cxa_throw_probed.push(pid),
                    Err(e) => summary.warnings.push(format!("no __cxa_throw count for {pid}: {e}")),
                }
            }
    }

    /// Releases what exited targets hold: their sessions' reader threads and sockets (their
    /// outcomes are kept) and their perf-map guards (switched off, files removed, state fd
    /// closed). Keeps threads and fds flat over a long `--all` run.
    pub fn retire_exited(&mut self, finished: &mut Vec<(u32, super::clr_session::SessionOutcome)>) {
        let mut i = 0;
        while i < self.sessions.len() {
            match self.sessions[i].try_finish() {
                Some(o) => finished.push((self.sessions.swap_remove(i).pid(), o)),
                None => i += 1,
            }
        }
        let mut i = 0;
        while i < self.guards.len() {
            if alive(self.guards[i].pid()) {
                i += 1;
                continue;
            }
            // On its own thread: the recording loop never waits for the state lock.
            let mut g = self.guards.swap_remove(i);
            let _ = std::thread::Builder::new().name(format!("restore-{}", g.pid())).spawn(move || {
                let _ = g.restore();
            });
        }
    }

    /// Can `pid` be folded and forgotten: exited, and no set-up or EventPipe session of it
    /// left running?
    pub fn settled(&self, pid: u32) -> bool {
        !self.in_flight.contains(&pid) && !self.sessions.iter().any(|s| s.pid() == pid)
    }

    /// Stops following exited processes (they stay listed as recorded).
    pub fn forget(&mut self, pids: &HashSet<u32>) {
        let (gone, live): (Vec<u32>, Vec<u32>) = self.pids.iter().partition(|p| pids.contains(p));
        self.pids = live;
        self.retired.extend(gone);
        self.waiting.retain(|p, _| !pids.contains(p));
        // A later process with the same pid (pids wrap within an hour here) is new: set up again.
        for p in pids {
            if self.attached.remove(p) {
                self.retired_set_up.insert(*p);
            }
        }
    }

    /// Was `pid` found to be .NET and set up?
    pub fn is_set_up(&self, pid: u32) -> bool {
        self.attached.contains(&pid) || self.retired_set_up.contains(&pid)
    }

    /// With `--all` the recording never ends by itself (only by duration or Ctrl-C);
    /// otherwise it ends when every target has exited.
    pub fn all_exited(&self) -> bool {
        !self.all && self.pids.iter().all(|&p| !alive(p))
    }
}
