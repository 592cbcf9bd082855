//! `cargo xtask bench`: what each kind of `clrprobe record` costs a .NET app, next to its floor.
//!
//! For each workload (tests/workloads/Bench.cs: CPU-, allocation-, exception- and lock-heavy)
//! and each kind (and all kinds at once) it runs the app alone, under `clrprobe record --KIND`,
//! and under the floor: an EventPipe session with exactly the providers, keywords and levels
//! that clrprobe asked for (taken from clrprobe's own summary of the same kind and workload),
//! read by `clrprobe trace` into a scratch file, which only copies the stream (each profiler
//! run must succeed, or the benchmark stops: a floor that failed to attach reads as the app
//! alone — `trace -o /dev/null`, refused since trace writes only regular files, did). The runs are
//! interleaved (every configuration once per round) and each slowdown is a median over the
//! rounds. The CPU workload also runs under `perf record -g` as a peer.
//!
//! `--paired`: each run starts two copies of the workload at once and follows one of them
//! (the first in odd rounds, the second in even ones); a run's slowdown is the followed copy's
//! rate against its twin's in the same seconds, so what else loads the 2-core machine hits
//! both copies alike. "Alone" then follows neither: its figure is the twins' own spread. The
//! profiler's own CPU slows both copies alike and is not in a paired figure (`bench-memory`
//! prices it); what a paired figure holds is the cost inside the followed process.
use std::{
    collections::HashMap,
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use clrprobe_tests::{Runtime, Workload};

use crate::{
    dotnet, ebpf, util,
    util::{median},
};

/// Seconds a workload runs before it starts counting (clrprobe's attach falls in it).
const WARMUP_S: f64 = 1.5;
/// The EventPipe buffer clrprobe asks for (record::EVENTPIPE_BUFFER_MB).
const BUFFER_MB: u32 = 64;

/// The workloads: (Bench.cs mode, description).
pub const WORKLOADS: [(&str, &str); 4] = [
    ("throw", "exception-heavy: one thread, ~6.5k throws/s"),
    ("alloc", "allocation-heavy: one thread, ~85 M small objects/s"),
    ("lock", "lock-heavy: two threads on one lock held ~50 µs"),
    ("cpu", "CPU-bound: one thread spinning"),
];
/// The kinds (`clrprobe record --KIND`), and `all` (no kind named: every kind).
pub const KINDS: [&str; 6] = ["cpu", "alloc", "exceptions", "contention", "offcpu", "all"];
/// `--exceptions --cxa-throw`: exceptions with the kernel's `__cxa_throw` count (throw workload).
const CXA: &str = "cxa-throw";

#[derive(Clone, Debug, PartialEq)]
enum Config {
    Alone,
    Clrprobe(&'static str),
    Floor(&'static str),
    Perf,
}

impl Config {
    fn name(&self) -> String {
        match self {
            Config::Alone => "alone".into(),
            Config::Clrprobe(k) => format!("clrprobe {k}"),
            Config::Floor(k) => format!("floor {k}"),
            Config::Perf => "perf record -g".into(),
        }
    }
}

pub struct Options {
    pub runs: usize,
    pub seconds: u32,
    pub freq: u64,
    pub workloads: Vec<String>,
    pub kinds: Vec<String>,
    pub paired: bool,
}

/// One run's result.
struct Outcome {
    rate: f64,
    /// Rounds per second of the app's own CPU time (robust to other load on the machine).
    cpu_rate: f64,
    /// `--paired`: the twin's (rate, cpu_rate) in the same seconds.
    twin: Option<(f64, f64)>,
    /// clrprobe's JSON summary (clrprobe runs only).
    summary: Option<serde_json::Value>,
}

pub fn run(o: &Options) -> Result<()> {
    dotnet::setup()?;
    let bin = ebpf::build_userspace()?;
    if !util::is_root() {
        bail!("the benchmark loads BPF programs: run it as root");
    }
    util::ensure_apt("perf", "linux-perf", "the peer profiler the benchmark compares with")?;
    // SAFETY: single-threaded at this point.
    unsafe { std::env::set_var("CLRPROBE_CACHE", crate::cache::dir()) };
    let tmp = util::scratch_dir("bench")?;
    let kinds: Vec<&'static str> = KINDS.iter().copied().filter(|k| o.kinds.is_empty() || o.kinds.iter().any(|x| x == k)).collect();
    let loadavg = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_string();
    println!("load average at the start: {}", loadavg());
    let mut table = Vec::new();
    let mut attach_ms = Vec::new();
    for (mode, what) in WORKLOADS.iter().filter(|(m, _)| o.workloads.is_empty() || o.workloads.iter().any(|x| x == m)) {
        let mut configs = vec![Config::Alone];
        let mut kinds = kinds.clone();
        // The __cxa_throw uprobe (off by default) priced on the exception-heavy workload.
        if *mode == "throw" && (o.kinds.is_empty() || o.kinds.iter().any(|k| k == CXA)) {
            kinds.push(CXA);
        }
        for &k in &kinds {
            configs.push(Config::Clrprobe(k));
            configs.push(Config::Floor(k));
        }
        if *mode == "cpu" {
            configs.push(Config::Perf);
        }
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
        let mut cpu_rates: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
        let mut summaries: HashMap<&'static str, Vec<serde_json::Value>> = HashMap::new();
        // Paired: the unfollowed twins' rounds per second (the table's "alone").
        let (mut twin_rates, mut twin_cpu_rates): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
        // Each kind's sessions in one process (`trace --providers` form), its own first.
        let mut specs: HashMap<&'static str, Vec<String>> = HashMap::new();
        for round in 0..o.runs {
            // Interleaved, so drift in the machine's load hits every configuration alike.
            for (i, c) in configs.iter().enumerate() {
                let spec = match c {
                    Config::Floor(k) => Some(specs.get(k).cloned().with_context(|| format!("no providers from clrprobe {k} to floor"))?),
                    _ => None,
                };
                // A loaded machine can stall a start-up: one retry before giving up.
                let r = match one(&bin, mode, c, o, spec.as_deref().unwrap_or_default(), &tmp, round) {
                    Ok(r) => r,
                    Err(e) => {
                        eprintln!("{mode} round {}: {} failed ({e:#}); retrying once", round + 1, c.name());
                        one(&bin, mode, c, o, spec.as_deref().unwrap_or_default(), &tmp, round)?
                    }
                };
                let twin = r.twin.map(|(t, tc)| format!(" (twin {t:.1} / {tc:.1}: {:+.2} % / {:+.2} %)", (1.0 - r.rate / t) * 100.0, (1.0 - r.cpu_rate / tc) * 100.0));
                eprintln!(
                    "{mode} round {}/{}: {:<22} {:>12.1} rounds/s {:>12.1} rounds/CPU-s{} (load {})",
                    round + 1,
                    o.runs,
                    c.name(),
                    r.rate,
                    r.cpu_rate,
                    twin.unwrap_or_default(),
                    loadavg()
                );
                // Paired: a run's rate against its twin's, so that `1 - rate / alone` (alone =
                // 1) is its slowdown against the twin.
                let (t, tc) = r.twin.unwrap_or((1.0, 1.0));
                rates[i].push(r.rate / t);
                cpu_rates[i].push(r.cpu_rate / tc);
                if r.twin.is_some() {
                    twin_rates.push(t);
                    twin_cpu_rates.push(tc);
                }
                if let (Config::Clrprobe(k), Some(s)) = (c, r.summary) {
                    // The sessions of the first process: its own, then any it has beside it.
                    let sessions = s["eventpipe_providers"].as_array().map(|all| {
                        let first = all.first().map(|e| e[0].clone());
                        all.iter().filter(|e| Some(&e[0]) == first.as_ref()).filter_map(|e| e[1].as_str().map(str::to_string)).collect::<Vec<_>>()
                    });
                    if let Some(sessions) = sessions.filter(|v| !v.is_empty()) {
                        specs.insert(k, sessions);
                    }
                    attach_ms.extend(s["time_to_attach"].as_f64().map(|t| t * 1e3));
                    summaries.entry(k).or_default().push(s);
                }
            }
        }
        // Paired: every run's figure is already against its twin (the twins' own spread is
        // the "alone" row's).
        let alone = if o.paired { 1.0 } else { median(&rates[0]) };
        let spread = |v: &[f64]| {
            let (lo, hi) = v.iter().fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
            (hi - lo) / median(v) * 100.0
        };
        println!(
            "\n{mode} ({what}): {} s per run after {WARMUP_S} s warm-up, medians of {} interleaved runs{}; alone {:.1} rounds/s (spread {:.1} %)",
            o.seconds,
            o.runs,
            if o.paired { ", each against its twin" } else { "" },
            if o.paired { median(&twin_rates) } else { alone },
            spread(if o.paired { &twin_rates } else { &rates[0] })
        );
        let alone_cpu = if o.paired { 1.0 } else { median(&cpu_rates[0]) };
        if o.paired {
            println!(
                "paired: the twins with neither followed {:+.2} % (per CPU-second {:+.2} %; runs {:?})",
                (1.0 - median(&rates[0])) * 100.0,
                (1.0 - median(&cpu_rates[0])) * 100.0,
                rates[0].iter().map(|r| format!("{:+.2}", (1.0 - r) * 100.0)).collect::<Vec<_>>()
            );
        }
        let (a, v) = if o.paired { (median(&twin_cpu_rates), &twin_cpu_rates) } else { (alone_cpu, &cpu_rates[0]) };
        println!("alone per CPU-second of the app: {a:.1} rounds (spread {:.1} %)", spread(v));
        println!(
            "{:<12} {:>10} {:>10} {:>12} {:>9}  {:>10} {:>10} {:>12}  {:<}",
            "kind", "clrprobe", "floor", "over floor", "spread", "CPU: clrp", "CPU: floor", "over floor", "clrprobe memory (recording peak / with outputs)"
        );
        let slow = |i: usize| (1.0 - median(&rates[i]) / alone) * 100.0;
        let slow_cpu = |i: usize| (1.0 - median(&cpu_rates[i]) / alone_cpu) * 100.0;
        for &k in &kinds {
            let ci = configs.iter().position(|c| *c == Config::Clrprobe(k)).expect("configured");
            let fi = configs.iter().position(|c| *c == Config::Floor(k)).expect("configured");
            let (c, f) = (slow(ci), slow(fi));
            let mem = summaries.get(k).map(|v| {
                let kb = |field: &str| median(&v.iter().filter_map(|s| s["memory"][field].as_f64()).collect::<Vec<_>>()) / 1024.0;
                format!("{:.1} / {:.1} MB", kb("recording_peak_kb"), kb("final_peak_kb"))
            });
            let (cc, fc) = (slow_cpu(ci), slow_cpu(fi));
            println!(
                "{k:<12} {c:>9.2}% {f:>9.2}% {:>+10.2} pt {:>8.1}%  {cc:>9.2}% {fc:>9.2}% {:>+10.2} pt  {}",
                c - f,
                spread(&rates[ci]),
                cc - fc,
                mem.unwrap_or_default()
            );
            table.push(format!(
                "| {mode} | {k} | {:.0} | {f:.2} % | {c:.2} % | {:+.2} | {fc:.2} % | {cc:.2} % | {:+.2} | {} |",
                if o.paired { median(&twin_rates) } else { alone },
                c - f,
                cc - fc,
                loadavg().split_whitespace().next().unwrap_or("?")
            ));
        }
        if let Some(pi) = configs.iter().position(|c| *c == Config::Perf) {
            println!("{:<12} {:>9.2}%  (perf record -g -F {}, peer; per CPU-second {:.2} %)", "perf", slow(pi), o.freq, slow_cpu(pi));
        }
        for (k, v) in &summaries {
            if let Some(c) = v.iter().filter_map(|s| s["uprobe_cost_ns"].as_f64()).next() {
                println!("uprobe cost per hit measured by clrprobe {k} at start-up: {:.1} µs", c / 1e3);
            }
        }
    }
    if !attach_ms.is_empty() {
        attach_ms.sort_by(|a, b| a.total_cmp(b));
        println!(
            "\nclrprobe time from start to sampling: median {:.0} ms, max {:.0} ms over {} runs",
            median(&attach_ms),
            attach_ms[attach_ms.len() - 1],
            attach_ms.len()
        );
    }
    println!("\nload average at the end: {}", loadavg());
    println!(
        "\n| workload | kind | alone (rounds/s) | floor | clrprobe | clrprobe − floor (points) | floor, per app CPU-s | clrprobe, per app CPU-s | − floor (points) | load |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for row in table {
        println!("{row}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}

/// Runs the workload once under `c`; returns its rounds per second (in the counted window).
/// `floor`: the sessions the floor opens (`trace --providers` form), the process's own first
/// (with rundown), the others without, as clrprobe opens them.
/// `round` picks the followed twin under `--paired` (the first in even rounds).
fn one(bin: &Path, mode: &str, c: &Config, o: &Options, floor: &[String], tmp: &Path, round: usize) -> Result<Outcome> {
    let start = || {
        let mut workload = Workload::new("Bench", Runtime::Net8).arg(mode).arg(o.seconds).arg(WARMUP_S);
        workload.ready_timeout = Duration::from_secs(120);
        workload.start().context("starting the workload")
    };
    // Paired: both copies start before either is followed, and count the same seconds.
    let (mut w, mut twin) = if o.paired {
        let (a, b) = (start()?, start()?);
        if round.is_multiple_of(2) { (a, Some(b)) } else { (b, Some(a)) }
    } else {
        (start()?, None)
    };
    let pid = w.pid.to_string();
    let freq = o.freq.to_string();
    // A do-nothing client of one of the floor's sessions: session `i` (its own first, with
    // rundown; any other without, as clrprobe opens them) copied to a scratch file.
    let floor_client = |i: usize| -> std::io::Result<std::process::Child> {
        let mut cmd = Command::new(bin);
        cmd.args(["trace", "-p", &pid, "--providers", floor.get(i).map(String::as_str).unwrap_or_default(), "--buffer-mb", &BUFFER_MB.to_string()]);
        if i > 0 {
            cmd.arg("--no-rundown");
        }
        cmd.arg("-o").arg(tmp.join(format!("floor-{i}.nettrace"))).stdout(Stdio::null()).stderr(Stdio::piped()).spawn()
    };
    let profiler = match c {
        Config::Alone => None,
        Config::Clrprobe(k) => {
            let mut cmd = Command::new(bin);
            cmd.args(["record", "--quiet", "--json", "-p", &pid, "-F", &freq, "--format", "pprof", "-o"]).arg(tmp.join("clrprobe"));
            match *k {
                "all" => {}
                CXA => {
                    cmd.args(["--exceptions", "--cxa-throw"]);
                }
                k => {
                    cmd.arg(format!("--{k}"));
                }
            }
            Some(cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?)
        }
        Config::Floor(_) => Some(floor_client(0)?),
        Config::Perf => Some(
            Command::new("perf")
                .args(["record", "-g", "-F", &freq, "-p", &pid, "-o"])
                .arg(tmp.join("perf.data"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        ),
    };
    // The floor's other sessions (clrprobe's exceptions session).
    let also = match c {
        Config::Floor(_) => (1..floor.len()).map(floor_client).collect::<std::io::Result<Vec<_>>>()?,
        _ => Vec::new(),
    };
    w.wait(Duration::from_secs_f64(o.seconds as f64 + WARMUP_S + 30.0));
    if let Some(t) = twin.as_mut() {
        t.wait(Duration::from_secs_f64(o.seconds as f64 + WARMUP_S + 30.0));
    }
    for (i, p) in (1..).zip(also) {
        let out = p.wait_with_output()?;
        if !out.status.success() {
            bail!("{} (session {}) failed ({}): {}", c.name(), i + 1, out.status, String::from_utf8_lossy(&out.stderr).trim());
        }
    }
    let mut summary = None;
    if let Some(p) = profiler {
        let out = p.wait_with_output()?;
        if !out.status.success() && *c != Config::Perf {
            bail!("{} failed ({}): {}", c.name(), out.status, String::from_utf8_lossy(&out.stderr).trim());
        }
        for i in 0..floor.len() {
            let _ = std::fs::remove_file(tmp.join(format!("floor-{i}.nettrace")));
        }
        if let Config::Clrprobe(_) = c {
            summary = Some(serde_json::from_slice(&out.stdout).context("clrprobe's JSON summary")?);
        }
    }
    let field = |w: &clrprobe_tests::Running, name: &str| -> Result<f64> {
        w.output()
            .iter()
            .find_map(|l| l.split_whitespace().find_map(|f| f.strip_prefix(name)).and_then(|r| r.parse().ok()))
            .with_context(|| format!("the workload did not print {name}"))
    };
    let twin = match &twin {
        Some(t) => Some((field(t, "per_second=")?, field(t, "per_cpu_second=")?)),
        None => None,
    };
    Ok(Outcome { rate: field(&w, "per_second=")?, cpu_rate: field(&w, "per_cpu_second=")?, summary, twin })
}
