//! What a recording reports at the end: sampler, losses, naming coverage, top functions.
use std::time::Duration;

use clrprobe_profile::{FrameKind, Profile};
use serde::Serialize;

use super::perfmap::PerfMapState;
use crate::sampler::{SamplerKind, SamplerStats};

#[derive(Debug, Clone, Serialize)]
pub struct TopFrame {
    pub name: String,
    pub kind: String,
    /// Samples with this frame as the leaf.
    pub self_samples: u64,
    /// Samples with this frame anywhere on the stack.
    pub total_samples: u64,
}

#[derive(Debug, Default, Serialize)]
pub struct RecordSummary {
    pub sampler: Option<SamplerKind>,
    pub sampler_stats: SamplerStats,
    #[serde(with = "secs")]
    pub time_to_attach: Duration,
    #[serde(with = "secs")]
    pub duration: Duration,
    pub samples: u64,
    /// Samples whose leaf is managed code.
    pub managed_samples: u64,
    /// Of those, samples whose every managed frame is named (not an address).
    pub managed_named_samples: u64,
    /// (pid, state) of each .NET target's perf map.
    pub perf_maps: Vec<(u32, PerfMapState)>,
    /// (pid, events, dropped events, JIT methods named) per EventPipe session.
    pub eventpipe: Vec<(u32, u64, u64, usize)>,
    pub top_self: Vec<TopFrame>,
    /// JIT frames whose perf-map name was replaced by the runtime's method-event name.
    pub perf_map_names_corrected: u64,
    /// Off-CPU time was recorded (BPF sched_switch).
    pub offcpu: bool,
    /// On-CPU time per thread of the targets (BPF sched_switch).
    pub thread_cpu: Vec<crate::bpf::ThreadCpuTime>,
    /// Processes whose `__cxa_throw` calls were counted, and the counts.
    pub cxa_throw_probed: Vec<u32>,
    pub cxa_throws: std::collections::BTreeMap<u32, u64>,
    /// Cost of one uprobe hit, measured at start-up before the `__cxa_throw` uprobe was placed.
    pub uprobe_cost_ns: Option<u64>,
    /// (pid, providers in `trace --providers` form) of each EventPipe session asked for.
    pub eventpipe_providers: Vec<(u32, String)>,
    /// clrprobe's own resident set (end of recording, peaks).
    pub memory: super::OwnMemory,
    /// Per process: exceptions, contention and allocation report from the runtime's events.
    pub events: Vec<(u32, clrprobe_pipeline::EventReport)>,
    pub warnings: Vec<String>,
    /// Per process: HTTP requests (`--http`) and EventSource summaries (`--providers`).
    pub http: Vec<crate::http::HttpReport>,
    /// BPF map sizes, EventPipe buffer per process, drops (printed at the end of every run).
    pub limits: super::Limits,
    /// User stacks unwound from copies: completeness and unwind-table memory.
    pub unwind: Option<crate::unwind::UnwindSummary>,
    /// The processes followed: named or launched, and their descendants (`--all`: the .NET ones found).
    pub recorded: Vec<RecordedPid>,
    /// Exited processes folded into the profile while recording (`--all`).
    pub folded_processes: u64,
    /// Event reports of folded processes kept only in their `PREFIX.PID.events.json` (beyond
    /// the first [`crate::pipeline::fold::PIDS_KEPT`]).
    pub reports_in_files: u64,
    /// Pids of folded processes whose own files were written when each was folded (`--all`;
    /// not written again from the host profile).
    #[serde(skip)]
    pub folded_file_pids: Vec<u32>,
    /// Files of folded processes written beyond those listed one by one (counted only).
    #[serde(skip)]
    pub folded_files_more: usize,
    /// From the end of recording to everything stopped and switched off.
    #[serde(with = "secs")]
    pub stop_time: Duration,
    /// `--save-raw`: where the raw inputs went.
    pub saved_raw: Option<String>,
}

/// One process a recording followed.
#[derive(Debug, Clone, Serialize)]
pub struct RecordedPid {
    pub pid: u32,
    pub name: String,
    /// Set for a descendant followed (not named on the command line or launched).
    pub parent: Option<u32>,
    /// Found to be .NET (perf map, EventPipe set up).
    pub dotnet: bool,
}

mod secs {
    pub fn serialize<S: serde::Serializer>(d: &std::time::Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

impl RecordSummary {
    pub fn fill_from(&mut self, p: &Profile) {
        let mut self_counts: clrprobe_profile::hash::FastMap<usize, u64> = Default::default();
        let mut total_counts: clrprobe_profile::hash::FastMap<(&str, &str), u64> = Default::default();
        // Per distinct stack first: a host-wide minute holds ~50,000 timed samples on a few
        // thousand stacks, and naming every frame of every sample was seconds of a stop.
        let mut per_stack: clrprobe_profile::hash::FastMap<clrprobe_profile::StackId, u64> = Default::default();
        for s in p.samples() {
            let n = s.values.first().copied().unwrap_or(0).max(0) as u64;
            self.samples += n;
            *per_stack.entry(s.stack).or_insert(0) += n;
        }
        for (stack, n) in per_stack {
            let Some(stack) = p.stack(stack) else { continue };
            if let Some(leaf) = stack.last().and_then(|&f| p.frame(f)) {
                *self_counts.entry(stack[stack.len() - 1].index()).or_insert(0) += n;
                if is_managed_frame(leaf.kind) {
                    self.managed_samples += n;
                    let all_named = stack.iter().filter_map(|&f| p.frame(f)).filter(|f| is_managed_frame(f.kind)).all(|f| f.attr(super::frames::UNNAMED_ATTR).is_none());
                    if all_named {
                        self.managed_named_samples += n;
                    }
                }
            }
            // Total per function name: a sample counts once even if it holds several versions.
            let mut seen = std::collections::HashSet::new();
            for &f in stack {
                if let Some(fr) = p.frame(f)
                    && seen.insert((fr.name.as_ref(), fr.kind.as_str()))
                {
                    *total_counts.entry((fr.name.as_ref(), fr.kind.as_str())).or_insert(0) += n;
                }
            }
        }
        // One line per function: the versions of a method (tiers, OSR, re-JIT) are separate
        // frames with one name, and `report` merges them the same way.
        let key = |i: usize| p.frames().get(i).map(|f| (f.name.to_string(), f.kind.as_str().to_string()));
        let mut by_name: std::collections::HashMap<(String, String), u64> = Default::default();
        for (i, n) in self_counts.into_iter().filter(|(_, n)| *n > 0) {
            if let Some(k) = key(i) {
                *by_name.entry(k).or_default() += n;
            }
        }
        let mut top: Vec<((String, String), u64)> = by_name.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        self.top_self = top
            .into_iter()
            .take(15)
            .map(|(k, n)| {
                let total = total_counts.get(&(k.0.as_str(), k.1.as_str())).copied().unwrap_or(n);
                TopFrame { name: k.0, kind: k.1, self_samples: n, total_samples: total }
            })
            .collect();
    }

    /// Share of managed-leaf samples whose managed frames all have names.
    pub fn managed_named_share(&self) -> f64 {
        if self.managed_samples == 0 { 0.0 } else { self.managed_named_samples as f64 / self.managed_samples as f64 }
    }
}

fn is_managed_frame(k: FrameKind) -> bool {
    k.is_managed()
}

/// The human-readable end-of-run summary.
pub fn summary_text(s: &RecordSummary) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let sampler = s.sampler.map(|k| k.to_string()).unwrap_or_else(|| "none".into());
    let _ = writeln!(o, "sampler: {sampler}; attached in {:.0} ms; recorded {:.1} s", s.time_to_attach.as_secs_f64() * 1e3, s.duration.as_secs_f64());
    let st = &s.sampler_stats;
    let _ = writeln!(
        o,
        "samples: {} ({} lost, {} user / {} kernel stacks lost)",
        s.samples, st.lost_samples, st.lost_user_stacks, st.lost_kernel_stacks
    );
    if let Some(u) = &s.unwind {
        o.push_str(&u.text());
    }
    if s.managed_samples > 0 {
        let _ = writeln!(
            o,
            "managed: {} samples with a managed leaf, {:.1}% with every managed frame named",
            s.managed_samples,
            s.managed_named_share() * 100.0
        );
    }
    o.push_str(&super::limits_text(&s.limits));
    if !s.recorded.is_empty() {
        let list: Vec<String> = s
            .recorded
            .iter()
            .map(|r| {
                let mut d = vec![r.name.clone()];
                if r.dotnet {
                    d.push(".NET".into());
                }
                if let Some(p) = r.parent {
                    d.push(format!("child of {p}"));
                }
                format!("{} ({})", r.pid, d.join(", "))
            })
            .collect();
        let more = list.len().saturating_sub(20);
        let tail = if more > 0 { format!(" and {more} more") } else { String::new() };
        let _ = writeln!(o, "pids recorded: {}{tail}", list[..list.len().min(20)].join(", "));
    }
    let _ = writeln!(o, "stopped in {:.0} ms", s.stop_time.as_secs_f64() * 1e3);
    let m = &s.memory;
    if m.recording_rss_kb > 0 {
        let _ = writeln!(
            o,
            "clrprobe memory: {:.1} MB resident at the end of the recording (peak {:.1} MB), peak {:.1} MB with the outputs",
            m.recording_rss_kb as f64 / 1024.0,
            m.recording_peak_kb as f64 / 1024.0,
            m.final_peak_kb.max(m.recording_peak_kb) as f64 / 1024.0
        );
    }
    for (pid, state) in &s.perf_maps {
        let _ = writeln!(o, "perf map of {pid}: {}", serde_json::to_value(state).map(|v| v.to_string()).unwrap_or_default());
    }
    for (pid, events, dropped, methods) in &s.eventpipe {
        let _ = writeln!(o, "eventpipe of {pid}: {events} events, {dropped} dropped, {methods} JIT methods named");
    }
    for (pid, r) in &s.events {
        if !r.exceptions_by_type.is_empty() {
            let _ = writeln!(o, "exceptions in {pid}:");
            for e in r.exceptions.iter().take(10) {
                let _ = writeln!(o, "  {:>7}  {}: {}", e.count, e.exception_type, e.message);
            }
            if let Some(n) = s.cxa_throws.get(pid) {
                let total: u64 = r.exceptions_by_type.iter().map(|(_, c)| c).sum();
                let verdict = if *n == total { "agrees" } else { "DISAGREES" };
                let _ = writeln!(o, "  __cxa_throw counted in the kernel: {n} ({verdict} with {total} ExceptionThrown events)");
                if let Some(c) = s.uprobe_cost_ns {
                    let _ = writeln!(
                        o,
                        "  its uprobe: {:.1} µs per hit (self-test at start-up), {:.1} ms of the target's time",
                        c as f64 / 1e3,
                        (*n * c) as f64 / 1e6
                    );
                }
            }
        }
        let c = &r.contention;
        if c.waits > 0 {
            let _ = writeln!(
                o,
                "contention in {pid}: {} waits, {:.1} ms total; p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                c.waits, c.total_ms, c.p50_ms, c.p90_ms, c.p99_ms, c.max_ms
            );
        }
        o.push_str(&r.gc.text(*pid, 20));
        if !r.allocations.is_empty() {
            let _ = writeln!(o, "allocations in {pid} (estimated from AllocationTick):");
            for (t, bytes, n) in r.allocations.iter().take(8) {
                let _ = writeln!(o, "  {:>12.0} bytes  {:>10.0} objects  {t}", bytes, n);
            }
        }
    }
    o.push_str(&crate::http::summary_text(&s.http));
    if s.offcpu && s.unwind.is_none() {
        let _ = writeln!(
            o,
            "off-CPU: stacks are walked with frame pointers, which stop in libc (built without them) — frames below a libc wait are missing"
        );
    }
    let _ = writeln!(o, "top functions (self):");
    for t in &s.top_self {
        let pct = if s.samples > 0 { t.self_samples as f64 * 100.0 / s.samples as f64 } else { 0.0 };
        let _ = writeln!(o, "  {pct:5.1}%  {:>6}  {} [{}]", t.self_samples, t.name, t.kind);
    }
    o
}
