//! One pprof file per kind, with the sample types Go's runtime writes, so that `go tool
//! pprof`, Pyroscope, Grafana and other backends read them without a mapping:
//!
//! | file | sample types | from clrprobe kinds |
//! |---|---|---|
//! | `PREFIX.cpu.pb.gz` | `samples/count`, `cpu/nanoseconds` | `cpu` (× the period) |
//! | `PREFIX.alloc.pb.gz` | `alloc_objects/count`, `alloc_space/bytes` | `alloc-count`, `alloc-bytes` |
//! | `PREFIX.contention.pb.gz` | `contentions/count`, `delay/nanoseconds` | `contention-count`, `contention-ns` |
//! | `PREFIX.offcpu.pb.gz` | `contentions/count`, `delay/nanoseconds` (like Go's block profile) | `off-cpu` |
//! | `PREFIX.exceptions.pb.gz` | `exceptions/count` | `exceptions` |
//!
//! Samples are aggregated per (stack, labels): times stay in the timeline formats. Each file
//! carries one short comment `clrprobe kind=KIND` (the off-CPU and contention files share
//! their sample types); [`to_internal`] turns any of them back into clrprobe's kinds, also
//! after `go tool pprof -proto` rewrote it (comments survive), falling back to the file name.

use std::path::{Path, PathBuf};

use crate::builder::ProfileBuilder;
use crate::error::ProfileError;
use crate::model::{Period, Profile, SampleType, kinds, units};

/// The kinds written, in file-name order: `PREFIX.{name}.pb.gz`.
pub const FILE_KINDS: [&str; 5] = ["cpu", "alloc", "contention", "offcpu", "exceptions"];

const COMMENT: &str = "clrprobe kind=";

/// How a column of a Go-style file is computed from the clrprobe profile.
#[derive(Clone, Copy)]
enum Source {
    /// The value of this clrprobe kind.
    Column(&'static str),
    /// This kind's value times the profile's period (samples → nanoseconds).
    TimesPeriod(&'static str),
    /// 1 per sample row with a non-zero value of this kind (each off-CPU interval).
    Rows(&'static str),
}

struct Layout {
    name: &'static str,
    /// Go's (type, unit) per column and where its values come from.
    columns: &'static [(&'static str, &'static str, Source)],
    /// The clrprobe kind whose presence makes the file.
    needs: &'static str,
    period: Option<(&'static str, &'static str)>,
}

const LAYOUTS: [Layout; 5] = [
    Layout {
        name: "cpu",
        columns: &[
            ("samples", units::COUNT, Source::Column(kinds::CPU)),
            ("cpu", units::NANOSECONDS, Source::TimesPeriod(kinds::CPU)),
        ],
        needs: kinds::CPU,
        period: Some(("cpu", units::NANOSECONDS)),
    },
    Layout {
        name: "alloc",
        columns: &[
            ("alloc_objects", units::COUNT, Source::Column(kinds::ALLOC_COUNT)),
            ("alloc_space", units::BYTES, Source::Column(kinds::ALLOC_BYTES)),
        ],
        needs: kinds::ALLOC_BYTES,
        period: None,
    },
    Layout {
        name: "contention",
        columns: &[
            ("contentions", units::COUNT, Source::Column(kinds::CONTENTION_COUNT)),
            ("delay", units::NANOSECONDS, Source::Column(kinds::CONTENTION_NS)),
        ],
        needs: kinds::CONTENTION_NS,
        period: Some(("contentions", units::COUNT)),
    },
    Layout {
        name: "offcpu",
        columns: &[
            ("contentions", units::COUNT, Source::Rows(kinds::OFF_CPU)),
            ("delay", units::NANOSECONDS, Source::Column(kinds::OFF_CPU)),
        ],
        needs: kinds::OFF_CPU,
        period: Some(("contentions", units::COUNT)),
    },
    Layout {
        name: "exceptions",
        columns: &[("exceptions", units::COUNT, Source::Column(kinds::EXCEPTIONS))],
        needs: kinds::EXCEPTIONS,
        period: Some(("exceptions", units::COUNT)),
    },
];

/// Cuts `p` into one Go-style profile per kind it has: `(file kind, profile)`.
pub fn split(p: &Profile) -> Result<Vec<(&'static str, Profile)>, ProfileError> {
    let mut out = Vec::new();
    for kind in split_kinds(p) {
        if let Some(one) = split_kind(p, kind)? {
            out.push((kind, one));
        }
    }
    Ok(out)
}

/// The file kinds [`split`] cuts `p` into, in order.
pub fn split_kinds(p: &Profile) -> Vec<&'static str> {
    LAYOUTS.iter().filter(|l| p.sample_type_index(l.needs).is_some()).map(|l| l.name).collect()
}

/// The Go-style profile of one file kind of `p` (None if `p` lacks it): one at a time, so a
/// writer holds one cut copy, not all of them.
pub fn split_kind(p: &Profile, kind: &str) -> Result<Option<Profile>, ProfileError> {
    let period_ns = p.period().filter(|x| x.sample_type.unit == units::NANOSECONDS).map_or(0, |x| x.value);
    for layout in LAYOUTS.iter().filter(|l| l.name == kind) {
        let Some(gate) = p.sample_type_index(layout.needs) else { continue };
        let cols: Vec<(Source, Option<usize>)> = layout
            .columns
            .iter()
            .map(|(_, _, src)| {
                let kind = match *src {
                    Source::Column(k) | Source::TimesPeriod(k) | Source::Rows(k) => k,
                };
                (*src, p.sample_type_index(kind))
            })
            .collect();
        let types = layout.columns.iter().map(|(t, u, _)| SampleType::new(*t, *u)).collect();
        let mut b = ProfileBuilder::new(types);
        b.set_start_time_ns(p.start_time_ns());
        b.set_duration_ns(p.duration_ns());
        match layout.period {
            Some(("cpu", _)) if period_ns > 0 => {
                b.set_period(Period { sample_type: SampleType::new("cpu", units::NANOSECONDS), value: period_ns })
            }
            Some(("cpu", _)) | None => {}
            Some((t, u)) => b.set_period(Period { sample_type: SampleType::new(t, u), value: 1 }),
        }
        b.add_comment(format!("{COMMENT}{}", layout.name));
        // clrprobe's own notes (`clrprobe:report ...`) go to the events file, not here.
        for c in p.comments().iter().filter(|c| !c.starts_with("clrprobe:")) {
            b.add_comment(c.clone());
        }
        let mut row = vec![0i64; cols.len()];
        let mut remap = crate::remap::Remap::new();
        for s in p.samples() {
            let any = cols.iter().any(|(_, i)| i.is_some_and(|i| s.values[i] != 0)) || s.values[gate] != 0;
            if !any {
                continue;
            }
            for (v, (src, i)) in row.iter_mut().zip(&cols) {
                let x = i.map_or(0, |i| s.values[i]);
                *v = match src {
                    Source::Column(_) => x,
                    Source::TimesPeriod(_) => x.saturating_mul(period_ns),
                    Source::Rows(_) => i64::from(x != 0),
                };
            }
            let stack = remap.stack(&mut b, p, s.stack)?;
            let labels = remap.labels(&mut b, p, s.labels)?;
            b.add_sample(stack, &row, labels)?;
        }
        return Ok(Some(b.build()));
    }
    Ok(None)
}

/// The file kind of a Go-style profile: its `clrprobe kind=` comment, else guessed from the
/// sample types (and `hint`, a file name, for the two kinds sharing theirs).
pub fn file_kind(p: &Profile, hint: Option<&str>) -> Option<&'static str> {
    for c in p.comments() {
        if let Some(k) = c.strip_prefix(COMMENT) {
            return FILE_KINDS.into_iter().find(|n| *n == k);
        }
    }
    let has = |t: &str| p.sample_type_index(t).is_some();
    if has("samples") {
        Some("cpu")
    } else if has("alloc_space") || has("alloc_objects") {
        Some("alloc")
    } else if has("exceptions") && !has(kinds::CONTENTION_NS) {
        Some("exceptions")
    } else if has("delay") {
        Some(if hint.is_some_and(|h| h.contains("offcpu")) { "offcpu" } else { "contention" })
    } else {
        None
    }
}

/// A Go-style profile with clrprobe's kinds (`samples/count` → `cpu/samples`, ...). Profiles
/// that are not Go-style come back unchanged.
pub fn to_internal(p: &Profile, hint: Option<&str>) -> Result<Profile, ProfileError> {
    let Some(name) = file_kind(p, hint) else { return Ok(p.clone()) };
    let Some(layout) = LAYOUTS.iter().find(|l| l.name == name) else { return Ok(p.clone()) };
    // (internal kind, unit, Go column)
    let mut picks: Vec<(&str, &str, usize)> = Vec::new();
    for (t, _, src) in layout.columns {
        let Some(i) = p.sample_type_index(t) else { continue };
        match *src {
            Source::Column(k) => {
                let unit = if k == kinds::CPU { units::SAMPLES } else { p.sample_types()[i].unit.as_str() };
                picks.push((k, unit, i));
            }
            Source::TimesPeriod(_) | Source::Rows(_) => {}
        }
    }
    let types: Vec<SampleType> = picks.iter().map(|(k, u, _)| SampleType::new(*k, *u)).collect();
    let mut b = ProfileBuilder::new(types);
    b.set_start_time_ns(p.start_time_ns());
    b.set_duration_ns(p.duration_ns());
    if let Some(period) = p.period().filter(|x| x.sample_type.unit == units::NANOSECONDS) {
        b.set_period(Period { sample_type: SampleType::new(kinds::CPU, units::NANOSECONDS), value: period.value });
    }
    for c in p.comments().iter().filter(|c| !c.starts_with(COMMENT)) {
        b.add_comment(c.clone());
    }
    for m in p.markers() {
        b.add_marker(m.clone());
    }
    let mut row = vec![0i64; picks.len()];
    for s in p.samples() {
        for (v, (_, _, i)) in row.iter_mut().zip(&picks) {
            *v = s.values[*i];
        }
        if row.iter().all(|v| *v == 0) {
            continue;
        }
        let mut ids = Vec::new();
        for &f in p.stack(s.stack).unwrap_or(&[]) {
            if let Some(frame) = p.frame(f) {
                ids.push(b.intern_frame(frame.clone())?);
            }
        }
        let stack = b.intern_stack(&ids)?;
        let labels = b.intern_labels(p.labels(s.labels).cloned().unwrap_or_default())?;
        match s.timestamp_ns {
            Some(t) => b.add_timed_sample(stack, &row, labels, t)?,
            None => b.add_sample(stack, &row, labels)?,
        }
    }
    Ok(b.build())
}

/// `PREFIX.KIND.pb.gz` for a file kind.
pub fn file_name(prefix: &Path, kind: &str) -> PathBuf {
    PathBuf::from(format!("{}.{kind}.pb.gz", prefix.display()))
}

/// The prefix of a `PREFIX.KIND.pb.gz` name (None for other names).
pub fn prefix_of(path: &Path) -> Option<PathBuf> {
    let s = path.to_str()?;
    let stem = s.strip_suffix(".pb.gz").or_else(|| s.strip_suffix(".pb"))?;
    FILE_KINDS.iter().find_map(|k| stem.strip_suffix(&format!(".{k}")).map(PathBuf::from))
}

/// Reads pprof files (Go-style or not) and joins them into one profile with clrprobe's kinds.
pub fn read_files(paths: &[PathBuf]) -> Result<Profile, ProfileError> {
    let mut b: Option<ProfileBuilder> = None;
    for path in paths {
        let p = super::read_file(path)?;
        let p = to_internal(&p, path.file_name().and_then(|n| n.to_str()))?;
        match &mut b {
            None => b = Some(ProfileBuilder::from_profile(p)),
            Some(b) => b.merge(&p)?,
        }
    }
    Ok(b.map(ProfileBuilder::build).unwrap_or_default())
}

/// The `PREFIX.KIND.pb.gz` files that exist.
pub fn files_of_prefix(prefix: &Path) -> Vec<PathBuf> {
    FILE_KINDS.iter().map(|k| file_name(prefix, k)).filter(|p| p.is_file()).collect()
}

/// Reads every `PREFIX.KIND.pb.gz` there is into one profile with clrprobe's kinds.
pub fn read_prefix(prefix: &Path) -> Result<Profile, ProfileError> {
    let files = files_of_prefix(prefix);
    if files.is_empty() {
        return Err(ProfileError::Read {
            path: file_name(prefix, "KIND"),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no PREFIX.{cpu,alloc,contention,offcpu,exceptions}.pb.gz file"),
        });
    }
    read_files(&files)
}
