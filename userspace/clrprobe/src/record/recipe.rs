//! The attach recipe every front end (`record`, `top`, `agent`) follows for a .NET target,
//! in one place: wait for its diagnostics socket (a runtime that just started may not have
//! one yet), then [`set_up`]: wait until its runtime has started and no other clrprobe sets it
//! up, switch its perf map on, then open one EventPipe session configured from the kinds asked
//! for and whether the perf map names JIT code ([`session`]).
use std::{collections::HashMap, sync::atomic::AtomicBool, time::Instant};

use clrprobe_eventpipe::ipc::SessionConfig;
use clrprobe_pipeline::Kinds;

use super::{
    PerfMapGuard, PerfMapState, alive,
    clr_session::{EXCEPTION_KEYWORD, kind_keywords, session_config},
};

/// Per-process EventPipe buffer (the session's circular buffer in the target, in MB).
pub const EVENTPIPE_BUFFER_MB: u32 = 64;

/// Polls to wait for a new runtime's diagnostics socket before setting it up anyway.
pub const SOCKET_WAIT_POLLS: u32 = 20;

/// Discovery's wait for diagnostics sockets.
#[derive(Debug, Default)]
pub struct SocketWait {
    polls: HashMap<u32, u32>,
}

impl SocketWait {
    /// Is `pid` ready to be set up: its socket is there, or nothing needs it, or it was
    /// waited for long enough (or it exited)?
    pub fn ready(&mut self, pid: u32, needs_socket: bool) -> bool {
        if needs_socket && clrprobe_eventpipe::ipc::find_socket(pid).is_err() {
            let n = self.polls.entry(pid).or_insert(0);
            *n += 1;
            if *n < SOCKET_WAIT_POLLS && alive(pid) {
                return false;
            }
        }
        self.polls.remove(&pid);
        true
    }

    /// Forgets the processes `keep` says no to (exited ones: the table stays bounded).
    pub fn retain(&mut self, mut keep: impl FnMut(&u32, &mut u32) -> bool) {
        self.polls.retain(|p, n| keep(p, n));
    }
}

/// What a front end switches on in a .NET target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Switch the perf map on over IPC (where the target has none).
    pub perf_map: bool,
    /// The environment switched the perf map on already (a tree clrprobe started).
    pub launched: bool,
}

/// How [`set_up`] waits before its IPC.
#[derive(Debug, Clone, Copy)]
pub enum Wait<'a> {
    /// Until the runtime has started (bounded) and no other clrprobe sets it up; given up once
    /// the front end has ended. For set-ups on their own thread (`record`, `top`).
    Started(&'a AtomicBool),
    /// Only for another clrprobe's set-up, until the deadline: the caller checked the
    /// runtime had started (the agent's discovery, which must not wait long).
    Lock(Instant),
}

/// What [`set_up`] switched on.
pub struct SetUp<S> {
    /// The perf map switched on (restored when dropped).
    pub guard: Option<PerfMapGuard>,
    /// Does the perf map name JIT code?
    pub perf_map_names: bool,
    /// What the front end started once the perf map was on (its session, its own reader).
    pub session: S,
}

/// The one set-up of a .NET target for every front end: waits as `wait` says, takes the
/// set-up lock, switches the perf map on, then `start(perf_map_names)` opens the front end's
/// EventPipe session if it wants one (configured with [`session`]); the lock is let go once
/// both are done.
pub fn set_up<S>(pid: u32, plan: Plan, wait: Wait<'_>, start: impl FnOnce(bool) -> S) -> Result<SetUp<S>, crate::lifecycle::setup::NotSetUp> {
    // No IPC before the runtime has started, nor while another clrprobe sets it up.
    let _setting_up = match wait {
        Wait::Started(ended) => crate::lifecycle::setup::prepare(pid, ended)?,
        Wait::Lock(deadline) => crate::lifecycle::setup::lock(pid, deadline)?,
    };
    let (guard, perf_map_names) = match plan.perf_map.then(|| perf_map(pid, plan.launched)) {
        Some((g, names)) => (Some(g), names),
        None => (None, false),
    };
    let session = start(perf_map_names);
    Ok(SetUp { guard, perf_map_names, session })
}

/// Switches the perf map on (`launched`: the environment already did, in a tree clrprobe
/// started). Returns the guard and whether the map names JIT code.
pub fn perf_map(pid: u32, launched: bool) -> (PerfMapGuard, bool) {
    let g = if launched { PerfMapGuard::launched(pid) } else { PerfMapGuard::ensure(pid) };
    let names = matches!(g.state, PerfMapState::AlreadyOn | PerfMapState::EnabledByClrprobe);
    (g, names)
}

/// The EventPipe session of a target: the runtime's events for `kinds`, method events at
/// Verbose when allocations are asked for or no perf map names JIT code, the rundown when the
/// front end names code after the session ends (`record`, the agent; not `top`).
pub fn session(kinds: Kinds, perf_map_names: bool, rundown: bool) -> SessionConfig {
    let mut config = session_config(kind_keywords(kinds), kinds.alloc || !perf_map_names);
    config.circular_buffer_mb = EVENTPIPE_BUFFER_MB;
    if !rundown {
        config.request_rundown = false;
        config.providers.retain(|p| p.name != clrprobe_eventpipe::ipc::RUNDOWN_PROVIDER);
    }
    config
}

/// The allocation-only session of the agent's slices: the runtime provider's GC keyword at
/// Verbose (AllocationTick, with a stack), no rundown (it opens and closes every few seconds).
/// Its other GC events (the first session has them) are dropped by its reader.
pub fn alloc_session() -> SessionConfig {
    use clrprobe_eventpipe::ipc::{Level, ProviderConfig, RUNTIME_PROVIDER};
    SessionConfig {
        circular_buffer_mb: EVENTPIPE_BUFFER_MB,
        request_rundown: false,
        request_stackwalk: true,
        providers: vec![ProviderConfig::new(RUNTIME_PROVIDER, kind_keywords(Kinds { alloc: true, exceptions: false, contention: false }) & !0x10000, Level::Verbose)],
    }
}

/// The exceptions' own session (.NET 5+, beside the process's own): the Exception keyword at
/// Error, where the runtime writes ExceptionThrown and nothing else of that keyword. At the
/// Informational level the process's own session needs (GC, contention, loader), the same
/// keyword also brings ExceptionCatchStart/Stop, ExceptionFinallyStart/Stop, ExceptionFilterStart/Stop
/// and ExceptionThrownStop — four events or more per throw, each written with a stack walk in
/// the target, all of them dropped by clrprobe. No rundown (the process's own session has it).
/// With a stack walk per throw: .NET 8.0.4 refuses the CollectTracing versions that can turn
/// it off (only `DOTNET_EventPipeEnableStackwalk=0` in the target's environment does, for every
/// session), and without it ExceptionThrown still cost the Bench throw app 1.2 % (README, round 16).
pub fn exceptions_session() -> SessionConfig {
    use clrprobe_eventpipe::ipc::{Level, ProviderConfig, RUNTIME_PROVIDER};
    SessionConfig {
        circular_buffer_mb: EVENTPIPE_BUFFER_MB,
        request_rundown: false,
        request_stackwalk: true,
        providers: vec![ProviderConfig::new(RUNTIME_PROVIDER, EXCEPTION_KEYWORD | 0x4000_0000, Level::Error)],
    }
}

/// [`session`] for a process whose exceptions come from [`exceptions_session`]: the same,
/// without the Exception keyword (the Threading keyword and the stacks stay).
pub fn session_without_exceptions(kinds: Kinds, perf_map_names: bool, rundown: bool) -> SessionConfig {
    let mut config = session(kinds, perf_map_names, rundown);
    for p in config.providers.iter_mut().filter(|p| p.name == clrprobe_eventpipe::ipc::RUNTIME_PROVIDER) {
        p.keywords &= !EXCEPTION_KEYWORD;
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprobe_eventpipe::ipc::{Level, RUNTIME_PROVIDER};

    #[test]
    fn one_config_for_every_front_end() {
        // top: every kind, no rundown, Verbose (AllocationTick).
        let top = session(Kinds::ALL, true, false);
        assert!(!top.request_rundown && top.request_stackwalk && top.circular_buffer_mb == EVENTPIPE_BUFFER_MB);
        assert_eq!(top.providers.len(), 1);
        assert_eq!((top.providers[0].name.as_str(), top.providers[0].level), (RUNTIME_PROVIDER, Level::Verbose));
        // record/agent without allocations and with perf-map names: Informational, rundown.
        let rec = session(Kinds { alloc: false, exceptions: true, contention: true }, true, true);
        assert!(rec.request_rundown && rec.providers.len() == 2);
        assert_eq!(rec.providers[0].level, Level::Informational);
        // No perf map names JIT code: method events at Verbose.
        assert_eq!(session(Kinds { alloc: false, exceptions: false, contention: false }, false, true).providers[0].level, Level::Verbose);
    }

    #[test]
    fn exceptions_apart_at_error_level_and_nowhere_else() {
        let ex = exceptions_session();
        assert!(!ex.request_rundown && ex.request_stackwalk);
        assert_eq!(ex.providers.len(), 1);
        assert_eq!((ex.providers[0].name.as_str(), ex.providers[0].level), (RUNTIME_PROVIDER, Level::Error));
        assert_eq!(ex.providers[0].keywords & EXCEPTION_KEYWORD, EXCEPTION_KEYWORD);
        // The process's own session keeps every other keyword of the same kinds.
        let kinds = Kinds { alloc: false, exceptions: true, contention: true };
        let (with, without) = (session(kinds, true, true), session_without_exceptions(kinds, true, true));
        assert_eq!(with.providers[0].keywords & !EXCEPTION_KEYWORD, without.providers[0].keywords);
        assert_eq!(without.providers[0].keywords & EXCEPTION_KEYWORD, 0);
        assert_eq!((with.providers[1..].len(), with.providers[0].level), (without.providers[1..].len(), without.providers[0].level));
    }
}
