//! What to tell the user about named targets that never got the .NET set-up: not a .NET
//! process at all, or a .NET process whose diagnostics socket is missing.
use crate::record::{RecordSummary, is_dotnet};

/// A named target as it was when the recording started.
#[derive(Debug, Clone)]
pub struct NamedTarget {
    pub pid: u32,
    pub comm: String,
    pub dotnet: bool,
}

impl NamedTarget {
    pub fn probe(pid: u32) -> Self {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim_end().to_string()).unwrap_or_default();
        Self { pid, comm, dotnet: is_dotnet(pid) }
    }

    /// Said before recording: the target is not .NET (if it loads the runtime later, it is set
    /// up then and the summary says nothing more).
    /// A pid that does not exist gets none: the recording's own error says so, once.
    pub fn early_note(&self) -> Option<String> {
        (!self.dotnet && std::path::Path::new(&format!("/proc/{}", self.pid)).exists()).then(|| self.not_dotnet())
    }

    fn not_dotnet(&self) -> String {
        format!("PID {} ({}) is not a .NET process: recording native CPU only", self.pid, self.comm)
    }
}

/// One warning per named target that was never set up (no perf map, no EventPipe session).
pub fn warnings(targets: &[NamedTarget], summary: &RecordSummary, wanted_setup: bool) -> Vec<String> {
    if !wanted_setup {
        return Vec::new();
    }
    targets
        .iter()
        .filter(|t| !summary.perf_maps.iter().any(|(p, _)| *p == t.pid) && !summary.eventpipe.iter().any(|e| e.0 == t.pid))
        .map(|t| {
            if t.dotnet || is_dotnet(t.pid) {
                format!(
                    "PID {} ({}) is a .NET process but its diagnostics socket was not found (deleted, or DOTNET_EnableDiagnostics=0): its JIT-compiled frames are not named",
                    t.pid, t.comm
                )
            } else {
                t.not_dotnet()
            }
        })
        .collect()
}
