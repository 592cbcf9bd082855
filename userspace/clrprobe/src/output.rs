//! Writing a recorded profile in the formats people open. Each file is written on its own: a
//! failure (full disk, permissions) is reported by path and does not stop the others.
use std::path::{Path, PathBuf};

use clrprobe_profile::safe_file::{OutputDir, SafeFileError};
use clrprobe_profile::{Profile, ProfileError, firefox, folded, pprof, speedscope, svg};

pub use crate::formats::Format;

/// One file written, or the error that stopped it.
#[derive(Debug)]
pub struct Written {
    pub path: PathBuf,
    pub result: Result<(), ProfileError>,
}

/// Writes every requested format; returns one entry per file attempted.
pub fn write_all(profile: &Profile, prefix: &Path, formats: &[Format]) -> Vec<Written> {
    let mut out = Vec::new();
    let name = |suffix: &str| PathBuf::from(format!("{}{suffix}", prefix.display()));
    let kinds: Vec<(usize, String)> = profile
        .sample_types()
        .iter()
        .enumerate()
        .filter(|(i, _)| profile.total(*i) > 0)
        .map(|(i, t)| (i, t.kind.clone()))
        .collect();
    let title = prefix.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    for f in formats {
        match f {
            Format::Pprof => {
                let path = name(".pb.gz");
                out.push(Written { result: pprof::write_file(profile, &path), path });
            }
            Format::Folded => {
                for (i, kind) in &kinds {
                    let path = name(&format!(".{kind}.folded"));
                    let result = folded::write_file(profile, *i, &folded::FoldedOptions { annotate_kinds: false, ..Default::default() }, &path);
                    out.push(Written { path, result });
                }
            }
            Format::Svg => {
                for (i, kind) in &kinds {
                    let path = name(&format!(".{kind}.svg"));
                    let result = svg::write_file(profile, *i, &format!("{title} {kind}"), &path);
                    out.push(Written { path, result });
                }
            }
            Format::Firefox => {
                for (i, kind) in &kinds {
                    let path = name(&format!(".{kind}.firefox.json"));
                    let result = firefox::write_file(profile, *i, "clrprobe", &path);
                    out.push(Written { path, result });
                }
            }
            Format::Speedscope => {
                let path = name(".speedscope.json");
                let result = speedscope::write_file(profile, &title, speedscope::Grouping::default(), &path);
                out.push(Written { path, result });
            }
        }
    }
    out
}

/// Opens (creating it if missing) and checks the directory outputs named `prefix*` go to, so
/// that a bad `-o` fails before recording starts. Under sudo the outputs (and a directory
/// created here) belong to the invoking user; see [`clrprobe_profile::safe_file`].
pub fn prepare(prefix: &Path) -> Result<(), SafeFileError> {
    OutputDir::of(prefix).map(drop)
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
