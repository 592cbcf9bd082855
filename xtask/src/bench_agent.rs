//! `cargo xtask bench-agent`: `clrprobe agent --all` for N minutes on this host with three busy
//! .NET 8 processes (one CPU-bound, two allocating and throwing), scraped as Prometheus and a
//! continuous profiler would (`/metrics` every 15 s; `profile?seconds=10`, `allocs`, `mutex`,
//! `block` every minute). Prints the workloads' slowdown against runs without the agent just
//! before and after, the agent's CPU (share of one core) and its RSS each minute.
//!
//! First, the targets' slowdown measured apart (`--pairs N`, 0 skips it): N pairs of rounds,
//! alone and under a freshly started agent in alternating order, of three Bench processes
//! (cpu, alloc, throw: tests/workloads/Bench.cs) counting rounds after a warm-up that covers the
//! agent finding and setting them up. Each prints its rounds per second and per second of its
//! own CPU time: the second is what the agent costs the app's threads (the runtime's event
//! writing included) whatever else the host runs, the first adds the CPU the agent takes from
//! them on this 2-core machine.
use std::{
    io::{Read, Write},
    net::TcpStream,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use clrprobe_tests::{Runtime, Running, Workload};

use crate::{dotnet, ebpf, util};

const WORKLOADS: [&str; 3] = ["Cpu", "AllocThrow", "AllocThrow"];

fn start(seconds: u64) -> Result<Vec<Running>> {
    WORKLOADS.iter().map(|w| Workload::new(w, Runtime::Net8).arg(seconds).start().context("starting a workload")).collect()
}

/// Rounds per second of each workload once it ends.
fn rates(ws: Vec<Running>, seconds: u64) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    for mut w in ws {
        w.wait(Duration::from_secs(seconds + 60));
        let rounds: f64 = w
            .output()
            .iter()
            .find_map(|l| l.strip_prefix("rounds=").and_then(|r| r.split_whitespace().next()).and_then(|r| r.parse().ok()))
            .context("a workload did not print rounds=")?;
        out.push(rounds / seconds as f64);
    }
    Ok(out)
}

/// Starts `clrprobe agent --all` following this benchmark's .NET processes only (`--parent`:
/// CPU is sampled host-wide all the same, other .NET processes on the host are left alone);
/// returns after giving it 2 s to load.
fn spawn_agent(bin: &std::path::Path, port: u16, agent_args: &str) -> Result<std::process::Child> {
    let agent = Command::new(bin)
        .args(["agent", "--all", "--listen", &format!("127.0.0.1:{port}"), "--parent", &std::process::id().to_string()])
        .args(agent_args.split_whitespace())
        .stdout(Stdio::null())
        .stderr(agent_log()?)
        .spawn()
        .context("starting clrprobe agent")?;
    std::thread::sleep(Duration::from_secs(2));
    Ok(agent)
}

/// The agent's stderr: appended to `BENCH_AGENT_LOG` when set (with `RUST_LOG=info`, its
/// census of what it holds each minute), else dropped.
fn agent_log() -> Result<Stdio> {
    let Some(path) = std::env::var_os("BENCH_AGENT_LOG") else { return Ok(Stdio::null()) };
    let f = std::fs::OpenOptions::new().create(true).append(true).open(&path).with_context(|| format!("opening {}", path.to_string_lossy()))?;
    Ok(Stdio::from(f))
}

/// Bench.cs modes run side by side in each round of the slowdown part.
const BENCH_MODES: [&str; 3] = ["cpu", "alloc", "throw"];
/// Seconds counted per round, and the warm-up before (the agent finds a process within 250 ms
/// and sets it up in about a second on a loaded host).
const BENCH_SECONDS: u64 = 20;
const BENCH_WARMUP: u64 = 5;

/// (rounds per second, rounds per CPU-second) of each Bench mode in one round.
fn bench_round() -> Result<Vec<(f64, f64)>> {
    let ws: Vec<Running> = BENCH_MODES
        .iter()
        .map(|m| {
            let mut w = Workload::new("Bench", Runtime::Net8).arg(m).arg(BENCH_SECONDS).arg(BENCH_WARMUP);
            w.ready_timeout = Duration::from_secs(120);
            w.start().context("starting a Bench workload")
        })
        .collect::<Result<_>>()?;
    let mut out = Vec::new();
    for mut w in ws {
        w.wait(Duration::from_secs(BENCH_SECONDS + BENCH_WARMUP + 60));
        let field = |name: &str| -> Result<f64> {
            w.output()
                .iter()
                .find_map(|l| l.split_whitespace().find_map(|f| f.strip_prefix(name)).and_then(|r| r.parse().ok()))
                .with_context(|| format!("a Bench workload did not print {name}"))
        };
        out.push((field("per_second=")?, field("per_cpu_second=")?));
    }
    Ok(out)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { f64::NAN } else { v[v.len() / 2] }
}

/// The targets' slowdown under the agent: `pairs` alone/agent pairs, order alternating.
fn slowdown(bin: &std::path::Path, pairs: usize, agent_args: &str, port: u16) -> Result<()> {
    println!("slowdown: {pairs} pairs of {BENCH_SECONDS} s rounds ({} side by side, {BENCH_WARMUP} s warm-up), alone and under a new `agent --all` each; load {}", BENCH_MODES.join(", "), load());
    // Per mode: (alone, with) rates and CPU rates.
    let n = BENCH_MODES.len();
    let mut alone: Vec<Vec<(f64, f64)>> = vec![Vec::new(); n];
    let mut with: Vec<Vec<(f64, f64)>> = vec![Vec::new(); n];
    let mut agent_cpu = Vec::new();
    for i in 0..pairs * 2 {
        // ABBA: alone first in even pairs, the agent first in odd ones.
        let under_agent = (i % 2 == 1) ^ ((i / 2) % 2 == 1);
        let rates = if under_agent {
            let mut agent = spawn_agent(bin, port, agent_args)?;
            let t = Instant::now();
            let (_, c0) = usage(agent.id());
            // Scraped as Prometheus would, every 5 s, on its own thread.
            let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let scraper = {
                let done = done.clone();
                std::thread::spawn(move || {
                    while !done.load(std::sync::atomic::Ordering::SeqCst) {
                        get(port, "/metrics");
                        for _ in 0..25 {
                            if done.load(std::sync::atomic::Ordering::SeqCst) {
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(200));
                        }
                    }
                })
            };
            let r = bench_round();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = scraper.join();
            let (_, c1) = usage(agent.id());
            agent_cpu.push((c1 - c0) * 100.0 / t.elapsed().as_secs_f64());
            let _ = Command::new("kill").args(["-TERM", &agent.id().to_string()]).status();
            let _ = agent.wait();
            r?
        } else {
            bench_round()?
        };
        for (m, r) in rates.into_iter().enumerate() {
            if under_agent { with[m].push(r) } else { alone[m].push(r) }
        }
        println!(
            "  round {:>2} {:<5}: {}; load {}",
            i + 1,
            if under_agent { "agent" } else { "alone" },
            BENCH_MODES.iter().zip(if under_agent { &with } else { &alone }).map(|(m, v)| format!("{m} {:.0}/s {:.0}/CPU-s", v.last().unwrap().0, v.last().unwrap().1)).collect::<Vec<_>>().join(", "),
            load()
        );
    }
    println!("| workload | alone (rounds/s) | slowdown | alone (rounds/CPU-s) | slowdown per app CPU-s | pairs |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for m in 0..n {
        let a_rate = median(&mut alone[m].iter().map(|r| r.0).collect::<Vec<_>>());
        let w_rate = median(&mut with[m].iter().map(|r| r.0).collect::<Vec<_>>());
        let a_cpu = median(&mut alone[m].iter().map(|r| r.1).collect::<Vec<_>>());
        let w_cpu = median(&mut with[m].iter().map(|r| r.1).collect::<Vec<_>>());
        println!("| {} | {a_rate:.0} | {:+.2} % | {a_cpu:.0} | {:+.2} % | {pairs} |", BENCH_MODES[m], (1.0 - w_rate / a_rate) * 100.0, (1.0 - w_cpu / a_cpu) * 100.0);
    }
    println!("agent CPU during the rounds: median {:.2} % of one core (min {:.2}, max {:.2})", median(&mut agent_cpu.clone()), agent_cpu.iter().cloned().fold(f64::INFINITY, f64::min), agent_cpu.iter().cloned().fold(0.0, f64::max));
    Ok(())
}

fn get(port: u16, path: &str) -> usize {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return 0 };
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = write!(s, "GET {path} HTTP/1.0\r\n\r\n");
    let mut b = Vec::new();
    let _ = s.read_to_end(&mut b);
    b.len()
}

/// (RSS bytes, CPU seconds) of `pid`.
fn usage(pid: u32) -> (u64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok()).unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
    let hz = clock_ticks();
    let ticks: f64 = f.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0) + f.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    (rss * 1024, ticks / hz)
}

/// The kernel's clock ticks per second (USER_HZ) for /proc times.
fn clock_ticks() -> f64 {
    Command::new("getconf").arg("CLK_TCK").output().ok().and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok()).unwrap_or(100.0)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

pub fn run(minutes: u64, baseline_s: u64, scrape_s: u64, agent_args: &str, port: u16, pairs: usize) -> Result<()> {
    dotnet::setup()?;
    let bin = ebpf::build_userspace()?;
    if !util::is_root() {
        bail!("the benchmark loads BPF programs: run it as root");
    }
    // SAFETY: single-threaded at this point.
    unsafe { std::env::set_var("CLRPROBE_CACHE", crate::cache::dir()) };
    if pairs > 0 {
        slowdown(&bin, pairs, agent_args, port)?;
    }
    if minutes == 0 {
        return Ok(());
    }
    println!("load average before: {}", load());
    let before = rates(start(baseline_s)?, baseline_s)?;
    println!("without the agent ({baseline_s} s): {before:.0?} rounds/s; load {}", load());
    let mut agent = spawn_agent(&bin, port, agent_args)?;
    let pid = agent.id();
    let seconds = minutes * 60;
    // The workloads outlive the last minute's line (their start-up takes seconds).
    let run_s = seconds + 20;
    let ws = start(run_s)?;
    let t0 = Instant::now();
    let (_, cpu0) = usage(pid);
    let mut per_minute = Vec::new();
    println!("agent arguments: {agent_args:?}; /metrics every {scrape_s} s");
    // The scrapes on their own thread: a slow answer (a profile naming every binary of a
    // loaded host) must not delay the minute lines.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scraper = {
        let done = done.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            let mut next_scrape = Duration::ZERO;
            let mut next_profile = Duration::from_secs(30);
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let e = t.elapsed();
                if e >= next_scrape {
                    next_scrape = e + Duration::from_secs(scrape_s.max(1));
                    if get(port, "/metrics") == 0 {
                        eprintln!("{:.0} s: /metrics: no answer", e.as_secs_f64());
                    }
                }
                if e >= next_profile {
                    next_profile += Duration::from_secs(60);
                    let sizes: Vec<usize> = ["/debug/pprof/profile?seconds=10", "/debug/pprof/allocs", "/debug/pprof/mutex", "/debug/pprof/block"].iter().map(|p| get(port, p)).collect();
                    eprintln!("{:.0} s: profiles {sizes:?} bytes in {:.1} s", e.as_secs_f64(), (t.elapsed() - e).as_secs_f64());
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let mut last_cpu = cpu0;
    for m in 1..=minutes {
        std::thread::sleep(Duration::from_secs(60 * m).saturating_sub(t0.elapsed()));
        let e = t0.elapsed();
        {
            let (rss, cpu) = usage(pid);
            per_minute.push((rss, cpu));
            println!(
                "minute {:>2}: agent RSS {:.1} MB, CPU {:.2} % of a core so far, {:.2} % this minute; load {}",
                per_minute.len(),
                rss as f64 / 1e6,
                (cpu - cpu0) * 100.0 / e.as_secs_f64(),
                (cpu - last_cpu) * 100.0 / 60.0,
                load()
            );
            last_cpu = cpu;
        }
    }
    let (rss_end, cpu_end) = usage(pid);
    let elapsed = t0.elapsed().as_secs_f64();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = scraper.join();
    let with = rates(ws, run_s)?;
    // SIGTERM: the agent stops its sessions and switches the perf maps off.
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    let _ = agent.wait();
    let after = rates(start(baseline_s)?, baseline_s)?;
    println!("with the agent ({seconds} s): {with:.0?} rounds/s; without, after: {after:.0?}");
    for (i, w) in WORKLOADS.iter().enumerate() {
        let base = (before[i] + after[i]) / 2.0;
        println!("{w:<11} slowdown {:+.2} % (against the mean of the runs before and after)", (1.0 - with[i] / base) * 100.0);
    }
    let cpu_pct = (cpu_end - cpu0) * 100.0 / elapsed;
    println!("agent CPU: {cpu_pct:.2} % of one core over {minutes} min");
    if per_minute.len() >= 2 {
        let (rss2, cpu2) = per_minute[1];
        let rss_end = per_minute.last().map_or(rss_end, |m| m.0);
        let growth = rss_end as f64 / rss2 as f64 - 1.0;
        println!(
            "agent RSS: minute 2 {:.1} MB, minute {minutes} {:.1} MB ({:+.1} %); CPU from minute 2 to the end {:.2} % of one core",
            rss2 as f64 / 1e6,
            rss_end as f64 / 1e6,
            growth * 100.0,
            (cpu_end - cpu2) * 100.0 / (elapsed - 120.0).max(1.0)
        );
    }
    println!("load average after: {}", load());
    Ok(())
}
