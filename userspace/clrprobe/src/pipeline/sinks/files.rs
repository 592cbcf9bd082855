//! The files sink (`record --pipeline`, `report --replay`): the aggregator's profiles by
//! kind, each written as `PREFIX.KIND.*` in each format asked for (the names `record` gives its
//! files), and each process's event report as `PREFIX.events.json`.
use std::path::{Path, PathBuf};

use clrprobe_pipeline::stream::{Aggregator, Namer, ProfileKind};
use clrprobe_profile::{Profile, ProfileError, events::Events, firefox, folded, pprof, speedscope, svg};

use crate::{formats::Format, output::Written};

/// The aggregator's kinds by the file kind names `record` writes.
pub const KINDS: [(ProfileKind, &str); 5] = [
    (ProfileKind::Cpu, "cpu"),
    (ProfileKind::Allocs, "alloc"),
    (ProfileKind::Mutex, "contention"),
    (ProfileKind::Block, "offcpu"),
    (ProfileKind::Exceptions, "exceptions"),
];

/// Every kind's profile of the whole time the aggregator kept (kinds without samples are
/// left out).
pub fn profiles(agg: &Aggregator, namer: &mut dyn Namer) -> Result<Vec<(&'static str, Profile)>, ProfileError> {
    let mut out = Vec::new();
    for (kind, name) in KINDS {
        let p = agg.profile(kind, None, 0, namer)?;
        if p.samples().len() > 0 {
            out.push((name, p));
        }
    }
    Ok(out)
}

/// The event reports of the processes the aggregator followed, over `duration_ns` from
/// `start_unix_ns`; `complete_gc`: with the GC window and GC CPU filled in (a live recording;
/// a replay has no thread CPU times).
pub fn events(agg: &Aggregator, start_unix_ns: u64, duration_ns: u64, complete_gc: bool) -> Events {
    let mut events = Events::new(start_unix_ns, duration_ns);
    let reports = if complete_gc { agg.completed_event_reports(duration_ns) } else { agg.event_reports() };
    events.reports = reports.into_iter().filter_map(|(pid, r)| Some((pid, serde_json::to_value(r).ok()?))).collect();
    events
}

/// Writes each profile in each format as `PREFIX.KIND.*` (through the safe writer), and the
/// event reports with the pprof files.
pub fn write(profiles: &[(&'static str, Profile)], events: &Events, prefix: &Path, formats: &[Format]) -> Vec<Written> {
    let mut out = Vec::new();
    let title = prefix.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    for (kind, p) in profiles {
        for f in formats {
            let suffix = match f {
                Format::Pprof => ".pb.gz",
                Format::Folded => ".folded",
                Format::Svg => ".svg",
                Format::Firefox => ".firefox.json",
                Format::Speedscope => ".speedscope.json",
            };
            let path = PathBuf::from(format!("{}.{kind}{suffix}", prefix.display()));
            let result = match f {
                Format::Pprof => pprof::write_file(p, &path),
                Format::Folded => folded::write_file(p, 0, &folded::FoldedOptions::default(), &path),
                Format::Svg => svg::write_file(p, 0, &format!("{title} {kind}"), &path),
                Format::Firefox => firefox::write_file(p, 0, "clrprobe", &path),
                Format::Speedscope => speedscope::write_file(p, &title, speedscope::Grouping::default(), &path),
            };
            out.push(Written { path, result });
        }
    }
    if formats.contains(&Format::Pprof) && !events.reports.is_empty() {
        let path = PathBuf::from(format!("{}.events.json", prefix.display()));
        let result = clrprobe_profile::events::write_file(events, &path);
        out.push(Written { path, result });
    }
    out
}
