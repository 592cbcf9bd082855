//! Perf maps switched on over IPC (EnablePerfMap, .NET 8+) when the target has none, and
//! switched off with the files removed at the end if clrprobe turned them on.
use std::path::PathBuf;

use clrprobe_eventpipe::ipc::{Client, IpcError, PerfMapType, ServerError};
use clrprobe_symbolizer::target_file::{self, Owner};

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

fn perfinfo_path(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root/tmp/perfinfo-{}.map", namespaced_pid(pid)))
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

/// Restores the target's perf-map state on drop.
pub struct PerfMapGuard {
    pid: u32,
    pub state: PerfMapState,
    /// The files to remove, as reachable after the process is gone: through /proc/PID/root
    /// while it lives, and by their own path when it shares our root.
    files: Vec<PathBuf>,
    /// Whose files these may be (only such files are removed).
    owner: Owner,
}

/// Does `pid` see the same root directory as we do?
fn same_root(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(format!("/proc/{pid}/root")), std::fs::metadata("/")) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

impl PerfMapGuard {
    pub fn ensure(pid: u32) -> Self {
        let owner = Owner::of_pid(pid).unwrap_or(Owner { real: 0, effective: 0 });
        let state = match target_file::probe(&perf_map_path(pid), owner) {
            Ok(true) => PerfMapState::AlreadyOn,
            // A link, FIFO or another user's file where the map goes: not used, not replaced.
            Err(refused) => PerfMapState::Failed(refused.to_string()),
            Ok(false) => match Client::for_pid(pid).and_then(|c| c.enable_perf_map(PerfMapType::PerfMap)) {
                Ok(()) => PerfMapState::EnabledByClrprobe,
                Err(IpcError::Server(ServerError::UnknownCommand)) => PerfMapState::Unsupported,
                Err(e) => PerfMapState::Failed(e.to_string()),
            },
        };
        let mut files = vec![perf_map_path(pid), perfinfo_path(pid)];
        if same_root(pid) {
            let ns = namespaced_pid(pid);
            files.push(PathBuf::from(format!("/tmp/perf-{ns}.map")));
            files.push(PathBuf::from(format!("/tmp/perfinfo-{ns}.map")));
        }
        Self { pid, state, files, owner }
    }

    /// Switches the map off and removes its files, if clrprobe switched it on. Idempotent.
    pub fn restore(&mut self) -> Result<(), IpcError> {
        if self.state != PerfMapState::EnabledByClrprobe {
            return Ok(());
        }
        self.state = PerfMapState::AlreadyOn; // never twice
        let disabled = Client::for_pid(self.pid).and_then(|c| c.disable_perf_map());
        for f in &self.files {
            // Only the runtime's own files: never a link or another user's file put there.
            if let Err(e) = target_file::remove(f, self.owner) {
                log::warn!("perf map of {}: {e}", self.pid);
            }
        }
        match disabled {
            // The process is gone: nothing is left switched on.
            Err(_) if !super::alive(self.pid) => Ok(()),
            Err(IpcError::NoSuchProcess { .. } | IpcError::NoSocket { .. }) => Ok(()),
            other => other,
        }
    }
}

impl Drop for PerfMapGuard {
    fn drop(&mut self) {
        let _ = self.restore();
    }
}
