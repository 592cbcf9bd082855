//! `cargo xtask soak --minutes N`: `clrprobe record --all` (every kind, release build) for N
//! minutes while short-lived .NET 8 processes start and exit every few seconds (EarlyExit, busy
//! for 2–6 s, every 3 s; a Sleeper every 15 s). clrprobe is scoped with `--parent` to this
//! soak's own processes, so other .NET processes on the host keep their perf maps as they are.
//! Prints clrprobe's RSS, peak RSS, open fds and threads every `--sample-seconds`, then stops it
//! with SIGINT and prints the time to exit and what was left behind (perf maps, jitdumps,
//! /run/clrprobe entries of the soak's processes, temporary files in the output directory).
//! `--busy N` runs N CPU-bound .NET processes throughout instead (the 20-process bound:
//! `--busy 20 --minutes 1 --sample-seconds 10`).
use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context, Result, bail};
use clrprobe_tests::{Runtime, Workload};

use crate::{
    dotnet, ebpf, util,
    util::{load},
};

/// `--busy N`: clrprobe exits within this many seconds of SIGINT, everything written.
const BUSY_EXIT_S: f64 = 2.0;
/// `--busy N`: clrprobe's peak RSS while recording, MB.
const BUSY_RSS_MB: u64 = 64;

fn status_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// A workload started under `nice -n 10`, its output discarded.
fn spawn(w: &Workload) -> Result<Child> {
    let inner = w.command()?;
    let mut cmd = Command::new("nice");
    cmd.args(["-n", "10"]).arg(inner.get_program()).args(inner.get_args());
    cmd.current_dir(inner.get_current_dir().context("workload directory")?);
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    Ok(cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn()?)
}

/// Files a .NET process of the soak, started at `since`, may have left behind. Pids wrap
/// quickly here (pid_max 32768, thousands of processes an hour): a file of another process
/// that had the same pid earlier (another run's `record --` launch leaves jitdumps) was last
/// written before `since`, and is not counted (it goes to `older`).
fn leftovers(pid: u32, since: SystemTime, older: &mut Vec<String>) -> Vec<String> {
    let mut v = Vec::new();
    for p in [format!("/tmp/perf-{pid}.map"), format!("/tmp/perfinfo-{pid}.map"), format!("/tmp/jit-{pid}.dump")] {
        let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
        if m.modified().is_ok_and(|t| t + Duration::from_secs(1) < since) {
            older.push(p);
        } else {
            v.push(p);
        }
    }
    let prefix = format!("t-{pid}-");
    if let Ok(d) = std::fs::read_dir("/run/clrprobe") {
        v.extend(d.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&prefix)).map(|e| e.path().display().to_string()));
    }
    v
}

pub fn run(minutes: u64, sample_seconds: u64, every_ms: u64, busy: usize, extra: &[String]) -> Result<()> {
    dotnet::setup()?;
    // `SOAK_BIN=PATH`: that clrprobe binary, not a fresh release build.
    let bin = match std::env::var_os("SOAK_BIN") {
        Some(b) => std::path::PathBuf::from(b),
        None => ebpf::build_userspace()?,
    };
    if !util::is_root() {
        bail!("the soak loads BPF programs: run it as root");
    }
    // SAFETY: single-threaded at this point.
    unsafe { std::env::set_var("CLRPROBE_CACHE", crate::cache::dir()) };
    let early = Workload::new("EarlyExit", Runtime::Net8);
    let sleeper = Workload::new("Sleeper", Runtime::Net8).arg(30).arg(500);
    // Compiled before clrprobe starts (mcs is slow).
    early.command()?;
    sleeper.command()?;
    // `--busy N`: N CPU-bound processes for the whole run instead of short-lived ones, started
    // (and their runtimes up) before clrprobe.
    let hot = Workload::new("Cpu", Runtime::Net8).arg(minutes * 60 + 120);
    let mut busy_children: Vec<Child> = Vec::new();
    let busy_start = SystemTime::now();
    for _ in 0..busy {
        busy_children.push(spawn(&hot)?);
    }
    if busy > 0 {
        std::thread::sleep(Duration::from_secs(3));
    }
    let out = util::scratch_dir("soak")?;
    let me = std::process::id().to_string();
    let mut clrprobe = Command::new("nice")
        .args(["-n", "5"])
        .arg(&bin)
        .args(["record", "--all", "--parent", &me, "--format", "pprof", "--quiet", "--json"])
        .args(extra)
        .arg("-o")
        .arg(out.join("all"))
        // `SOAK_CLRPROBE_ENV="K=V …"`: environment for clrprobe alone (a heap profiler's preload).
        .envs(std::env::var("SOAK_CLRPROBE_ENV").unwrap_or_default().split_whitespace().filter_map(|kv| kv.split_once('=')))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(out.join("summary.json"))?)
        .stderr(std::fs::File::create(out.join("stderr.txt"))?)
        .spawn()
        .context("starting clrprobe")?;
    // `nice` execs clrprobe: same pid.
    let cp = clrprobe.id();
    println!("soak: clrprobe {} (pid {cp}) for {minutes} min, a process every {every_ms} ms; output in {}", bin.display(), out.display());
    let started = Instant::now();
    let total = Duration::from_secs(minutes * 60);
    let mut next_sample = Duration::from_secs(sample_seconds);
    let mut children: Vec<Child> = Vec::new();
    // (pid, when it was started) of every soak process.
    let mut pids: Vec<(u32, SystemTime)> = Vec::new();
    let mut seed = started.elapsed().as_nanos() as u64 ^ u64::from(std::process::id());
    let sample = |t: &str, n: usize| {
        println!(
            "t={t} rss_kb={} hwm_kb={} fds={} threads={} started={n} load={}",
            status_kb(cp, "VmRSS:"),
            status_kb(cp, "VmHWM:"),
            count(&format!("/proc/{cp}/fd")),
            count(&format!("/proc/{cp}/task")),
            load()
        );
    };
    let mut n = 0usize;
    // Soak processes that ended by a signal, or never ended by themselves (hung).
    let mut crashed: Vec<u32> = Vec::new();
    let mut hung: Vec<String> = Vec::new();
    pids.extend(busy_children.iter().map(|c| (c.id(), busy_start)));
    while busy > 0 && started.elapsed() < total {
        std::thread::sleep(Duration::from_millis(200));
        if started.elapsed() >= next_sample {
            sample(&format!("{}s", started.elapsed().as_secs()), busy);
            next_sample += Duration::from_secs(sample_seconds);
        }
    }
    while busy == 0 && started.elapsed() < total {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let ms = 2000 + (seed >> 33) % 4000;
        children.push(spawn(&early.clone().arg(ms))?);
        n += 1;
        if n.is_multiple_of(5) {
            children.push(spawn(&sleeper)?);
        }
        let now = SystemTime::now();
        pids.extend(children.iter().map(|c| c.id()).filter(|p| !pids.iter().any(|e| e.0 == *p)).map(|p| (p, now)).collect::<Vec<_>>());
        // Reap the exited ones (no zombies for clrprobe to see); EarlyExit ends with 3, a
        // Sleeper with 0: anything else (a signal: a runtime crashed) is counted.
        children.retain_mut(|c| match c.try_wait() {
            Ok(Some(s)) => {
                if !matches!(s.code(), Some(0 | 3)) {
                    println!("process {} ended with {s}", c.id());
                    crashed.push(c.id());
                }
                false
            }
            _ => true,
        });
        std::thread::sleep(Duration::from_millis(every_ms));
        if started.elapsed() >= next_sample {
            sample(&format!("{}s", started.elapsed().as_secs()), n);
            next_sample += Duration::from_secs(sample_seconds);
        }
        if let Ok(Some(status)) = clrprobe.try_wait() {
            bail!("clrprobe exited during the soak: {status}; see {}", out.join("stderr.txt").display());
        }
    }
    // Every process ends by itself well within a minute (6 s at most, under load more).
    let deadline = Instant::now() + Duration::from_secs(60);
    for c in &mut children {
        loop {
            match c.try_wait() {
                Ok(Some(s)) => {
                    if !matches!(s.code(), Some(0 | 3)) {
                        println!("process {} ended with {s}", c.id());
                        crashed.push(c.id());
                    }
                    break;
                }
                _ if Instant::now() >= deadline => {
                    hung.push(format!("{} ({})", c.id(), clrprobe_tests::thread_states(c.id())));
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    std::thread::sleep(Duration::from_secs(3));
    sample("end", n);
    // Peak RSS while recording (before the stop builds and writes the outputs).
    let recording_hwm_kb = status_kb(cp, "VmHWM:");
    let t0 = Instant::now();
    Command::new("kill").args(["-INT", &cp.to_string()]).status()?;
    let status = loop {
        if let Some(s) = clrprobe.try_wait()? {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = clrprobe.kill();
            bail!("clrprobe did not exit within 60 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let exit_s = t0.elapsed().as_secs_f64();
    println!("clrprobe exited {status} {exit_s:.2} s after SIGINT (load {}); {n} EarlyExit started", load());
    for c in &mut busy_children {
        let _ = c.kill();
        let _ = c.wait();
    }
    std::thread::sleep(Duration::from_secs(2));
    let mut older = Vec::new();
    let left: Vec<String> = pids.iter().flat_map(|&(p, t)| leftovers(p, t, &mut older)).collect();
    if !older.is_empty() {
        println!("older files at pids the soak reused (written before its process started, not counted): {older:?}");
    }
    let tmp: Vec<String> = std::fs::read_dir(&out)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.starts_with('.') && f.ends_with(".tmp"))
        .collect();
    println!("left behind by {} soak processes: {left:?}; temporary files in the output directory: {tmp:?}", pids.len());
    let summary: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json"))?).context("clrprobe's JSON summary")?;
    println!(
        "clrprobe: stop_time {} s, folded_processes {}, recorded {}, memory {}",
        summary["stop_time"],
        summary["folded_processes"],
        summary["recorded"].as_array().map_or(0, |a| a.len()),
        summary["memory"]
    );
    let files = std::fs::read_dir(&out)?.count();
    println!("{files} files in {}", out.display());
    println!("soak processes hung: {hung:?}; ended by a signal: {crashed:?}");
    if !left.is_empty() || !tmp.is_empty() {
        bail!("files left behind");
    }
    if !hung.is_empty() || !crashed.is_empty() {
        bail!("{} soak processes hung, {} ended by a signal", hung.len(), crashed.len());
    }
    if !status.success() {
        bail!("clrprobe exited {status}; see {}", out.join("stderr.txt").display());
    }
    // Issue 11's bounds for `--all` with busy processes: exit within 2 s of Ctrl-C with every
    // file written, at most 64 MB resident while recording.
    if busy > 0 {
        println!("bounds: exit {exit_s:.2} s after SIGINT (at most {BUSY_EXIT_S} s), peak RSS while recording {:.1} MB (at most {BUSY_RSS_MB} MB)", recording_hwm_kb as f64 / 1024.0);
        if exit_s > BUSY_EXIT_S || recording_hwm_kb > BUSY_RSS_MB * 1024 {
            bail!("--busy {busy}: outside issue 11's bounds");
        }
    }
    Ok(())
}
