//! `cargo xtask bench-agent`: `clrprobe agent --all` for N minutes on this host with three busy
//! .NET 8 processes (one CPU-bound, two allocating and throwing), scraped as Prometheus and a
//! continuous profiler would (`/metrics` every 15 s; `profile?seconds=10`, `allocs`, `mutex`,
//! `block` every minute). Prints the workloads' slowdown against runs without the agent just
//! before and after, the agent's CPU (share of one core) and its RSS each minute.
//!
//! First, the targets' slowdown measured apart (`--pairs N`, 0 skips it): N sets of rounds,
//! alone, under the floor (the agent's EventPipe sessions, opened by `clrprobe trace` clients
//! that only copy the streams: what the runtime's event writing costs whoever reads it) and
//! under a freshly started agent, in turning order, of three Bench processes
//! (cpu, alloc, throw: tests/workloads/Bench.cs) side by side, or with `--apart` each on its own
//! (three busy processes and their clients oversubscribe this 2-core host), counting rounds
//! after a warm-up that covers the agent finding and setting them up. Each prints its rounds per second and per second of its
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

use crate::{
    dotnet, ebpf, util,
    util::{median, load},
};

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
    spawn_agent_following(bin, port, agent_args, &["--all", "--parent", &std::process::id().to_string()])
}

/// Starts `clrprobe agent` following what `follow` says (`--all --parent PID`, `-p PID`).
fn spawn_agent_following(bin: &std::path::Path, port: u16, agent_args: &str, follow: &[&str]) -> Result<std::process::Child> {
    let agent = Command::new(bin)
        .args(["agent", "--listen", &format!("127.0.0.1:{port}")])
        .args(follow)
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
/// Seconds counted per round, and the default warm-up before (the agent finds a process within
/// 250 ms and sets it up in about a second on a loaded host). Rounds after a 5 s warm-up count
/// the start of what the sessions cost, the System.Runtime counters' code being compiled and
/// tiered up in the target over its first ~30 polls (150 s at 5 s) included; `--warmup` counts
/// later.
const BENCH_SECONDS: u64 = 20;
pub const BENCH_WARMUP: u64 = 5;

/// The EventPipe sessions the agent opens in a .NET 8 process (`agent --print-sessions`),
/// opened without the agent by `clrprobe trace` clients that only copy the stream to a
/// scratch file: the targets' floor.
struct Floor {
    buffer_mb: String,
    session: String,
    /// A second session for the process's life, without rundown (the exceptions').
    also: Option<String>,
    /// (seconds open, period in seconds, providers) of the allocation slices.
    slice: Option<(u64, u64, String)>,
}

impl Floor {
    fn of(bin: &std::path::Path, agent_args: &str) -> Result<Floor> {
        let out = Command::new(bin).args(["agent", "--print-sessions"]).args(agent_args.split_whitespace()).output().context("clrprobe agent --print-sessions")?;
        if !out.status.success() {
            bail!("clrprobe agent --print-sessions failed (a build without it?): {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = |key: &str| text.lines().find_map(|l| l.strip_prefix(key)).map(str::trim).map(str::to_string);
        let slice = line("slice ").map(|l| -> Result<(u64, u64, String)> {
            let mut f = l.splitn(3, ' ');
            let mut num = || -> Result<u64> { f.next().and_then(|x| x.parse().ok()).context("slice seconds") };
            let (open, period) = (num()?, num()?);
            Ok((open, period, f.next().context("slice providers")?.to_string()))
        });
        Ok(Floor {
            buffer_mb: line("buffer-mb ").context("no buffer-mb from --print-sessions")?,
            session: line("session ").context("no session from --print-sessions")?,
            also: line("also "),
            slice: slice.transpose()?,
        })
    }

    /// Opens the sessions in `pids` as the agent does: its own session for the process's
    /// life, an allocation slice at once and then every period (the agent opens the first at
    /// set-up). Returns when `done` is set; the clients end with their targets.
    fn run(&self, bin: &std::path::Path, pids: &[u32], tmp: &std::path::Path, done: &std::sync::atomic::AtomicBool) -> Result<()> {
        let trace = |pid: u32, providers: &str, file: &str, extra: &[&str]| -> Result<std::process::Child> {
            Command::new(bin)
                .args(["trace", "-p", &pid.to_string(), "--providers", providers, "--buffer-mb", &self.buffer_mb])
                .args(extra)
                .arg("-o")
                .arg(tmp.join(format!("{file}-{pid}.nettrace")))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting clrprobe trace (the floor)")
        };
        let mut clients = Vec::new();
        for &pid in pids {
            clients.push(trace(pid, &self.session, "floor", &[])?);
            if let Some(also) = &self.also {
                clients.push(trace(pid, also, "also", &["--no-rundown"])?);
            }
        }
        let start = Instant::now();
        let mut next = Duration::ZERO;
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            if let Some((open, period, providers)) = &self.slice
                && start.elapsed() >= next
            {
                next += Duration::from_secs(*period);
                let seconds = open.to_string();
                for &pid in pids {
                    clients.push(trace(pid, providers, "slice", &["--no-rundown", "-d", &seconds])?);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut failed = 0;
        for mut c in clients {
            // They end with their targets (or their slice); a client still there is stopped.
            let until = Instant::now() + Duration::from_secs(10);
            while c.try_wait().ok().flatten().is_none() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            if c.try_wait().ok().flatten().is_none() {
                let _ = Command::new("kill").args(["-INT", &c.id().to_string()]).status();
            }
            if !c.wait().is_ok_and(|s| s.success()) {
                failed += 1;
            }
        }
        // A floor that did not attach would read as the apps alone.
        if failed > 0 {
            bail!("{failed} of the floor's trace clients failed");
        }
        Ok(())
    }
}

/// Starts one Bench process of `mode`, its rounds counted after the warm-up.
fn bench_start(mode: &str, warmup: u64) -> Result<Running> {
    let mut w = Workload::new("Bench", Runtime::Net8).arg(mode).arg(BENCH_SECONDS).arg(warmup);
    w.ready_timeout = Duration::from_secs(120);
    w.start().context("starting a Bench workload")
}

/// (rounds per second, rounds per CPU-second) of a Bench process once it ends.
fn bench_rates(mut w: Running, warmup: u64) -> Result<(f64, f64)> {
    w.wait(Duration::from_secs(BENCH_SECONDS + warmup + 60));
    let field = |name: &str| -> Result<f64> {
        w.output()
            .iter()
            .find_map(|l| l.split_whitespace().find_map(|f| f.strip_prefix(name)).and_then(|r| r.parse().ok()))
            .with_context(|| format!("a Bench workload did not print {name}"))
    };
    Ok((field("per_second=")?, field("per_cpu_second=")?))
}

/// The floor's sessions opened in `pids` on a thread of their own until `done` is set.
fn floor_thread(f: &Floor, bin: &std::path::Path, pids: Vec<u32>, done: std::sync::Arc<std::sync::atomic::AtomicBool>) -> std::thread::JoinHandle<Result<()>> {
    let tmp = util::scratch_dir("bench-agent");
    let (session, also, slice, buffer_mb, bin) = (f.session.clone(), f.also.clone(), f.slice.clone(), f.buffer_mb.clone(), bin.to_path_buf());
    std::thread::spawn(move || -> Result<()> {
        let tmp = tmp?;
        let r = Floor { buffer_mb, session, also, slice }.run(&bin, &pids, &tmp, &done);
        let _ = std::fs::remove_dir_all(&tmp);
        r
    })
}

/// (rounds per second, rounds per CPU-second) of each of `modes` (Bench processes run side by
/// side) in one round; `floor`: its sessions opened in them meanwhile.
fn bench_round(modes: &[&str], floor: Option<(&Floor, &std::path::Path)>, warmup: u64) -> Result<Vec<(f64, f64)>> {
    let ws: Vec<Running> = modes.iter().map(|m| bench_start(m, warmup)).collect::<Result<_>>()?;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients = floor.map(|(f, bin)| floor_thread(f, bin, ws.iter().map(|w| w.pid).collect(), done.clone()));
    let out = ws.into_iter().map(|w| bench_rates(w, warmup)).collect::<Result<Vec<_>>>();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    if let Some(c) = clients {
        c.join().map_err(|_| anyhow::anyhow!("the floor's thread panicked"))?.context("the floor")?;
    }
    out
}

/// The targets' slowdown under the agent and under its floor (its EventPipe sessions opened
/// by clients that only read, without the agent's CPU sampling, perf maps and /proc reads):
/// `pairs` rounds of each, the order turning from one set to the next.
/// `variant`: more agent arguments for a fourth configuration (what a setting adds beyond
/// the floor, in the same rounds).
fn slowdown(bin: &std::path::Path, pairs: usize, agent_args: &str, variant: &str, port: u16, apart: bool, warmup: u64) -> Result<()> {
    let how = if apart { "one at a time, nothing else of the benchmark running" } else { "side by side" };
    println!("slowdown: {pairs} sets of {BENCH_SECONDS} s rounds ({} {how}, {warmup} s warm-up) alone, under the agent's sessions alone (floor) and under a new `agent --all` each; load {}", BENCH_MODES.join(", "), load());
    let floor = match Floor::of(bin, agent_args) {
        Ok(f) => {
            println!("floor: session {}; also {:?}; slices {:?}", f.session, f.also, f.slice.as_ref().map(|s| (s.0, s.1, &s.2)));
            Some(f)
        }
        Err(e) => {
            println!("no floor: {e:#}");
            None
        }
    };
    let variant_args = format!("{agent_args} {variant}");
    let mut configs = vec!["alone", "floor", "agent"];
    if !variant.trim().is_empty() {
        println!("variant: the agent with {:?} added", variant.trim());
        configs.push("agent+variant");
    }
    let configs = configs;
    // The Bench processes of one round: all three, or (apart) each alone in rounds of its own.
    let groups: Vec<Vec<usize>> = if apart { (0..BENCH_MODES.len()).map(|m| vec![m]).collect() } else { vec![(0..BENCH_MODES.len()).collect()] };
    // Per config, per mode: (rate, CPU rate) of each round.
    let n = BENCH_MODES.len();
    let mut results: Vec<Vec<Vec<(f64, f64)>>> = vec![vec![Vec::new(); n]; configs.len()];
    // Per group: the agent's CPU (share of one core) in each of its rounds.
    let mut agent_cpu: Vec<Vec<f64>> = vec![Vec::new(); groups.len()];
    let mut round = 0;
    for set in 0..pairs {
        for (g, group) in groups.iter().enumerate() {
            let modes: Vec<&str> = group.iter().map(|&m| BENCH_MODES[m]).collect();
            // Each set in another order (the three rotations, forwards and backwards), so drift
            // in the host's load falls on every configuration alike.
            let mut order: Vec<usize> = (0..configs.len()).map(|i| (i + set / 2) % configs.len()).collect();
            if set % 2 == 1 {
                order.reverse();
            }
            for c in order {
                if c == 1 && floor.is_none() {
                    continue;
                }
                let rates = match c {
                    2 | 3 => {
                        let mut agent = spawn_agent(bin, port, if c == 3 { &variant_args } else { agent_args })?;
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
                        let r = bench_round(&modes, None, warmup);
                        done.store(true, std::sync::atomic::Ordering::SeqCst);
                        let _ = scraper.join();
                        let (_, c1) = usage(agent.id());
                        if c == 2 {
                            agent_cpu[g].push((c1 - c0) * 100.0 / t.elapsed().as_secs_f64());
                        }
                        let _ = Command::new("kill").args(["-TERM", &agent.id().to_string()]).status();
                        let _ = agent.wait();
                        r?
                    }
                    1 => bench_round(&modes, floor.as_ref().map(|f| (f, bin)), warmup)?,
                    _ => bench_round(&modes, None, warmup)?,
                };
                for (&m, r) in group.iter().zip(rates) {
                    results[c][m].push(r);
                }
                round += 1;
                println!(
                    "  round {round:>2} {:<5}: {}; load {}",
                    configs[c],
                    group.iter().map(|&m| { let v = &results[c][m]; format!("{} {:.0}/s {:.0}/CPU-s", BENCH_MODES[m], v.last().unwrap().0, v.last().unwrap().1) }).collect::<Vec<_>>().join(", "),
                    load()
                );
            }
        }
    }
    let med = |c: usize, m: usize, f: fn(&(f64, f64)) -> f64| median(&results[c][m].iter().map(f).collect::<Vec<_>>());
    // Spread: the slowdowns of the single rounds against the median alone (min..max).
    let spread = |c: usize, m: usize| {
        let a = med(0, m, |r| r.1);
        let v: Vec<f64> = results[c][m].iter().map(|r| (1.0 - r.1 / a) * 100.0).collect();
        format!("{:+.1}..{:+.1}", v.iter().cloned().fold(f64::INFINITY, f64::min), v.iter().cloned().fold(f64::NEG_INFINITY, f64::max))
    };
    println!("Slowdown per app CPU-second (medians of the rounds; spread: single rounds against the median alone); per wall second in the last columns");
    let var = configs.len() > 3;
    println!(
        "| workload | alone (rounds/CPU-s) | floor | agent | agent − floor (points) | floor spread | agent spread | per s: floor | per s: agent | rounds each |{}",
        if var { " agent+variant | its spread |" } else { "" }
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |{}", if var { " ---: | ---: |" } else { "" });
    for m in 0..n {
        let a_cpu = med(0, m, |r| r.1);
        let f_cpu = med(1, m, |r| r.1);
        let w_cpu = med(2, m, |r| r.1);
        let (a_rate, f_rate, w_rate) = (med(0, m, |r| r.0), med(1, m, |r| r.0), med(2, m, |r| r.0));
        let sd = |x: f64, base: f64| (1.0 - x / base) * 100.0;
        println!(
            "| {} | {a_cpu:.0} | {:+.2} % | {:+.2} % | {:+.2} | {} | {} | {:+.2} % | {:+.2} % | {} |{}",
            BENCH_MODES[m],
            sd(f_cpu, a_cpu),
            sd(w_cpu, a_cpu),
            sd(w_cpu, a_cpu) - sd(f_cpu, a_cpu),
            if results[1][m].is_empty() { "-".into() } else { spread(1, m) },
            spread(2, m),
            sd(f_rate, a_rate),
            sd(w_rate, a_rate),
            results[0][m].len(),
            if var { format!(" {:+.2} % | {} |", sd(med(3, m, |r| r.1), a_cpu), spread(3, m)) } else { String::new() }
        );
    }
    for (group, cpu) in groups.iter().zip(&agent_cpu) {
        let who = if apart { format!(" following {} alone", BENCH_MODES[group[0]]) } else { String::new() };
        println!("agent CPU during the rounds{who}: median {:.2} % of one core (min {:.2}, max {:.2})", median(cpu), cpu.iter().cloned().fold(f64::INFINITY, f64::min), cpu.iter().cloned().fold(0.0, f64::max));
    }
    Ok(())
}

/// `--paired`: each round runs two copies of one Bench mode at once, one alone and one under
/// the floor's clients or a new agent following it only (`-p PID`), so both meet the same host
/// load, caches and CPU steal: the slowdown of a round is 1 − (the followed copy's rounds per
/// CPU-second / the other's). Which copy starts first alternates; "none" (both alone) shows
/// what the design reads when nothing differs.
fn paired(bin: &std::path::Path, pairs: usize, agent_args: &str, port: u16, warmup: u64) -> Result<()> {
    println!("paired: {pairs} sets of {BENCH_SECONDS} s rounds ({warmup} s warm-up), two copies of each of {} at once, one alone and one followed; load {}", BENCH_MODES.join(", "), load());
    let floor = Floor::of(bin, agent_args)?;
    println!("floor: session {}; also {:?}; slices {:?}", floor.session, floor.also, floor.slice.as_ref().map(|s| (s.0, s.1, &s.2)));
    let configs = ["none", "floor", "agent"];
    // Per config, per mode: the slowdown (%) of each round.
    let mut results: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); BENCH_MODES.len()]; configs.len()];
    let mut agent_cpu: Vec<Vec<f64>> = vec![Vec::new(); BENCH_MODES.len()];
    let mut round = 0;
    for set in 0..pairs {
        for (m, mode) in BENCH_MODES.iter().enumerate() {
            for k in 0..configs.len() {
                let c = (k + set) % configs.len();
                let first = bench_start(mode, warmup)?;
                let second = bench_start(mode, warmup)?;
                // The followed copy: the first started in even sets, the second in odd ones.
                let (alone, followed) = if set % 2 == 0 { (second, first) } else { (first, second) };
                let pid = followed.pid;
                let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let clients = (c == 1).then(|| floor_thread(&floor, bin, vec![pid], done.clone()));
                let agent = if c == 2 { Some((spawn_agent_following(bin, port, agent_args, &["-p", &pid.to_string()])?, Instant::now())) } else { None };
                let c0 = agent.as_ref().map_or(0.0, |(a, _)| usage(a.id()).1);
                let (a, f) = (bench_rates(alone, warmup), bench_rates(followed, warmup));
                done.store(true, std::sync::atomic::Ordering::SeqCst);
                if let Some((mut agent, t)) = agent {
                    agent_cpu[m].push((usage(agent.id()).1 - c0) * 100.0 / t.elapsed().as_secs_f64());
                    let _ = Command::new("kill").args(["-TERM", &agent.id().to_string()]).status();
                    let _ = agent.wait();
                }
                if let Some(c) = clients {
                    c.join().map_err(|_| anyhow::anyhow!("the floor's thread panicked"))?.context("the floor")?;
                }
                let (a, f) = (a?, f?);
                let sd = (1.0 - f.1 / a.1) * 100.0;
                results[c][m].push(sd);
                round += 1;
                println!("  round {round:>2} {mode:<5} {:<5}: alone {:.0}/CPU-s, followed {:.0}/CPU-s: {sd:+.2} %; load {}", configs[c], a.1, f.1, load());
            }
        }
    }
    println!("Slowdown per app CPU-second of the followed copy against the one beside it (medians of the rounds; min..max)");
    println!("| workload | none | floor | agent | agent − floor (points) | none spread | floor spread | agent spread | rounds each |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let range = |v: &[f64]| format!("{:+.1}..{:+.1}", v.iter().cloned().fold(f64::INFINITY, f64::min), v.iter().cloned().fold(f64::NEG_INFINITY, f64::max));
    for (m, mode) in BENCH_MODES.iter().enumerate() {
        let med = |c: usize| median(&results[c][m]);
        println!(
            "| {mode} | {:+.2} % | {:+.2} % | {:+.2} % | {:+.2} | {} | {} | {} | {} |",
            med(0),
            med(1),
            med(2),
            med(2) - med(1),
            range(&results[0][m]),
            range(&results[1][m]),
            range(&results[2][m]),
            results[0][m].len()
        );
    }
    for (mode, cpu) in BENCH_MODES.iter().zip(&agent_cpu) {
        println!("agent CPU following one {mode} copy: median {:.2} % of one core (min {:.2}, max {:.2})", median(cpu), cpu.iter().cloned().fold(f64::INFINITY, f64::min), cpu.iter().cloned().fold(0.0, f64::max));
    }
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

/// The slowdown rounds: `pairs` sets (0: none), each Bench process on its own (`apart`) or
/// the three side by side.
pub struct Rounds {
    pub pairs: usize,
    pub apart: bool,
    pub paired: bool,
    /// Seconds each Bench process runs before its rounds are counted.
    pub warmup: u64,
}

pub fn run(minutes: u64, baseline_s: u64, scrape_s: u64, agent_args: &str, variant: &str, port: u16, rounds: Rounds) -> Result<()> {
    let Rounds { pairs, apart, paired: pair, warmup } = rounds;
    dotnet::setup()?;
    let bin = ebpf::build_userspace()?;
    if !util::is_root() {
        bail!("the benchmark loads BPF programs: run it as root");
    }
    // SAFETY: single-threaded at this point.
    unsafe { std::env::set_var("CLRPROBE_CACHE", crate::cache::dir()) };
    if pairs > 0 && pair {
        paired(&bin, pairs, agent_args, port, warmup)?;
    } else if pairs > 0 {
        slowdown(&bin, pairs, agent_args, variant, port, apart, warmup)?;
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
