//! Text tables: requests per host and path, the slowest requests with their phases and what
//! their threads did meanwhile, and the generic EventSource summary.
use std::fmt::Write as _;

use clrprobe_pipeline::http::{EventSourceStats, HostPathStats, host_path_stats};

use super::line::{HttpLine, HttpReport};

/// Slowest requests listed with their phases.
pub const SLOWEST: usize = 5;

fn table(o: &mut String, rows: &[HostPathStats]) {
    let _ = writeln!(
        o,
        "  {:>6} {:>6} {:>9} {:>9} {:>9} {:>9}  host path",
        "count", "errors", "p50 ms", "p90 ms", "p99 ms", "max ms"
    );
    for r in rows {
        let _ = writeln!(
            o,
            "  {:>6} {:>6} {:>9.2} {:>9.2} {:>9.2} {:>9.2}  {} {}",
            r.count, r.errors, r.p50_ms, r.p90_ms, r.p99_ms, r.max_ms, r.host, r.path
        );
    }
}

fn slowest(o: &mut String, lines: &[&HttpLine]) {
    let mut v: Vec<&&HttpLine> = lines.iter().collect();
    v.sort_by(|a, b| b.duration_ms.total_cmp(&a.duration_ms));
    if v.is_empty() {
        return;
    }
    let _ = writeln!(o, "  slowest:");
    for l in v.into_iter().take(SLOWEST) {
        let status = match (&l.error, l.status) {
            (Some(e), _) => format!("failed: {e}"),
            (None, Some(s)) => s.to_string(),
            (None, None) if !l.complete => "unfinished".into(),
            (None, None) => "no response".into(),
        };
        let p = &l.phases;
        let _ = writeln!(
            o,
            "    {:>9.2} ms  {} {}://{}:{}{}  at +{:.0} ms  tid {}",
            l.duration_ms, status, l.scheme, l.host, l.port, l.path, l.offset_ms, l.start_thread
        );
        let _ = writeln!(
            o,
            "       queue {:.2}  dns {:.2}  connect {:.2}  tls {:.2}  send {:.2}  wait {:.2}  content {:.2}  (other {:.2})",
            p.queue, p.dns, p.connect, p.tls, p.send, p.wait, p.content, l.unaccounted_ms
        );
        if let Some(m) = &l.meanwhile {
            let _ = writeln!(
                o,
                "       meanwhile on its threads: {} CPU samples ({:.1} ms){}",
                m.cpu_samples,
                m.cpu_samples as f64 * m.cpu_period_ms,
                m.offcpu_ms
                    .map(|ms| format!(", {ms:.1} ms off CPU"))
                    .unwrap_or_default()
            );
            for (s, n) in m.cpu_top.iter().take(3) {
                let _ = writeln!(o, "         cpu {n:>5}  {s}");
            }
            for (s, ms) in m.offcpu_top.iter().take(3) {
                let _ = writeln!(o, "         off {ms:>7.1} ms  {s}");
            }
            for n in &m.notes {
                let _ = writeln!(o, "         ({n})");
            }
        }
    }
}

/// The HTTP and generic EventSource part of `record`'s summary.
pub fn summary_text(reports: &[HttpReport]) -> String {
    let mut o = String::new();
    for r in reports {
        if r.http_on && r.events == 0 {
            let _ = writeln!(
                o,
                "HTTP requests of {}: none seen (no System.Net events: no requests made, or a runtime before .NET 5, which has no HTTP telemetry)",
                r.pid
            );
        } else if r.events > 0 || r.request_count > 0 {
            let errors: u64 = r.by_host_path.iter().map(|s| s.errors).sum();
            let _ = writeln!(
                o,
                "HTTP requests of {}: {} ({} errors), {} events",
                r.pid, r.request_count, errors, r.events
            );
            table(&mut o, &r.by_host_path);
            slowest(&mut o, &r.requests.iter().collect::<Vec<_>>());
            if r.dropped > 0 {
                let _ = writeln!(o, "  {} more requests were counted but not kept (limit {})", r.dropped, r.request_count);
            }
            if r.without_activity > 0 {
                let _ = writeln!(
                    o,
                    "  {} starts had no activity id: their phases could not be tied together",
                    r.without_activity
                );
            }
        }
        if let Some(g) = &r.generic {
            let _ = writeln!(o, "EventSource events of {}:", r.pid);
            o.push_str(&generic_text(g));
        }
    }
    o
}

/// `report`'s HTTP section, from the lines of `PREFIX.http.jsonl`.
pub fn report_text(lines: &[HttpLine]) -> String {
    let mut o = String::new();
    let mut pids: Vec<u32> = lines.iter().map(|l| l.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        let mine: Vec<&HttpLine> = lines.iter().filter(|l| l.pid == pid).collect();
        let reqs: Vec<_> = mine.iter().map(|l| l.to_request()).collect();
        let _ = writeln!(o, "== HTTP requests of {pid}: {} ==", mine.len());
        table(&mut o, &host_path_stats(&reqs));
        slowest(&mut o, &mine);
    }
    o
}

/// Counts per event and numeric field summaries.
pub fn generic_text(g: &EventSourceStats) -> String {
    let mut o = String::new();
    for e in &g.events {
        let _ = writeln!(o, "  {:>8}  {}/{}", e.count, e.provider, e.event);
        for (name, f) in &e.fields {
            if f.count > 0 {
                let _ = writeln!(
                    o,
                    "            {name}: sum {} min {} p50 {} p90 {} p99 {} max {}",
                    num(f.sum),
                    num(f.min),
                    num(f.p50),
                    num(f.p90),
                    num(f.p99),
                    num(f.max)
                );
            } else if !f.top_values.is_empty() {
                let top: Vec<String> = f
                    .top_values
                    .iter()
                    .map(|(v, n)| format!("{v:?} ×{n}"))
                    .collect();
                let _ = writeln!(o, "            {name}: {}", top.join(", "));
            }
        }
    }
    o
}

fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x:.3}")
    }
}
