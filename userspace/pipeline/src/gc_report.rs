//! The GC summary: collections per generation and reason, pause statistics, GC CPU time, and
//! the timeline itself — serialized into the profile so `clrprobe report` can print it.
use serde::{Deserialize, Serialize};

use crate::gc::{GcRecord, GcTimeline};

/// CPU time the process spent collecting garbage.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct GcCpu {
    /// Where the per-thread times come from: `bpf sched_switch` or `/proc task stat`.
    pub source: String,
    /// On-CPU time of the dedicated GC threads (server GC, background GC).
    pub gc_threads_ns: u64,
    /// GC work on user threads (workstation / foreground GC): CPU samples of the triggering
    /// thread inside its suspend → restart windows, times the sampling period.
    pub user_thread_gc_ns: u64,
    /// On-CPU time of every thread of the process over the same window.
    pub process_ns: u64,
    /// (tid, thread name, on-CPU ns) of each GC thread.
    pub threads: Vec<(u64, String, u64)>,
}

impl GcCpu {
    /// GC CPU as a share of the process's CPU, in percent.
    pub fn percent(&self) -> f64 {
        if self.process_ns == 0 { 0.0 } else { (self.gc_threads_ns + self.user_thread_gc_ns) as f64 * 100.0 / self.process_ns as f64 }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct GcReport {
    pub collections: u64,
    /// Collections of generation 0, 1, 2.
    pub per_generation: [u64; 3],
    /// (reason, count), most frequent first.
    pub by_reason: Vec<(String, u64)>,
    pub pauses: u64,
    pub pause_total_ms: f64,
    pub pause_max_ms: f64,
    pub pause_p99_ms: f64,
    /// Time the recording covered (ms); `paused_percent` is relative to it.
    pub window_ms: f64,
    pub paused_percent: f64,
    pub cpu: Option<GcCpu>,
    /// The same GC threads' CPU read from /proc/PID/task/TID/stat (pull model; the cross-check
    /// of `cpu`, or the only figure without BPF).
    pub cpu_proc: Option<GcCpu>,
    /// Host CLOCK_MONOTONIC ns of the timeline's time 0 (the EventPipe session's sync time).
    pub clock_origin_mono_ns: Option<i64>,
    /// That origin minus CLOCK_MONOTONIC read just before the session was requested: small and
    /// positive when EventPipe's clock is the kernel's monotonic clock.
    pub clock_offset_ns: Option<i64>,
    pub timeline: Vec<GcRecord>,
}

impl GcReport {
    pub fn build(t: &GcTimeline, window_ns: u64) -> Self {
        let mut r = GcReport { collections: t.records.len() as u64, timeline: t.records.clone(), ..Default::default() };
        for g in &t.records {
            if let Some(c) = r.per_generation.get_mut(g.generation.min(2) as usize) {
                *c += 1;
            }
            match r.by_reason.iter_mut().find(|(n, _)| *n == g.reason) {
                Some((_, c)) => *c += 1,
                None => r.by_reason.push((g.reason.clone(), 1)),
            }
        }
        r.by_reason.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut pauses: Vec<u64> = t.pauses.iter().map(|p| p.1 - p.0).collect();
        pauses.sort_unstable();
        r.pauses = pauses.len() as u64;
        let ms = |ns: u64| ns as f64 / 1e6;
        r.pause_total_ms = ms(pauses.iter().sum());
        r.pause_max_ms = ms(pauses.last().copied().unwrap_or(0));
        r.pause_p99_ms = ms(percentile(&pauses, 0.99));
        r.set_window(window_ns);
        r
    }

    pub fn set_window(&mut self, window_ns: u64) {
        self.window_ms = window_ns as f64 / 1e6;
        self.paused_percent = if window_ns == 0 { 0.0 } else { self.pause_total_ms * 100.0 / self.window_ms };
    }

    /// Summary lines and up to `max_rows` timeline rows, as text.
    pub fn text(&self, pid: u32, max_rows: usize) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        if self.collections == 0 && self.cpu.is_none() {
            return o;
        }
        let [g0, g1, g2] = self.per_generation;
        let _ = writeln!(
            o,
            "GC in {pid}: {} collections (gen0 {g0}, gen1 {g1}, gen2 {g2}); paused {:.1} ms = {:.2}% of {:.1} s; max pause {:.2} ms, p99 {:.2} ms",
            self.collections,
            self.pause_total_ms,
            self.paused_percent,
            self.window_ms / 1e3,
            self.pause_max_ms,
            self.pause_p99_ms
        );
        if !self.by_reason.is_empty() {
            let reasons: Vec<String> = self.by_reason.iter().map(|(r, c)| format!("{r} {c}")).collect();
            let _ = writeln!(o, "  reasons: {}", reasons.join(", "));
        }
        if let Some(c) = &self.cpu {
            let _ = writeln!(
                o,
                "  GC CPU: {:.1}% of the process ({:.1} ms on GC threads, {:.1} ms on user threads, of {:.1} ms; {})",
                c.percent(),
                c.gc_threads_ns as f64 / 1e6,
                c.user_thread_gc_ns as f64 / 1e6,
                c.process_ns as f64 / 1e6,
                c.source
            );
        }
        if !self.timeline.is_empty() {
            let _ = writeln!(o, "  {:>6} {:>4} {:<16} {:>9} {:>9} {:>9} {:>9}  why", "#", "gen", "type", "pause ms", "before MB", "after MB", "prom. MB");
            let mb = |b: Option<u64>| b.map(|b| format!("{:.1}", b as f64 / 1e6)).unwrap_or_else(|| "-".into());
            for g in self.timeline.iter().take(max_rows) {
                let mut why = g.why();
                if let Some(m) = &g.pause_mode {
                    why.push_str(&format!("; {m}"));
                }
                if let Some(p) = g.memory_pressure {
                    why.push_str(&format!("; memory load {p}%"));
                }
                let _ = writeln!(
                    o,
                    "  {:>6} {:>4} {:<16} {:>9.2} {:>9} {:>9} {:>9}  {why}",
                    g.index,
                    g.generation,
                    g.gc_type,
                    g.pause_ns as f64 / 1e6,
                    mb(g.heap_before),
                    mb(g.heap_after.or(g.heap_stats_size)),
                    mb(g.promoted_bytes)
                );
            }
            if self.timeline.len() > max_rows {
                let _ = writeln!(o, "  ... {} more", self.timeline.len() - max_rows);
            }
        }
        o
    }
}

fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}
