//! Perf maps switched on over IPC (EnablePerfMap, .NET 8+) when the target has none, and
//! switched off with the files removed at the end if clrprobe turned them on.
use std::{path::PathBuf, time::Duration};

use clrprobe_eventpipe::ipc::{Client, IpcError, PerfMapType, ServerError};
use clrprobe_symbolizer::target_file::{self, Owner};

use crate::lifecycle::state::{self, LeaveError, Member, Record, Switched};

/// The pid as the target sees it (last NSpid entry), for file names inside its /tmp.
pub fn namespaced_pid(pid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("NSpid:"))
                .and_then(|l| l.split_whitespace().last().and_then(|p| p.parse().ok()))
        })
        .unwrap_or(pid)
}

/// The perf map path of `pid`, reached through its root (other mount namespaces work).
pub fn perf_map_path(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root/tmp/perf-{}.map", namespaced_pid(pid)))
}

/// How JIT code of a process gets its names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PerfMapState {
    /// The target already wrote a perf map (DOTNET_PerfMapEnabled): left as it is.
    AlreadyOn,
    /// clrprobe switched it on over IPC; it is switched off and removed at the end.
    EnabledByClrprobe,
    /// The runtime has no EnablePerfMap (before .NET 8): JIT code is named from the
    /// EventPipe method events and rundown instead.
    Unsupported,
    /// Switching it on failed for another reason (named); the rundown names JIT code.
    Failed(String),
}

/// Restores the target's perf-map state on drop. With the state directory (as root), the
/// switch is shared with every other clrprobe on the target and survives clrprobe's death
/// ([`crate::lifecycle`]): the map goes off when the last user leaves, or when the guardian
/// or the next clrprobe finds nobody left.
pub struct PerfMapGuard {
    pid: u32,
    pub state: PerfMapState,
    /// Our share of the target's entry in the state directory.
    member: Option<Member>,
    /// Without a state directory: what to switch off and remove ourselves.
    fallback: Option<Record>,
}

/// Bound of EnablePerfMap (a stopped target does not answer).
const ENABLE_TIMEOUT: Duration = Duration::from_secs(2);

impl PerfMapGuard {
    /// Switches the perf map of `pid` on over IPC unless it is on already.
    pub fn ensure(pid: u32) -> Self {
        Self::ensure_with(pid, Switched::Ipc)
    }

    /// A program clrprobe launched (or its child): the map is on through the environment it
    /// was given; it is switched off and its files (jitdump too) removed in the end.
    pub fn launched(pid: u32) -> Self {
        Self::ensure_with(pid, Switched::Env)
    }

    fn ensure_with(pid: u32, how: Switched) -> Self {
        let dir = match crate::lifecycle::state_dir() {
            Ok(d) => d,
            Err(why) => {
                log::warn!("no shared perf-map state ({why}): switching off only at a normal end");
                let (state, record) = match plan(pid, how) {
                    Plan::Switch(r) => (switch_on(pid, r.how), Some(r)),
                    Plan::Is(state) => (state, None),
                };
                let fallback = record.filter(|_| state == PerfMapState::EnabledByClrprobe);
                return Self { pid, state, member: None, fallback };
            }
        };
        // Decided and recorded under the state lock; switched on after it (IPC may be slow).
        let joined = state::join(dir, pid, |m| match plan(pid, how) {
            Plan::Switch(r) => match m.write(r.clone()) {
                Ok(()) => Ok(r),
                Err(e) => Err(PerfMapState::Failed(format!("recording the state: {e}"))),
            },
            Plan::Is(state) => Err(state),
        });
        match joined {
            Ok((member, None)) => Self { pid, state: PerfMapState::EnabledByClrprobe, member: Some(member), fallback: None },
            Ok((_, Some(Err(state)))) => Self { pid, state, member: None, fallback: None },
            Ok((mut member, Some(Ok(record)))) => {
                let state = switch_on(pid, record.how);
                if state == PerfMapState::Unsupported {
                    let _ = member.clear(dir); // nothing on: no entry to keep
                    return Self { pid, state, member: None, fallback: None };
                }
                // Kept even when switching on failed: it may have happened late (a slow runtime).
                Self { pid, state, member: Some(member), fallback: None }
            }
            Err(e) => Self { pid, state: PerfMapState::Failed(e.to_string()), member: None, fallback: None },
        }
    }

    /// Leaves the target: the last clrprobe on it switches the map off and removes its files.
    /// Idempotent.
    pub fn restore(&mut self) -> Result<(), LeaveError> {
        if let Some(m) = self.member.take() {
            let dir = crate::lifecycle::state_dir().map_err(|_| LeaveError::Busy)?;
            return m.leave(dir).map(|_| ());
        }
        match self.fallback.take() {
            Some(r) => state::teardown(&r),
            None => Ok(()),
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }
}

/// What to do for a target whose map no clrprobe has switched on.
enum Plan {
    /// Switch it on (over IPC), or it is on by our launch environment: record this.
    Switch(Record),
    /// Nothing to switch: this is the state.
    Is(PerfMapState),
}

fn plan(pid: u32, how: Switched) -> Plan {
    let Some(start_time) = state::start_time(pid) else { return Plan::Is(PerfMapState::Failed(format!("process {pid} is gone"))) };
    if how == Switched::Ipc {
        let owner = Owner::of_pid(pid).unwrap_or(Owner::root());
        match target_file::probe(&perf_map_path(pid), owner) {
            Ok(true) => return Plan::Is(PerfMapState::AlreadyOn),
            // An earlier process's map (same pid): the runtime rewrites it when switched on.
            Err(stale) if stale.is_stale() => {}
            // A link, FIFO or another user's file where the map goes: not used, not replaced.
            Err(refused) => return Plan::Is(PerfMapState::Failed(refused.to_string())),
            Ok(false) => {}
        }
    }
    Plan::Switch(Record { pid, start_time, how, files: state::perf_map_files(pid, how == Switched::Env) })
}

/// Switches the map on over IPC (a launched program has it on by its environment already).
fn switch_on(pid: u32, how: Switched) -> PerfMapState {
    if how == Switched::Env {
        return PerfMapState::EnabledByClrprobe;
    }
    match Client::for_pid(pid).map(|c| c.with_timeout(ENABLE_TIMEOUT)).and_then(|c| c.enable_perf_map(PerfMapType::PerfMap)) {
        Ok(()) => PerfMapState::EnabledByClrprobe,
        Err(IpcError::Server(ServerError::UnknownCommand)) => PerfMapState::Unsupported,
        Err(e) => PerfMapState::Failed(e.to_string()),
    }
}

impl Drop for PerfMapGuard {
    fn drop(&mut self) {
        let _ = self.restore();
    }
}
