//! The processes a recording follows, and the set-up each .NET one gets (perf map switched on,
//! EventPipe session, `__cxa_throw` uprobe). With `--all` the host is scanned for new .NET
//! processes four times a second ([`crate::discover::Scanner`]); a named or launched target
//! that had not loaded the runtime yet gets its set-up once libcoreclr is mapped (checked each
//! second).
use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use super::{
    FrameResolver, PerfMapGuard, PerfMapState, RecordArgs, RecordSummary, alive, clr_session::RuntimeSession, cxa, is_dotnet,
    clr_session::{kind_keywords, session_config},
};
use crate::sampler::BpfSampler;

/// Per-process EventPipe buffer (the session's circular buffer in the target, in MB).
pub const EVENTPIPE_BUFFER_MB: u32 = 64;

pub(super) struct Targets {
    /// Every process followed (named, launched or discovered).
    pub pids: Vec<u32>,
    /// .NET processes whose set-up is done (or was tried).
    attached: HashSet<u32>,
    pub guards: Vec<PerfMapGuard>,
    pub sessions: Vec<RuntimeSession>,
    all: bool,
    scanner: crate::discover::Scanner,
    last_poll: Instant,
    /// Polls a .NET process was seen without its diagnostics socket yet (the runtime maps
    /// libcoreclr before it starts its diagnostics server).
    waiting: std::collections::HashMap<u32, u32>,
}

/// Polls to wait for a new runtime's diagnostics socket before setting it up anyway.
const SOCKET_WAIT_POLLS: u32 = 20;

impl Targets {
    pub fn new(args: &RecordArgs) -> Self {
        Self {
            pids: args.pids.clone(),
            attached: HashSet::new(),
            guards: Vec::new(),
            sessions: Vec::new(),
            all: args.all,
            scanner: crate::discover::Scanner::new(),
            last_poll: Instant::now(),
            waiting: std::collections::HashMap::new(),
        }
    }

    /// Is it time for the next [`Targets::poll`]? Every 250 ms with `--all`, else every second.
    pub fn poll_due(&self) -> bool {
        self.last_poll.elapsed() >= if self.all { Duration::from_millis(250) } else { Duration::from_secs(1) }
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
        let candidates: Vec<u32> = if self.all {
            self.scanner.scan()
        } else {
            self.pids.iter().copied().filter(|&p| is_dotnet(p)).collect()
        };
        for pid in candidates {
            if self.attached.contains(&pid) {
                continue;
            }
            if (args.eventpipe || args.perf_map) && clrprobe_eventpipe::ipc::find_socket(pid).is_err() {
                let n = self.waiting.entry(pid).or_insert(0);
                *n += 1;
                if *n < SOCKET_WAIT_POLLS && alive(pid) {
                    continue;
                }
            }
            self.waiting.remove(&pid);
            if !self.pids.contains(&pid) {
                self.pids.push(pid);
                resolver.add_process(pid);
            }
            self.attached.insert(pid);
            self.attach(pid, args, summary, bpf.as_deref_mut());
            // The perf map switched on over IPC lists the code JIT-compiled so far: read it now,
            // as a short-lived process may be gone by the next drain.
            resolver.refresh(pid);
        }
    }

    fn attach(&mut self, pid: u32, args: &RecordArgs, summary: &mut RecordSummary, bpf: Option<&mut BpfSampler>) {
        let kinds = args.kinds;
        let mut perf_map_names = false;
        if args.perf_map {
            let g = PerfMapGuard::ensure(pid);
            perf_map_names = matches!(g.state, PerfMapState::AlreadyOn | PerfMapState::EnabledByClrprobe);
            summary.perf_maps.push((pid, g.state.clone()));
            self.guards.push(g);
        }
        let mut session = false;
        if args.eventpipe {
            let keywords = kind_keywords(kinds.events());
            let mut config = session_config(keywords, kinds.alloc || !perf_map_names);
            config.circular_buffer_mb = EVENTPIPE_BUFFER_MB;
            summary.eventpipe_providers.push((pid, super::clr_session::providers_spec(&config)));
            match RuntimeSession::start(pid, &config, kinds.events()) {
                Ok(s) => {
                    self.sessions.push(s);
                    session = true;
                }
                Err(e) => summary.warnings.push(format!("no EventPipe session for {pid}: {e}")),
            }
        }
        // The uprobe traps at every throw: placed only when asked for, or when EventPipe does
        // not deliver the exceptions; priced first.
        if kinds.exceptions
            && (args.cxa_throw || !session)
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

    /// With `--all` the recording never ends by itself (only by duration or Ctrl-C);
    /// otherwise it ends when every target has exited.
    pub fn all_exited(&self) -> bool {
        !self.all && self.pids.iter().all(|&p| !alive(p))
    }
}
