//! Finding .NET (CoreCLR) processes on the host: every pid in /proc with libcoreclr mapped,
//! including processes in other pid and mount namespaces (containers). Each one is described
//! as `clrprobe ps` shows it: namespaced pid, runtime version, command line, container, perf
//! map state.
use std::{path::Path, time::Duration};

use serde::Serialize;

use clrprobe_eventpipe::ipc::Client;

use crate::record::{namespaced_pid, perf_map_path};

/// The libcoreclr mapped by `pid`, as the path the process sees (inside its root).
pub fn libcoreclr_path(pid: u32) -> Option<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    // Executable mappings only: a profiler reading the file (mmap for ELF parsing) is not .NET.
    maps.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let perms = f.nth(1)?;
        let path = f.nth(3)?;
        (perms.contains('x') && path.ends_with("/libcoreclr.so")).then(|| path.to_string())
    })
}

/// Every live .NET process on the host, in pid order (clrprobe itself excluded).
pub fn dotnet_pids() -> Vec<u32> {
    let me = std::process::id();
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|&p| p != me && crate::record::alive(p) && libcoreclr_path(p).is_some())
        .collect();
    pids.sort_unstable();
    pids
}

/// Where a runtime version came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VersionSource {
    /// ProcessInfo2 over the diagnostics socket (.NET 5+).
    ProcessInfo2,
    /// The version directory of the mapped libcoreclr (…/Microsoft.NETCore.App/3.1.23/).
    LibraryPath,
}

/// One .NET process as `clrprobe ps` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct DotnetProcess {
    pub pid: u32,
    /// The pid inside its own pid namespace (equal to `pid` outside containers).
    pub ns_pid: u32,
    pub comm: String,
    pub cmdline: String,
    pub runtime_version: Option<String>,
    pub version_source: Option<VersionSource>,
    pub libcoreclr: Option<String>,
    /// Its pid or mount namespace differs from ours.
    pub container: bool,
    /// A perf map file exists for it (`/tmp/perf-NSPID.map` inside its root).
    pub perf_map: bool,
    /// Its diagnostics socket answered.
    pub ipc: bool,
}

/// The version directory in a runtime path: `…/Microsoft.NETCore.App/3.1.23/libcoreclr.so`.
pub fn version_from_path(path: &str) -> Option<String> {
    let dir = Path::new(path).parent()?.file_name()?.to_str()?;
    let first = dir.split('.').next()?;
    (!first.is_empty() && first.bytes().all(|b| b.is_ascii_digit()) && dir.contains('.')).then(|| dir.to_string())
}

fn namespace(pid: &str, kind: &str) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).ok()
}

/// Does `pid` live in another pid or mount namespace than clrprobe?
pub fn in_container(pid: u32) -> bool {
    ["pid", "mnt"].iter().any(|k| namespace(&pid.to_string(), k) != namespace("self", k))
}

/// Describes `pid`, or None when it is gone or not .NET. Asks the runtime over IPC for its
/// version (bounded by a short timeout), else reads it from the libcoreclr path.
pub fn describe(pid: u32) -> Option<DotnetProcess> {
    let libcoreclr = libcoreclr_path(pid)?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim_end().to_string()).unwrap_or_default();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect::<Vec<_>>().join(" ")
        })
        .unwrap_or_default();
    let info = Client::for_pid(pid).map(|c| c.with_timeout(Duration::from_secs(2))).and_then(|c| c.process_info2());
    let ipc = info.is_ok() || Client::for_pid(pid).is_ok();
    let (runtime_version, version_source) = match info {
        Ok(i) if !i.clr_product_version.is_empty() => {
            let v = i.clr_product_version.split('+').next().unwrap_or_default().to_string();
            (Some(v), Some(VersionSource::ProcessInfo2))
        }
        _ => match version_from_path(&libcoreclr) {
            Some(v) => (Some(v), Some(VersionSource::LibraryPath)),
            None => (None, None),
        },
    };
    Some(DotnetProcess {
        pid,
        ns_pid: namespaced_pid(pid),
        comm,
        cmdline,
        runtime_version,
        version_source,
        libcoreclr: Some(libcoreclr),
        container: in_container(pid),
        perf_map: perf_map_path(pid).exists(),
        ipc,
    })
}


/// Finds .NET processes as they appear, cheaply enough to run four times a second: a pid is
/// checked (its maps read) while it is young — the host loads libcoreclr within its first
/// seconds — and every pid again on a full rescan every few seconds.
pub struct Scanner {
    /// Pids checked and found not .NET, with when they were first seen.
    seen: std::collections::HashMap<u32, std::time::Instant>,
    last_full: Option<std::time::Instant>,
    full_rescan: Duration,
}

/// How long a new process is re-checked on every scan.
const YOUNG: Duration = Duration::from_secs(3);
/// Full rescans (processes that load the runtime late, e.g. native hosts).
const FULL_RESCAN: Duration = Duration::from_secs(5);

impl Default for Scanner {
    fn default() -> Self {
        Self::new()
    }
}

impl Scanner {
    pub fn new() -> Self {
        Self { seen: std::collections::HashMap::new(), last_full: None, full_rescan: FULL_RESCAN }
    }

    /// Rescans every process this often (each rescan reads every process's maps).
    pub fn with_full_rescan(mut self, every: Duration) -> Self {
        self.full_rescan = every;
        self
    }

    /// .NET pids found now (known ones included), clrprobe excluded.
    pub fn scan(&mut self) -> Vec<u32> {
        self.scan_where(|_| true)
    }

    /// [`Scanner::scan`] of the pids `keep` accepts (checked before their maps are read).
    pub fn scan_where(&mut self, keep: impl Fn(u32) -> bool) -> Vec<u32> {
        let me = std::process::id();
        let full = self.last_full.is_none_or(|t| t.elapsed() >= self.full_rescan);
        if full {
            self.last_full = Some(std::time::Instant::now());
        }
        let now = std::time::Instant::now();
        let mut live = std::collections::HashSet::new();
        let mut found = Vec::new();
        for pid in std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        {
            live.insert(pid);
            if pid == me {
                continue;
            }
            let first = *self.seen.entry(pid).or_insert(now);
            if !full && now.duration_since(first) > YOUNG {
                continue;
            }
            if keep(pid) && libcoreclr_path(pid).is_some() && crate::record::alive(pid) {
                found.push(pid);
            }
        }
        // Forget exited pids (a reused pid is new again).
        self.seen.retain(|p, _| live.contains(p));
        found.sort_unstable();
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_comes_from_the_runtime_directory() {
        assert_eq!(
            version_from_path("/root/.cache/dotnet/shared/Microsoft.NETCore.App/3.1.23/libcoreclr.so").as_deref(),
            Some("3.1.23")
        );
        assert_eq!(version_from_path("/usr/lib/libcoreclr.so"), None);
        assert_eq!(version_from_path("libcoreclr.so"), None);
    }

    #[test]
    fn this_test_process_is_not_dotnet_and_not_in_a_container() {
        assert!(describe(std::process::id()).is_none());
        assert!(!in_container(std::process::id()));
    }
}
