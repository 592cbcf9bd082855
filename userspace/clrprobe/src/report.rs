//! `clrprobe report PREFIX.pb.gz`: per kind, the top leaf (self) and inclusive frames; the
//! exception types with messages; contended call sites with their lock owners; wait-time
//! percentiles — as text or JSON, from standard pprof fields (files rewritten by `go tool
//! pprof -proto` or merged by a backend report the same), plus the `PREFIX.events.json`
//! companion for the event reports and the GC timeline when it is there.
use std::{
    collections::HashMap,
    fmt::Write as _,
    path::{Path, PathBuf},
};

use clrprobe_pipeline::EventReport;
use clrprobe_profile::{Profile, ProfileBuilder, ProfileError, events, pprof, summary::top_functions};
use serde::Serialize;

/// Prefix of the pprof comment carrying a process's event report (written by `record`).
pub const REPORT_COMMENT: &str = "clrprobe:report ";

#[derive(Debug, Serialize)]
pub struct KindReport {
    pub kind: String,
    pub unit: String,
    pub total: i64,
    /// (name, kind, self value, inclusive value), by self value.
    pub top_self: Vec<(String, String, i64, i64)>,
    /// (name, kind, inclusive value), by inclusive value.
    pub top_inclusive: Vec<(String, String, i64)>,
    /// Off-CPU only: where threads blocked, as the innermost managed frame of each stack (the
    /// innermost non-kernel frame when none is managed); the leaf is always the scheduler.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocked_in: Vec<(String, String, i64)>,
}

#[derive(Debug, Serialize)]
pub struct ContendedSite {
    /// The innermost named managed frame of the waiting stack.
    pub site: String,
    pub owner: String,
    pub wait_ns: i64,
    pub waits: i64,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub kinds: Vec<KindReport>,
    /// (type, message, count) from the exception samples' labels.
    pub exceptions: Vec<(String, String, i64)>,
    pub contended_sites: Vec<ContendedSite>,
    /// Per process, as recorded (wait percentiles need every wait, which pprof does not keep).
    pub events: Vec<(u32, EventReport)>,
    /// HTTP requests from the `PREFIX.http.jsonl` next to the profile (`record --http`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub http: Vec<crate::http::HttpLine>,
}

pub fn read(path: &Path, top: usize) -> Result<Report, ProfileError> {
    read_inputs(&[path.to_path_buf()], top)
}

/// The profile behind `report`'s arguments: pprof files (Go-style per kind, or any pprof),
/// `PREFIX.events.json` companions, or prefixes (every `PREFIX.KIND.pb.gz` there is, and
/// `PREFIX.events.json`). A pprof file named `PREFIX.KIND.pb.gz` brings its companion along
/// when it exists. The companion's reports and markers join the profile.
pub fn load(inputs: &[PathBuf]) -> Result<Profile, ProfileError> {
    let mut pprofs: Vec<PathBuf> = Vec::new();
    let mut companions: Vec<PathBuf> = Vec::new();
    for input in inputs {
        let name = input.to_string_lossy();
        if name.ends_with(".events.json") {
            companions.push(input.clone());
            continue;
        }
        let prefix = if input.is_file() {
            pprofs.push(input.clone());
            pprof::go::prefix_of(input)
        } else {
            let files = pprof::go::files_of_prefix(input);
            if files.is_empty() {
                return Err(ProfileError::Read {
                    path: input.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "neither a file nor the prefix of PREFIX.KIND.pb.gz files",
                    ),
                });
            }
            pprofs.extend(files);
            Some(input.clone())
        };
        if let Some(prefix) = prefix {
            let c = PathBuf::from(format!("{}.events.json", prefix.display()));
            if c.is_file() && !companions.contains(&c) {
                companions.push(c);
            }
        }
    }
    let profile = pprof::go::read_files(&pprofs)?;
    if companions.is_empty() {
        return Ok(profile);
    }
    let mut b = ProfileBuilder::from_profile(profile);
    for c in &companions {
        let e = events::read_file(c)?;
        for m in e.markers {
            b.add_marker(m);
        }
        for (pid, r) in e.reports {
            b.add_comment(format!("{REPORT_COMMENT}{pid} {r}"));
        }
    }
    Ok(b.build())
}

/// [`load`] then [`build`].
pub fn read_inputs(inputs: &[PathBuf], top: usize) -> Result<Report, ProfileError> {
    let mut r = build(&load(inputs)?, top)?;
    if let Some(j) = inputs.iter().find_map(|p| crate::http::companion_of(p)) {
        r.http = crate::http::read_jsonl(&j).map_err(|source| ProfileError::Read { path: j, source })?;
    }
    Ok(r)
}

pub fn build(p: &Profile, top: usize) -> Result<Report, ProfileError> {
    let mut kinds = Vec::new();
    for (i, t) in p.sample_types().iter().enumerate() {
        let total = p.total(i);
        if total == 0 {
            continue;
        }
        let funcs = top_functions(p, i, usize::MAX)?;
        let mut by_self: Vec<_> = funcs.iter().filter(|f| f.self_value > 0).collect();
        by_self.sort_by_key(|f| std::cmp::Reverse(f.self_value));
        let mut by_total: Vec<_> = funcs.iter().collect();
        by_total.sort_by_key(|f| std::cmp::Reverse(f.total_value));
        kinds.push(KindReport {
            kind: t.kind.clone(),
            unit: t.unit.clone(),
            total,
            top_self: by_self
                .iter()
                .take(top)
                .map(|f| (f.name.to_string(), f.kind.as_str().to_string(), f.self_value, f.total_value))
                .collect(),
            top_inclusive: by_total.iter().take(top).map(|f| (f.name.to_string(), f.kind.as_str().to_string(), f.total_value)).collect(),
            blocked_in: if t.kind == clrprobe_profile::kinds::OFF_CPU { blocked_in(p, i, top) } else { Vec::new() },
        });
    }
    let col = |k: &str| p.sample_type_index(k);
    let mut exceptions: HashMap<(String, String), i64> = HashMap::new();
    let mut sites: HashMap<(String, String), (i64, i64)> = HashMap::new();
    for s in p.samples() {
        let labels = p.labels(s.labels);
        if let (Some(c), Some(l)) = (col("exceptions"), labels)
            && s.values[c] > 0
        {
            let ty = l.string("exception.type").unwrap_or("?").to_string();
            let msg = l.string("exception.message").unwrap_or("").to_string();
            *exceptions.entry((ty, msg)).or_insert(0) += s.values[c];
        }
        if let (Some(ns), Some(n), Some(l)) = (col("contention-ns"), col("contention-count"), labels)
            && (s.values[ns] > 0 || s.values[n] > 0)
        {
            {
                let stack = p.stack(s.stack).unwrap_or(&[]);
                let site = stack
                    .iter()
                    .rev()
                    .filter_map(|&f| p.frame(f))
                    .find(|f| f.kind.is_managed() && f.attr("unnamed").is_none())
                    .map(|f| f.name.to_string())
                    .unwrap_or_else(|| "?".into());
                let owner = l.string("lock.owner").unwrap_or("unknown").to_string();
                let e = sites.entry((site, owner)).or_insert((0, 0));
                e.0 += s.values[ns];
                e.1 += s.values[n];
            }
        }
    }
    let mut exceptions: Vec<(String, String, i64)> = exceptions.into_iter().map(|((t, m), c)| (t, m, c)).collect();
    // Ties in type and count by message: the same files give the same text (a hash map's order varied).
    exceptions.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)).then(a.1.cmp(&b.1)));
    let mut contended_sites: Vec<ContendedSite> =
        sites.into_iter().map(|((site, owner), (wait_ns, waits))| ContendedSite { site, owner, wait_ns, waits }).collect();
    contended_sites.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(b.waits.cmp(&a.waits)).then_with(|| (&a.site, &a.owner).cmp(&(&b.site, &b.owner))));
    let events = p
        .comments()
        .iter()
        .filter_map(|c| c.strip_prefix(REPORT_COMMENT))
        .filter_map(|rest| {
            let (pid, json) = rest.split_once(' ')?;
            Some((pid.parse().ok()?, serde_json::from_str(json).ok()?))
        })
        .collect();
    Ok(Report { kinds, exceptions, contended_sites, events, http: Vec::new() })
}

/// Off-CPU value per innermost managed frame (else innermost non-kernel frame) of the stacks.
fn blocked_in(p: &Profile, col: usize, top: usize) -> Vec<(String, String, i64)> {
    use clrprobe_profile::FrameKind;
    let mut by: HashMap<(String, String), i64> = HashMap::new();
    for s in p.samples() {
        let v = s.values.get(col).copied().unwrap_or(0);
        if v <= 0 {
            continue;
        }
        let Some(stack) = p.stack(s.stack) else { continue };
        let frames: Vec<_> = stack.iter().rev().filter_map(|&f| p.frame(f)).collect();
        let managed = frames.iter().find(|f| matches!(f.kind, FrameKind::Jit | FrameKind::ReadyToRun | FrameKind::Interpreted));
        let Some(f) = managed.or_else(|| frames.iter().find(|f| !matches!(f.kind, FrameKind::Kernel | FrameKind::Synthetic))) else { continue };
        *by.entry((f.name.to_string(), f.kind.as_str().to_string())).or_insert(0) += v;
    }
    let mut v: Vec<_> = by.into_iter().map(|((n, k), v)| (n, k, v)).collect();
    v.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    v.truncate(top);
    v
}

fn unit_value(v: i64, unit: &str) -> String {
    match unit {
        "nanoseconds" => format!("{:.1} ms", v as f64 / 1e6),
        "bytes" => format!("{:.1} MB", v as f64 / 1e6),
        _ => v.to_string(),
    }
}

pub fn text(r: &Report) -> String {
    let mut o = String::new();
    for k in &r.kinds {
        let _ = writeln!(o, "== {} (total {}) ==", k.kind, unit_value(k.total, &k.unit));
        let _ = writeln!(o, "  self:");
        for (name, kind, s, _) in &k.top_self {
            let _ = writeln!(o, "    {:5.1}%  {:>12}  {name} [{kind}]", *s as f64 * 100.0 / k.total as f64, unit_value(*s, &k.unit));
        }
        let _ = writeln!(o, "  inclusive:");
        for (name, kind, t) in &k.top_inclusive {
            let _ = writeln!(o, "    {:5.1}%  {:>12}  {name} [{kind}]", *t as f64 * 100.0 / k.total as f64, unit_value(*t, &k.unit));
        }
        if !k.blocked_in.is_empty() {
            let _ = writeln!(o, "  blocked in (innermost managed frame):");
            for (name, kind, t) in &k.blocked_in {
                let _ = writeln!(o, "    {:5.1}%  {:>12}  {name} [{kind}]", *t as f64 * 100.0 / k.total as f64, unit_value(*t, &k.unit));
            }
        }
    }
    if !r.exceptions.is_empty() {
        let _ = writeln!(o, "== exceptions ==");
        for (t, m, c) in &r.exceptions {
            let _ = writeln!(o, "  {c:>8}  {t}: {m}");
        }
    }
    if !r.contended_sites.is_empty() {
        let _ = writeln!(o, "== contended call sites ==");
        for s in &r.contended_sites {
            let _ = writeln!(o, "  {:>10.1} ms  {:>6} waits  {}  (owner {})", s.wait_ns as f64 / 1e6, s.waits, s.site, s.owner);
        }
    }
    o.push_str(&crate::http::report_text(&r.http));
    for (pid, e) in &r.events {
        if e.gc.collections > 0 || e.gc.cpu.is_some() {
            let _ = writeln!(o, "== garbage collections of {pid} ==");
            o.push_str(&e.gc.text(*pid, 200));
        }
        let c = &e.contention;
        if c.waits > 0 {
            let _ = writeln!(
                o,
                "== wait times of {pid} == {} waits: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                c.waits, c.p50_ms, c.p90_ms, c.p99_ms, c.max_ms
            );
        }
    }
    o
}

