//! speedscope JSON (<https://www.speedscope.app/file-format-schema.json>): one profile per
//! sample type, or per (sample type, thread). A thread's samples that all have their time and
//! measure time (CPU samples of a known period, off-CPU or wait nanoseconds) become an
//! `evented` profile at their real times, so speedscope's time-order view is a timeline;
//! others are `sampled` with weights (CPU samples as nanoseconds: count × period), in time
//! order when they all have their time (allocation bytes, exception counts).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::Serialize;

use crate::error::ProfileError;
use crate::hash::FastMap;
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
    profiles: Vec<ProfileJson>,
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
#[serde(tag = "type")]
enum ProfileJson {
    #[serde(rename = "sampled")]
    Sampled {
        name: String,
        unit: &'static str,
        #[serde(rename = "startValue")]
        start_value: i64,
        #[serde(rename = "endValue")]
        end_value: i64,
        samples: Vec<Vec<usize>>,
        weights: Vec<i64>,
    },
    #[serde(rename = "evented")]
    Evented {
        name: String,
        unit: &'static str,
        #[serde(rename = "startValue")]
        start_value: u64,
        #[serde(rename = "endValue")]
        end_value: u64,
        events: Vec<EventJson>,
    },
}

#[derive(Serialize)]
struct EventJson {
    #[serde(rename = "type")]
    kind: &'static str,
    frame: usize,
    at: u64,
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

/// Samples of one (kind, thread): (time, stack as speedscope frame indexes, value).
type Group<'b> = (Vec<(Option<u64>, Vec<usize>, i64)>, (Option<&'b str>, Option<&'b str>));

/// The open/close events of timed samples, each lasting `duration(value)` nanoseconds (cut at
/// the next sample of the thread): frames shared with the previous stack stay open, a gap
/// closes everything.
fn evented(mut samples: Vec<(u64, Vec<usize>, i64)>, duration: impl Fn(i64) -> u64) -> (Vec<EventJson>, u64, u64) {
    samples.sort_by_key(|s| s.0);
    let mut events = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut last_end = 0u64;
    let first = samples.first().map_or(0, |s| s.0);
    let close_to = |open: &mut Vec<usize>, keep: usize, at: u64, events: &mut Vec<EventJson>| {
        while open.len() > keep {
            let f = open.pop().unwrap_or_default();
            events.push(EventJson { kind: "C", frame: f, at });
        }
    };
    for i in 0..samples.len() {
        // Sorted, so `start` is at or after every event so far.
        let start = samples[i].0;
        let mut end = start.saturating_add(duration(samples[i].2).max(1));
        if let Some(next) = samples.get(i + 1) {
            end = end.min(next.0.max(start + 1));
        }
        let stack = &samples[i].1;
        if start > last_end {
            close_to(&mut open, 0, last_end, &mut events);
        }
        let common = open.iter().zip(stack.iter()).take_while(|(a, b)| a == b).count();
        close_to(&mut open, common, start, &mut events);
        for &f in &stack[common..] {
            events.push(EventJson { kind: "O", frame: f, at: start });
            open.push(f);
        }
        last_end = end;
    }
    close_to(&mut open, 0, last_end, &mut events);
    (events, first, last_end)
}

fn build<'a>(p: &'a Profile, name: &'a str, grouping: Grouping) -> File<'a> {
    // One speedscope frame per (name, module): frames that differ by address alone merge.
    let mut index: FastMap<(&str, &str), usize> = FastMap::default();
    let mut frames: Vec<FrameJson<'a>> = Vec::new();
    let frame_of: Vec<usize> = p
        .frames()
        .iter()
        .map(|f| {
            *index.entry((&f.name, &f.module)).or_insert_with(|| {
                frames.push(FrameJson { name: &f.name, file: &f.module });
                frames.len() - 1
            })
        })
        .collect();
    let period_ns = p.period().filter(|x| x.sample_type.unit == crate::units::NANOSECONDS).map(|x| x.value).filter(|v| *v > 0);
    let mut profiles = Vec::new();
    for (i, t) in p.sample_types().iter().enumerate() {
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
                g.1.0 = g.1.0.or(l.process_name.as_deref());
                g.1.1 = g.1.1.or(l.thread_name.as_deref());
            }
            let stack = p.stack(s.stack).unwrap_or(&[]).iter().map(|f| frame_of[f.index()]).collect();
            g.0.push((s.timestamp_ns, stack, v));
        }
        // Counted CPU samples become time: value × period.
        let (as_time, to_ns): (bool, Box<dyn Fn(i64) -> i64>) = match (t.unit.as_str(), period_ns) {
            ("nanoseconds", _) => (true, Box::new(|v| v)),
            ("samples", Some(period)) => (true, Box::new(move |v: i64| v.saturating_mul(period))),
            _ => (false, Box::new(|v| v)),
        };
        for ((pid, tid), (samples, names)) in groups {
            let name = match grouping {
                Grouping::PerKind => t.kind.clone(),
                Grouping::PerThread => format!("{}: {}", t.kind, thread_title(pid, tid, names)),
            };
            let all_timed = samples.iter().all(|s| s.0.is_some());
            if as_time && all_timed && grouping == Grouping::PerThread {
                let timed = samples.into_iter().map(|(t, s, v)| (t.unwrap_or(0), s, v)).collect();
                let (events, start, end) = evented(timed, |v| to_ns(v).max(0) as u64);
                profiles.push(ProfileJson::Evented { name, unit: "nanoseconds", start_value: start, end_value: end, events });
                continue;
            }
            // Timed samples of other units (bytes, counts) in time order: speedscope's
            // time-order view is then the thread's timeline.
            let mut samples = samples;
            if all_timed {
                samples.sort_by_key(|s| s.0);
            }
            let weights: Vec<i64> = samples.iter().map(|s| to_ns(s.2)).collect();
            let total = weights.iter().fold(0i64, |a, w| a.saturating_add(*w));
            profiles.push(ProfileJson::Sampled {
                name,
                unit: if as_time { "nanoseconds" } else { unit(&t.unit) },
                start_value: 0,
                end_value: total,
                samples: samples.into_iter().map(|s| s.1).collect(),
                weights,
            });
        }
    }
    if profiles.is_empty() {
        // speedscope will not open a file without profiles.
        profiles.push(ProfileJson::Sampled {
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
