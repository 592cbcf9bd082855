//! Writing a recorded profile in the formats people open. Each file is written on its own: a
//! failure (full disk, permissions) is reported by path and does not stop the others.
use std::path::{Path, PathBuf};

use clrprobe_profile::safe_file::{OutputDir, SafeFileError};
use clrprobe_profile::{Profile, ProfileError, events, firefox, folded, pprof, speedscope, svg};

pub use crate::formats::Format;

/// One file written, or the error that stopped it.
#[derive(Debug)]
pub struct Written {
    pub path: PathBuf,
    pub result: Result<(), ProfileError>,
}

/// Suffixes `-o` may end with that name a file rather than a prefix (longest first).
const FILE_SUFFIXES: &[&str] = &[
    ".speedscope.json",
    ".firefox.json",
    ".events.json",
    ".pb.gz",
    ".folded",
    ".json",
    ".svg",
    ".pb",
];

/// What `-o` names: the prefix of every file, and the exact file it named when it ends like
/// one (`-o cpu.pb.gz` → prefix `cpu`, file `cpu.pb.gz`). A name ending in `/`, or an existing
/// directory, is a directory: the files go there as `DIR/DEFAULT.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputName {
    pub prefix: PathBuf,
    /// The file named, with the suffix it ends with.
    pub file: Option<(PathBuf, &'static str)>,
}

impl OutputName {
    pub fn parse(output: &Path, default_name: &str) -> Self {
        let s = output.to_string_lossy();
        if s.ends_with('/') || output.is_dir() {
            return OutputName { prefix: output.join(default_name), file: None };
        }
        for suffix in FILE_SUFFIXES {
            if let Some(stem) = s.strip_suffix(suffix).filter(|stem| !stem.is_empty() && !stem.ends_with('/')) {
                // `x.cpu.pb.gz` → prefix `x`: the kind is ours to add.
                let stem = clrprobe_profile::pprof::go::FILE_KINDS
                    .iter()
                    .chain(KIND_NAMES)
                    .find_map(|k| stem.strip_suffix(&format!(".{k}")))
                    .unwrap_or(stem);
                return OutputName { prefix: PathBuf::from(stem), file: Some((output.to_path_buf(), suffix)) };
            }
        }
        OutputName { prefix: output.to_path_buf(), file: None }
    }
}

/// clrprobe's kind names (as in `PREFIX.KIND.folded`).
const KIND_NAMES: &[&str] = &[
    clrprobe_profile::kinds::CPU,
    clrprobe_profile::kinds::OFF_CPU,
    clrprobe_profile::kinds::ALLOC_BYTES,
    clrprobe_profile::kinds::ALLOC_COUNT,
    clrprobe_profile::kinds::EXCEPTIONS,
    clrprobe_profile::kinds::CONTENTION_NS,
    clrprobe_profile::kinds::CONTENTION_COUNT,
];

/// Writes every requested format under `prefix`; returns one entry per file attempted.
pub fn write_all(profile: &Profile, prefix: &Path, formats: &[Format]) -> Vec<Written> {
    write_named(profile, &OutputName { prefix: prefix.to_path_buf(), file: None }, formats)
}

/// The files one format would write: (path suffix after the prefix, what to write).
enum Job {
    /// One Go-style file kind, cut out of the profile only when it is written.
    Pprof(&'static str),
    Events,
    Folded(usize),
    Svg(usize, String),
    Firefox(usize),
    Speedscope,
}

/// Like [`write_all`]; when `-o` named one file and exactly one file is written in that
/// format, it gets that exact name.
pub fn write_named(profile: &Profile, name: &OutputName, formats: &[Format]) -> Vec<Written> {
    let mut out = Vec::new();
    let prefix = &name.prefix;
    let kinds: Vec<(usize, String)> = profile
        .sample_types()
        .iter()
        .enumerate()
        .filter(|(i, _)| profile.total(*i) > 0)
        .map(|(i, t)| (i, t.kind.clone()))
        .collect();
    let title = prefix.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut jobs: Vec<(String, Job)> = Vec::new();
    for f in formats {
        match f {
            Format::Pprof => {
                for kind in pprof::go::split_kinds(profile) {
                    jobs.push((format!(".{kind}.pb.gz"), Job::Pprof(kind)));
                }
                jobs.push((".events.json".into(), Job::Events));
            }
            Format::Folded => jobs.extend(kinds.iter().map(|(i, k)| (format!(".{k}.folded"), Job::Folded(*i)))),
            Format::Svg => jobs.extend(kinds.iter().map(|(i, k)| (format!(".{k}.svg"), Job::Svg(*i, k.clone())))),
            Format::Firefox => {
                jobs.extend(kinds.iter().map(|(i, k)| (format!(".{k}.firefox.json"), Job::Firefox(*i))))
            }
            Format::Speedscope => jobs.push((".speedscope.json".into(), Job::Speedscope)),
        }
    }
    // `-o exact.pb.gz` with one pprof file: that name.
    let exact = name.file.as_ref().and_then(|(file, suffix)| {
        let matching: Vec<usize> = jobs
            .iter()
            .enumerate()
            .filter(|(_, (s, _))| s.ends_with(suffix) && !s.ends_with(".events.json"))
            .map(|(i, _)| i)
            .collect();
        (matching.len() == 1).then(|| (matching[0], file.clone()))
    });
    for (n, (suffix, job)) in jobs.into_iter().enumerate() {
        let t0 = std::time::Instant::now();
        let path = match &exact {
            Some((i, file)) if *i == n => file.clone(),
            _ => PathBuf::from(format!("{}{suffix}", prefix.display())),
        };
        let result = match job {
            Job::Pprof(kind) => match pprof::go::split_kind(profile, kind) {
                Ok(Some(p)) => pprof::write_file(&p, &path),
                Ok(None) => continue,
                Err(e) => Err(e),
            },
            Job::Events => events::write_file(&companion(profile), &path),
            Job::Folded(i) => folded::write_file(profile, i, &folded::FoldedOptions { annotate_kinds: false, ..Default::default() }, &path),
            Job::Svg(i, kind) => svg::write_file(profile, i, &format!("{title} {kind}"), &path),
            Job::Firefox(i) => firefox::write_file(profile, i, "clrprobe", &path),
            Job::Speedscope => speedscope::write_file(profile, &title, speedscope::Grouping::default(), &path),
        };
        log::debug!("outputs: {} written in {:?}", path.display(), t0.elapsed());
        out.push(Written { path, result });
    }
    out
}

/// The companion `PREFIX.events.json`: the markers and each process's event report (kept in
/// the in-memory profile as `clrprobe:report PID JSON` comments).
pub fn companion(profile: &Profile) -> events::Events {
    let mut e = events::Events::new(profile.start_time_ns(), profile.duration_ns());
    e.markers = profile.markers().to_vec();
    e.reports = profile
        .comments()
        .iter()
        .filter_map(|c| c.strip_prefix(crate::report::REPORT_COMMENT))
        .filter_map(|rest| {
            let (pid, json) = rest.split_once(' ')?;
            Some((pid.parse().ok()?, serde_json::from_str(json).ok()?))
        })
        .collect();
    e
}

/// Opens (creating it if missing) and checks the directory outputs named `prefix*` go to, so
/// that a bad `-o` fails before recording starts. Under sudo the outputs (and a directory
/// created here) belong to the invoking user; see [`clrprobe_profile::safe_file`].
pub fn prepare(prefix: &Path) -> Result<(), SafeFileError> {
    let dir = OutputDir::of(prefix)?;
    // Temporary files of a clrprobe killed while writing these outputs (SIGKILL, OOM).
    if let Some(base) = prefix.file_name() {
        for name in dir.remove_stale_temps(base) {
            log::info!("removed {} (left by a clrprobe killed while writing)", dir.path().join(name).display());
        }
    }
    Ok(())
}

impl Written {
    /// One line for the user: the error names the path once.
    pub fn error_line(&self) -> Option<String> {
        let e = self.result.as_ref().err()?;
        Some(match e {
            ProfileError::Write { .. } | ProfileError::Output(_) => e.to_string(),
            other => format!("could not write {}: {other}", self.path.display()),
        })
    }
}
