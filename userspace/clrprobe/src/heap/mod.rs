//! `clrprobe heap`: heap snapshots of a running .NET process (what is alive, what keeps it
//! alive) and `clrprobe heap diff` (what grew between two snapshots).
//!
//! A snapshot asks the runtime, over an EventPipe session, to run a blocking gen-2 GC and stream
//! its heap walk ([`take`]); the graph, dominators and root paths are computed by
//! `clrprobe_pipeline::heap`. Outputs: a text report (or `--json`), `PREFIX.heap.json` (the
//! snapshot, input of `heap diff`) and `PREFIX.heap.pb.gz` (pprof: objects and bytes by root
//! path). Files are written whole or not at all (a temporary file renamed into place).
mod files;
mod take;
mod text;

use std::{
    io::Write,
    path::{Path, PathBuf},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use clap::{Args, Subcommand};
use clrprobe_pipeline::heap::{HeapSummary, analyze, diff, heap_profile};

pub use files::{read_snapshot, write_atomically};
pub use take::{Progress, TakeError, TakeOptions, Taken, session_config, take};

/// `clrprobe heap`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct HeapCmd {
    #[command(subcommand)]
    pub sub: Option<HeapSub>,
    /// Process to snapshot.
    #[arg(short = 'p', long = "pid", required = true)]
    pub pid: Option<u32>,
    /// Output prefix: writes PREFIX.heap.json and PREFIX.heap.pb.gz (with --every:
    /// PREFIX.N.heap.json…). Default: heap-PID.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Print the snapshot as JSON instead of text (with --every: the diff of the first and last).
    #[arg(long)]
    pub json: bool,
    /// Types listed in the text report.
    #[arg(long, default_value_t = 15)]
    pub top: usize,
    /// Take a series: one snapshot every DURATION (`60s`, `5m`, `500ms`)…
    #[arg(long, value_parser = parse_duration, requires = "count")]
    pub every: Option<Duration>,
    /// …this many times; then the diff of the first and the last is printed.
    #[arg(long, requires = "every")]
    pub count: Option<u32>,
    /// Give up when a snapshot is not complete after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Session buffer size in MB (events dropped when it fills make the snapshot fail).
    #[arg(long, default_value_t = 256)]
    pub buffer_mb: u32,
    /// No progress line.
    #[arg(long)]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum HeapSub {
    /// What grew from snapshot A to snapshot B (PREFIX.heap.json files).
    Diff(HeapDiffCmd),
}

#[derive(Debug, Args)]
pub struct HeapDiffCmd {
    pub before: PathBuf,
    pub after: PathBuf,
    /// JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Types listed.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
}

/// `60s`, `5m`, `500ms`, `1h` or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("`{s}` is not a duration (use 60s, 5m, 500ms)"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("`{s}`: the duration must be positive"));
    }
    Ok(Duration::from_secs_f64(v * mult))
}

/// Runs `clrprobe heap …`; returns the process exit status (false: failed).
pub fn run(cmd: &HeapCmd, stop: &AtomicBool) -> anyhow::Result<bool> {
    if let Some(HeapSub::Diff(d)) = &cmd.sub {
        return run_diff(d);
    }
    let pid = cmd.pid.ok_or_else(|| anyhow::anyhow!("--pid is required"))?;
    let prefix = cmd.output.clone().unwrap_or_else(|| PathBuf::from(format!("heap-{pid}")));
    let opts = TakeOptions { pid, timeout: Duration::from_secs(cmd.timeout), buffer_mb: cmd.buffer_mb };
    let count = cmd.count.unwrap_or(1).max(1);
    eprintln!("clrprobe: the runtime of pid {pid} will run a blocking gen-2 GC and walk its heap; the process is paused meanwhile");
    let mut first: Option<HeapSummary> = None;
    let mut last: Option<HeapSummary> = None;
    for i in 1..=count {
        let started = Instant::now();
        let prefix_i = if count > 1 { PathBuf::from(format!("{}.{i}", prefix.display())) } else { prefix.clone() };
        let summary = snapshot(cmd, &opts, &prefix_i, stop)?;
        if first.is_none() {
            first = Some(summary.clone());
        }
        last = Some(summary);
        if i < count {
            let next = started + cmd.every.unwrap_or_default();
            while Instant::now() < next {
                if stop.load(Ordering::SeqCst) {
                    eprintln!("clrprobe: interrupted; {i} of {count} snapshots taken");
                    return Ok(true);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    if count > 1
        && let (Some(a), Some(b)) = (&first, &last)
    {
        let d = diff(a, b);
        if cmd.json {
            // One document for the series: the diff; each snapshot is in its PREFIX.N.heap.json.
            println!("{}", serde_json::to_string_pretty(&d)?);
        } else {
            println!("\n== snapshot 1 → {count}");
            print!("{}", text::diff(&d, cmd.top));
        }
    }
    Ok(true)
}

/// One snapshot: take, analyze, write the files, print the report.
fn snapshot(cmd: &HeapCmd, opts: &TakeOptions, prefix: &Path, stop: &AtomicBool) -> anyhow::Result<HeapSummary> {
    let quiet = cmd.quiet;
    let taken = take(opts, stop, |p, elapsed| {
        if !quiet {
            let objects = p.objects.load(Ordering::Relaxed);
            let state = if p.walk_done.load(Ordering::Relaxed) {
                "walk done, reading the rest"
            } else if p.gc_started.load(Ordering::Relaxed) {
                "walking"
            } else {
                "waiting for the GC"
            };
            eprint!(
                "\rclrprobe: {:5.1} s  {state}: {objects} objects, {} references      ",
                elapsed.as_secs_f64(),
                p.references.load(Ordering::Relaxed)
            );
            let _ = std::io::stderr().flush();
        }
    });
    if !quiet {
        eprintln!();
    }
    let Taken { graph, walk, builder_bytes } = taken?;
    let analysis_started = Instant::now();
    let analysis = analyze(&graph);
    let profile = heap_profile(&graph, &analysis)?;
    let mut summary = analysis.summary.clone();
    summary.walk = walk;
    let analysis_ms = analysis_started.elapsed().as_secs_f64() * 1e3;
    let json_path = PathBuf::from(format!("{}.heap.json", prefix.display()));
    let pprof_path = PathBuf::from(format!("{}.heap.pb.gz", prefix.display()));
    write_atomically(&json_path, |w| serde_json::to_writer(w, &summary).map_err(std::io::Error::other))?;
    write_atomically(&pprof_path, |w| clrprobe_profile::pprof::to_writer(&profile, w).map_err(std::io::Error::other))?;
    // With --json a series prints one JSON document at its end (the diff).
    let series = cmd.count.is_some_and(|c| c > 1);
    if !cmd.json {
        print!("{}", text::summary(&summary, cmd.top));
    } else if !series {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    }
    eprintln!("clrprobe: wrote {}", json_path.display());
    eprintln!("clrprobe: wrote {}", pprof_path.display());
    eprintln!(
        "clrprobe: analysis {:.0} ms; graph {} MB, collector {} MB; peak RSS {}",
        analysis_ms,
        graph.memory_bytes() >> 20,
        builder_bytes >> 20,
        peak_rss().map(|kb| format!("{} MB", kb / 1024)).unwrap_or_else(|| "unknown".into())
    );
    Ok(summary)
}

fn run_diff(d: &HeapDiffCmd) -> anyhow::Result<bool> {
    let a = read_snapshot(&d.before)?;
    let b = read_snapshot(&d.after)?;
    let delta = diff(&a, &b);
    if d.json {
        println!("{}", serde_json::to_string_pretty(&delta)?);
    } else {
        print!("{}", text::diff(&delta, d.top));
    }
    Ok(true)
}

/// This process's peak resident set (kB), from /proc/self/status.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("0s").is_err());
    }
}
