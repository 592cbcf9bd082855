//! speedscope JSON (<https://www.speedscope.app/file-format-schema.json>): one `sampled`
//! profile per sample type, or per (sample type, thread).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::Serialize;

use crate::error::ProfileError;
use crate::model::Profile;
use crate::output;

pub const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

/// How samples are split into speedscope profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Grouping {
    /// One profile per sample type.
    PerKind,
    /// One profile per sample type and (pid, tid).
    #[default]
    PerThread,
}

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared<'a>,
    profiles: Vec<SampledProfile>,
    name: &'a str,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    exporter: &'static str,
}

#[derive(Serialize)]
struct Shared<'a> {
    frames: Vec<FrameJson<'a>>,
}

#[derive(Serialize)]
struct FrameJson<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    file: &'a str,
}

#[derive(Serialize)]
struct SampledProfile {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: i64,
    #[serde(rename = "endValue")]
    end_value: i64,
    samples: Vec<Vec<usize>>,
    weights: Vec<i64>,
}

/// speedscope's value units; anything it does not know is "none".
fn unit(u: &str) -> &'static str {
    match u {
        "nanoseconds" => "nanoseconds",
        "microseconds" => "microseconds",
        "milliseconds" => "milliseconds",
        "seconds" => "seconds",
        "bytes" => "bytes",
        _ => "none",
    }
}

fn thread_title(pid: Option<u32>, tid: Option<u32>, names: (Option<&str>, Option<&str>)) -> String {
    let process = match (names.0, pid) {
        (Some(n), Some(pid)) => format!("{n} ({pid})"),
        (None, Some(pid)) => format!("pid {pid}"),
        (Some(n), None) => n.to_owned(),
        (None, None) => "unknown process".to_owned(),
    };
    let thread = match (names.1, tid) {
        (Some(n), Some(tid)) => format!("{n} ({tid})"),
        (None, Some(tid)) => format!("tid {tid}"),
        (Some(n), None) => n.to_owned(),
        (None, None) => "all threads".to_owned(),
    };
    format!("{process} / {thread}")
}

fn build<'a>(p: &'a Profile, name: &'a str, grouping: Grouping) -> File<'a> {
    let frames = p.frames().iter().map(|f| FrameJson { name: &f.name, file: &f.module }).collect();
    let mut profiles = Vec::new();
    for (i, t) in p.sample_types().iter().enumerate() {
        // (pid, tid) → (samples, weights, names)
        type Group<'b> = (Vec<Vec<usize>>, Vec<i64>, (Option<&'b str>, Option<&'b str>));
        let mut groups: BTreeMap<(Option<u32>, Option<u32>), Group<'_>> = BTreeMap::new();
        for s in p.samples() {
            let v = s.values[i];
            if v == 0 {
                continue;
            }
            let labels = p.labels(s.labels);
            let key = match grouping {
                Grouping::PerKind => (None, None),
                Grouping::PerThread => (labels.and_then(|l| l.pid), labels.and_then(|l| l.tid)),
            };
            let g = groups.entry(key).or_default();
            if let Some(l) = labels.filter(|_| grouping == Grouping::PerThread) {
                g.2.0 = g.2.0.or(l.process_name.as_deref());
                g.2.1 = g.2.1.or(l.thread_name.as_deref());
            }
            g.0.push(p.stack(s.stack).unwrap_or(&[]).iter().map(|f| f.index()).collect());
            g.1.push(v);
        }
        for ((pid, tid), (samples, weights, names)) in groups {
            let total = weights.iter().fold(0i64, |a, w| a.saturating_add(*w));
            let name = match grouping {
                Grouping::PerKind => t.kind.clone(),
                Grouping::PerThread => format!("{}: {}", t.kind, thread_title(pid, tid, names)),
            };
            profiles.push(SampledProfile {
                kind: "sampled",
                name,
                unit: unit(&t.unit),
                start_value: 0,
                end_value: total,
                samples,
                weights,
            });
        }
    }
    if profiles.is_empty() {
        // speedscope will not open a file without profiles.
        profiles.push(SampledProfile {
            kind: "sampled",
            name: "no samples".to_owned(),
            unit: "none",
            start_value: 0,
            end_value: 0,
            samples: Vec::new(),
            weights: Vec::new(),
        });
    }
    File {
        schema: SCHEMA,
        shared: Shared { frames },
        profiles,
        name,
        active_profile_index: 0,
        exporter: concat!("clrprobe ", env!("CARGO_PKG_VERSION")),
    }
}

/// Write speedscope JSON to a stream.
pub fn to_writer<W: Write>(p: &Profile, name: &str, grouping: Grouping, w: W) -> Result<(), ProfileError> {
    let file = build(p, name, grouping);
    output::to_stream("speedscope", w, |w| serde_json::to_writer(w, &file).map_err(Into::into))
}

/// Write speedscope JSON to `path`.
pub fn write_file(p: &Profile, name: &str, grouping: Grouping, path: impl AsRef<Path>) -> Result<(), ProfileError> {
    let file = build(p, name, grouping);
    output::write_file(path.as_ref(), |w| serde_json::to_writer(w, &file).map_err(Into::into))
}
