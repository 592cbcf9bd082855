//! Writing a recorded profile in the formats people open. Each file is written on its own: a
//! failure (full disk, permissions) is reported by path and does not stop the others.
use std::path::{Path, PathBuf};

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
    chown_to_sudo_user(out.iter().filter(|w| w.result.is_ok()).map(|w| w.path.as_path()));
    out
}

/// Under sudo, hands the files to the invoking user (SUDO_UID/SUDO_GID).
#[cfg(unix)]
fn chown_to_sudo_user<'a>(paths: impl Iterator<Item = &'a Path>) {
    let id = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
    let (Some(uid), Some(gid)) = (id("SUDO_UID"), id("SUDO_GID")) else { return };
    for p in paths {
        let _ = std::os::unix::fs::chown(p, Some(uid), Some(gid));
    }
}

#[cfg(not(unix))]
fn chown_to_sudo_user<'a>(_paths: impl Iterator<Item = &'a Path>) {}
