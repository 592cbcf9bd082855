//! HTTP requests from the BCL's networking EventSources, and the generic summary of any
//! EventSource named with `--providers` (the OS-independent parts: collection from EventPipe
//! events, the per-request JSON lines, text tables; `record` wires them in on Linux).
mod collect;
mod line;
mod text;

pub use collect::{NetCollector, NetOutcome, replay};
pub use line::{HttpLine, HttpReport, Meanwhile, PhasesMs, SetupLine};
pub use text::{SLOWEST, generic_text, report_text, summary_text};

use std::{
    io::{BufRead, Write},
    path::{Path, PathBuf},
};

use clrprobe_eventpipe::ipc::{Level, ProviderConfig};
use clrprobe_pipeline::http::providers;

/// The providers `--http` enables: the four networking sources at Verbose with every keyword
/// (as `dotnet-trace --providers System.Net.Http` does), and TplEventSource with only
/// TasksFlowActivityIds, which makes the runtime give Start/Stop events activity ids.
pub fn http_providers() -> Vec<ProviderConfig> {
    let mut v: Vec<ProviderConfig> = providers::NET
        .iter()
        .map(|n| ProviderConfig::new(n, u64::MAX, Level::Verbose))
        .collect();
    v.push(ProviderConfig::new(
        providers::TPL,
        providers::TASKS_FLOW_ACTIVITY_IDS,
        Level::Informational,
    ));
    v
}

/// Adds `extra` to `into`, merging entries of the same provider (keywords OR'ed, the more
/// verbose level, arguments appended).
pub fn merge_providers(into: &mut Vec<ProviderConfig>, extra: &[ProviderConfig]) {
    for p in extra {
        match into.iter_mut().find(|q| q.name == p.name) {
            Some(q) => {
                q.keywords |= p.keywords;
                q.level = q.level.max(p.level);
                q.arguments.extend(p.arguments.iter().cloned());
            }
            None => into.push(p.clone()),
        }
    }
}

/// `PREFIX.http.jsonl`.
pub fn jsonl_path(prefix: &Path) -> PathBuf {
    PathBuf::from(format!("{}.http.jsonl", prefix.display()))
}

/// Writes one JSON object per request, safely (no link followed, renamed into place whole;
/// see `clrprobe_profile::safe_file`).
pub fn write_jsonl(path: &Path, reports: &[HttpReport]) -> std::io::Result<()> {
    clrprobe_profile::safe_file::write_file(path, |w| {
        for r in reports {
            for line in &r.requests {
                serde_json::to_writer(&mut *w, line)?;
                w.write_all(b"\n")?;
            }
        }
        Ok(())
    })
    .map_err(std::io::Error::other)
}

/// Reads `PREFIX.http.jsonl`.
pub fn read_jsonl(path: &Path) -> std::io::Result<Vec<HttpLine>> {
    let f = std::fs::File::open(path)?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let l: HttpLine = serde_json::from_str(&line).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} line {}: {e}", path.display(), i + 1),
            )
        })?;
        out.push(l);
    }
    Ok(out)
}

/// The `PREFIX.http.jsonl` next to a profile file (`PREFIX.pb.gz`, `PREFIX.cpu.pb.gz`, …).
pub fn companion_of(profile: &Path) -> Option<PathBuf> {
    let s = profile.to_str()?;
    let base = s
        .strip_suffix(".pb.gz")
        .or_else(|| s.strip_suffix(".pb"))
        .unwrap_or(s);
    let mut candidates = vec![base.to_string()];
    if let Some((pre, _kind)) = base.rsplit_once('.') {
        candidates.push(pre.to_string());
    }
    candidates
        .into_iter()
        .map(|c| jsonl_path(Path::new(&c)))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_merge_by_name() {
        let mut v = http_providers();
        assert_eq!(v.len(), 5);
        merge_providers(
            &mut v,
            &[
                ProviderConfig::new(providers::TPL, 0x2, Level::Verbose),
                ProviderConfig::new("X", 1, Level::Error),
            ],
        );
        assert_eq!(v.len(), 6);
        let tpl = v.iter().find(|p| p.name == providers::TPL).unwrap();
        assert_eq!((tpl.keywords, tpl.level), (0x82, Level::Verbose));
    }

    #[test]
    fn companion_next_to_either_pprof_name() {
        let dir = clrprobe_tests::scratch_dir("http-companion");
        let j = dir.join("run.http.jsonl");
        write_jsonl(&j, &[]).unwrap();
        assert_eq!(
            companion_of(&dir.join("run.pb.gz")).as_deref(),
            Some(j.as_path())
        );
        assert_eq!(
            companion_of(&dir.join("run.cpu.pb.gz")).as_deref(),
            Some(j.as_path())
        );
        assert_eq!(companion_of(&dir.join("other.pb.gz")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
