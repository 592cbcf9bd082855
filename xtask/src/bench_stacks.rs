//! `cargo xtask bench`: overhead of `clrprobe record` on a CPU-bound .NET workload, next to
//! `perf record -g` measured in the same run, and clrprobe's time to first sample.
use std::{
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use clrprobe_tests::{Runtime, Workload};

use crate::{dotnet, ebpf, util};

#[derive(Clone, Copy, Debug)]
enum Config {
    Alone,
    /// `clrprobe record` at this frequency, CPU samples only.
    Clrprobe(u64),
    /// Same, frame-pointer stacks only (`CLRPROBE_UNWIND=fp`: no user stack copies).
    ClrprobeFp(u64),
    /// `--offcpu` with `CLRPROBE_DEFER_USER=1`: user stacks of threads blocked in a syscall
    /// taken at its return (a `sys_exit` hook on every syscall of the host), copied and unwound.
    Offcpu,
    /// Same, frame-pointer stacks only.
    OffcpuFp,
    /// `clrprobe record --offcpu` as by default: both stacks taken at switch-out.
    OffcpuSwitchOut,
    /// Same, frame-pointer stacks only.
    OffcpuSwitchOutFp,
    /// `perf record -g -e sched:sched_switch`: perf's off-CPU stacks (frame pointers).
    PerfSwitch,
    /// `clrprobe record --offcpu` with a program that does nothing on sched_switch instead of
    /// clrprobe's (`CLRPROBE_SWITCH_FLOOR=raw`, the raw tracepoint clrprobe uses): the hook's
    /// own cost and clrprobe's idle userspace, the floor of the rows above.
    FloorRaw,
    /// Same on the classic tracepoint (`CLRPROBE_SWITCH_FLOOR=tp`), whose record the kernel
    /// fills on every switch before the program runs.
    FloorTp,
    /// `record --offcpu` as by default, by another clrprobe binary (`CLRPROBE_BENCH_BASELINE`,
    /// e.g. one built from main): before and after in the same run.
    Baseline,
    /// `clrprobe record` with every kind (CPU, allocations, exceptions, contention, off-CPU).
    ClrprobeAll(u64),
    Perf(u64),
}

impl Config {
    fn name(self) -> String {
        match self {
            Config::Alone => "alone".into(),
            Config::Clrprobe(f) => format!("clrprobe record --cpu -F {f}"),
            Config::ClrprobeFp(_) => "  same, frame pointers only".into(),
            Config::Offcpu => "  stacks at syscall exit".into(),
            Config::OffcpuFp => "  syscall exit, FP only".into(),
            Config::OffcpuSwitchOut => "clrprobe record --offcpu".into(),
            Config::OffcpuSwitchOutFp => "  same, frame pointers only".into(),
            Config::PerfSwitch => "perf record -g -e sched_switch".into(),
            Config::FloorRaw => "  floor: empty raw tracepoint".into(),
            Config::FloorTp => "  floor: empty classic tp".into(),
            Config::Baseline => "  baseline binary, --offcpu".into(),
            Config::ClrprobeAll(f) => format!("clrprobe record (all) -F {f}"),
            Config::Perf(f) => format!("perf record -g -F {f}"),
        }
    }
}

/// CPU-bound workload: clrprobe's CPU sampling against perf's.
const CPU_CONFIGS: [Config; 7] = [
    Config::Alone,
    Config::Clrprobe(99),
    Config::ClrprobeFp(99),
    Config::Clrprobe(999),
    Config::ClrprobeFp(999),
    Config::Perf(99),
    Config::Perf(999),
];
/// Context-switch-heavy workload: off-CPU recording with and without user stack copies.
const SWITCH_CONFIGS: [Config; 9] = [
    Config::Alone,
    Config::Baseline,
    Config::OffcpuSwitchOut,
    Config::OffcpuSwitchOutFp,
    Config::Offcpu,
    Config::OffcpuFp,
    Config::FloorRaw,
    Config::FloorTp,
    Config::PerfSwitch,
];
/// Allocation- and exception-heavy workload: every kind on against nothing.
const EVENT_CONFIGS: [Config; 3] = [Config::Alone, Config::Clrprobe(99), Config::ClrprobeAll(99)];

pub fn run(runs: usize, seconds: u32) -> Result<()> {
    dotnet::setup()?;
    util::ensure_apt("perf", "linux-perf", "the peer profiler the benchmark compares with")?;
    let bin = ebpf::build_userspace()?;
    if !util::is_root() {
        bail!("the benchmark loads BPF programs: run it as root");
    }
    // SAFETY: single-threaded at this point.
    unsafe { std::env::set_var("CLRPROBE_CACHE", crate::cache::dir()) };
    let tmp = util::scratch_dir("bench-stacks")?;
    let mut attach_ms = Vec::new();
    for (workload, configs, title) in [
        ("Cpu", &CPU_CONFIGS[..], "CPU-bound .NET 8 workload (tests/workloads/Cpu.cs)"),
        ("AllocThrow", &EVENT_CONFIGS[..], "allocation- and exception-heavy .NET 8 workload (tests/workloads/AllocThrow.cs)"),
        ("Switches", &SWITCH_CONFIGS[..], "context-switch-heavy .NET 8 workload (tests/workloads/Switches.cs)"),
        // The same, spinning 20 µs between hand-overs: just above 50k switches/s (the issue's
        // bar for a switch-heavy service).
        ("Switches:20", &SWITCH_CONFIGS[..], "context-switch-heavy .NET 8 workload, 20 µs of work per hand-over (Switches.cs 20)"),
        // The same, spinning 30 µs between hand-overs: about a fifth of the switches.
        ("Switches:30", &SWITCH_CONFIGS[..], "context-switch-heavy .NET 8 workload, 30 µs of work per hand-over (Switches.cs 30)"),
    ] {
        if std::env::var("CLRPROBE_BENCH_ONLY").is_ok_and(|only| !only.split(',').any(|w| w == workload || workload.starts_with(&format!("{w}:")))) {
            continue;
        }
        let baseline = std::env::var_os(BASELINE_ENV);
        let configs: Vec<Config> = configs.iter().copied().filter(|c| !matches!(c, Config::Baseline) || baseline.is_some()).collect();
        let mut results: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
        let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
        let mut work: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
        for run in 0..runs {
            // Interleaved, so drift in the machine's load hits every configuration alike.
            for (i, &c) in configs.iter().enumerate() {
                let r = one(&bin, workload, c, seconds, &tmp)?;
                eprintln!(
                    "{workload} run {}/{runs}: {:<30} {:>10.1} rounds/s, workload CPU {:.2} µs/round, profiler CPU {:.1} %",
                    run + 1,
                    c.name(),
                    r.rate,
                    r.cpu_us_per_round.unwrap_or(f64::NAN),
                    r.profiler_cpu
                );
                work[i].extend(r.cpu_us_per_round);
                results[i].push(r.rate);
                cpu[i].push(r.profiler_cpu);
                attach_ms.extend(r.attach_ms);
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        let base = median(&mut results[0].clone());
        println!("\n{title}, {seconds} s per run, median of {runs} runs, 2 cores:");
        println!("(profiler CPU: user + system time of the profiler's process while the workload ran, % of one core;");
        println!(" workload CPU: the workload's own CPU time per round, when it reports it: the kernel's work on its");
        println!(" switches, a sched_switch program included, is its system time — less sensitive to the machine's load)");
        let base_work = (!work[0].is_empty()).then(|| median(&mut work[0].clone()));
        println!("{:<32} {:>12} {:>10} {:>14} {:>10} {:>13}", "configuration", "rounds/s", "slowdown", "CPU µs/round", "CPU extra", "profiler CPU");
        for (i, &c) in configs.iter().enumerate() {
            let m = median(&mut results[i].clone());
            let p = median(&mut cpu[i].clone());
            let (w, extra) = match (base_work, work[i].is_empty()) {
                (Some(b), false) => {
                    let w = median(&mut work[i].clone());
                    (format!("{w:.2}"), format!("{:.2}%", (w / b - 1.0) * 100.0))
                }
                _ => ("-".into(), "-".into()),
            };
            println!("{:<32} {:>12.1} {:>9.2}% {:>14} {:>10} {:>12.1}%", c.name(), m, (1.0 - m / base) * 100.0, w, extra, p);
        }
    }
    attach_ms.sort_by(|a, b| a.total_cmp(b));
    if !attach_ms.is_empty() {
        println!(
            "clrprobe time from start to sampling: median {:.0} ms, max {:.0} ms over {} runs",
            attach_ms[attach_ms.len() / 2],
            attach_ms[attach_ms.len() - 1],
            attach_ms.len()
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}

/// A second clrprobe binary to run `record --offcpu` with, next to this one's (`Config::Baseline`).
const BASELINE_ENV: &str = "CLRPROBE_BENCH_BASELINE";

/// One run of a workload under one configuration.
struct RunResult {
    rate: f64,
    /// clrprobe's time from start to sampling (CPU configurations).
    attach_ms: Option<f64>,
    /// The profiler's CPU time while the workload ran, in % of one core.
    profiler_cpu: f64,
    /// The workload's CPU time per round (`cpu_us=` over `rounds=`), when it prints it.
    cpu_us_per_round: Option<f64>,
}

/// User + system CPU seconds of a live process so far (0 when it is gone).
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // Fields after the command name (which may hold spaces): state is field 3; utime and
    // stime are fields 14 and 15, in clock ticks (100 per second on Linux).
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return 0.0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Runs the workload once under `c`.
fn one(bin: &std::path::Path, workload: &str, c: Config, seconds: u32, tmp: &std::path::Path) -> Result<RunResult> {
    // "Name:arg": the workload's argument after the seconds.
    let (name, extra) = workload.split_once(':').map_or((workload, None), |(n, a)| (n, Some(a)));
    let mut w = Workload::new(name, Runtime::Net8).arg(seconds);
    if let Some(a) = extra {
        w = w.arg(a);
    }
    let mut w = w.start().context("starting the workload")?;
    let pid = w.pid.to_string();
    let mut attach = None;
    let profiler = match c {
        Config::Alone => None,
        Config::Clrprobe(f) | Config::ClrprobeAll(f) | Config::ClrprobeFp(f) => Some(
            Command::new(bin)
                .args(["record", "--quiet", "--json", "-p", &pid, "-F", &f.to_string(), "--format", "pprof", "-o"])
                .arg(tmp.join("clrprobe"))
                .args(if matches!(c, Config::ClrprobeAll(_)) { &[][..] } else { &["--cpu"][..] })
                .env("CLRPROBE_UNWIND", if matches!(c, Config::ClrprobeFp(_)) { "fp" } else { "dwarf" })
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()?,
        ),
        Config::Offcpu
        | Config::OffcpuFp
        | Config::OffcpuSwitchOut
        | Config::OffcpuSwitchOutFp
        | Config::FloorRaw
        | Config::FloorTp
        | Config::Baseline => Some(
            Command::new(match c {
                Config::Baseline => std::env::var_os(BASELINE_ENV).map(std::path::PathBuf::from).context("CLRPROBE_BENCH_BASELINE")?,
                _ => bin.to_path_buf(),
            })
                .args(["record", "--quiet", "--json", "-p", &pid, "--offcpu", "--no-eventpipe", "--format", "pprof", "-o"])
                .arg(tmp.join("clrprobe"))
                .env("CLRPROBE_UNWIND", if matches!(c, Config::OffcpuFp | Config::OffcpuSwitchOutFp) { "fp" } else { "dwarf" })
                .env("CLRPROBE_DEFER_USER", if matches!(c, Config::Offcpu | Config::OffcpuFp) { "1" } else { "0" })
                .env("CLRPROBE_SWITCH_FLOOR", match c {
                    Config::FloorRaw => "raw",
                    Config::FloorTp => "tp",
                    _ => "",
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()?,
        ),
        Config::PerfSwitch => Some(
            Command::new("perf")
                .args(["record", "-g", "-e", "sched:sched_switch", "-p", &pid, "-o"])
                .arg(tmp.join("perf.data"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        ),
        Config::Perf(f) => Some(
            Command::new("perf")
                .args(["record", "-g", "-F", &f.to_string(), "-p", &pid, "-o"])
                .arg(tmp.join("perf.data"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        ),
    };
    w.wait(Duration::from_secs(seconds as u64 + 30));
    // Read as the workload ends, before the profiler writes its output.
    let profiler_cpu = profiler.as_ref().map_or(0.0, |p| cpu_seconds(p.id())) / seconds as f64 * 100.0;
    if let Some(p) = profiler {
        let out = p.wait_with_output()?;
        if let Config::Clrprobe(_) | Config::ClrprobeAll(_) | Config::ClrprobeFp(_) = c {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("clrprobe summary")?;
            attach = v["time_to_attach"].as_f64().map(|s| s * 1e3);
        }
    }
    if let Some(l) = w.output().iter().find(|l| l.starts_with("switches=")) {
        eprintln!("  {workload} under {}: {l}", c.name());
    }
    let rounds: f64 = w
        .output()
        .iter()
        .find_map(|l| l.strip_prefix("rounds=").and_then(|r| r.split_whitespace().next()).and_then(|r| r.parse().ok()))
        .context("the workload did not print rounds=")?;
    let cpu_us: Option<f64> =
        w.output().iter().find_map(|l| l.strip_prefix("cpu_us=").and_then(|r| r.split_whitespace().next()).and_then(|r| r.parse().ok()));
    Ok(RunResult { rate: rounds / seconds as f64, attach_ms: attach, profiler_cpu, cpu_us_per_round: cpu_us.map(|c| c / rounds) })
}
