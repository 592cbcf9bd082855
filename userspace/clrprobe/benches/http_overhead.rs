//! Cost of `record --http` on an HTTP-heavy .NET 8 workload, next to the runtime's own cost of
//! the same providers: an EventPipe session with the same providers, keywords and levels whose
//! bytes go to /dev/null (`clrprobe trace -o /dev/null`), measured in the same run, interleaved.
//!
//! `cargo bench -p clrprobe --bench http_overhead` (root; `CLRPROBE_CACHE` as for the tests).
//! `HTTP_BENCH_RUNS` (default 5) and `HTTP_BENCH_ROUNDS` (default 300: 900 requests per run).
//! Prints the client's request-loop time per configuration: medians and slowdown vs alone.
use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use clrprobe_tests::{Running, Runtime, Workload, require_root};

/// The session `record --http` opens when no other kind is named: the runtime provider with
/// the naming (Jit | Loader) and GC keywords at Informational, plus the `--http` providers.
const FLOOR_PROVIDERS: &str = "Microsoft-Windows-DotNETRuntime:0x19:4,System.Net.Http,System.Net.NameResolution,\
System.Net.Sockets,System.Net.Security,System.Threading.Tasks.TplEventSource:0x80:4";

#[derive(Clone, Copy)]
enum Config {
    Alone,
    /// The runtime's own cost: same providers, nothing read but the bytes.
    Floor,
    /// `record --http`.
    Http,
    /// `record --http --no-perf-map`: without the perf map .NET 8 writes for clrprobe.
    HttpNoPerfMap,
    /// `record --http --cpu --offcpu` (what the slowest requests' threads did).
    HttpCpuOffcpu,
}

impl Config {
    fn name(self) -> &'static str {
        match self {
            Config::Alone => "alone",
            Config::Floor => "floor: trace same providers -o /dev/null",
            Config::Http => "record --http",
            Config::HttpNoPerfMap => "record --http --no-perf-map",
            Config::HttpCpuOffcpu => "record --http --cpu --offcpu",
        }
    }
}

fn observer(c: Config, w: &Running, dir: &Path) -> Option<Child> {
    let pid = w.pid.to_string();
    let prefix = dir.join("p");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clrprobe"));
    match c {
        Config::Alone => return None,
        Config::Floor => cmd.args([
            "trace",
            "-p",
            &pid,
            "--providers",
            FLOOR_PROVIDERS,
            "-o",
            "/dev/null",
        ]),
        Config::Http => cmd
            .args([
                "record", "--http", "-q", "--format", "pprof", "-p", &pid, "-o",
            ])
            .arg(&prefix),
        Config::HttpNoPerfMap => cmd
            .args([
                "record",
                "--http",
                "--no-perf-map",
                "-q",
                "--format",
                "pprof",
                "-p",
                &pid,
                "-o",
            ])
            .arg(&prefix),
        Config::HttpCpuOffcpu => cmd
            .args([
                "record", "--http", "--cpu", "--offcpu", "-q", "--format", "pprof", "-p", &pid,
                "-o",
            ])
            .arg(&prefix),
    };
    Some(
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run clrprobe"),
    )
}

/// What one run measured.
#[derive(Clone, Copy, Default)]
struct Sample {
    /// The client's request loop, wall ms.
    wall_ms: f64,
    /// The target's CPU (all threads) during the loop, ms.
    cpu_ms: f64,
    /// The observer's CPU over its whole run (attach to exit), ms.
    observer_cpu_ms: f64,
}

/// Waits for a child and returns its user + system CPU time in ms.
fn wait_cpu(child: Child) -> (std::process::ExitStatus, f64) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data, written by wait4 for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to locals.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    (
        std::os::unix::process::ExitStatusExt::from_raw(status),
        ms(ru.ru_utime) + ms(ru.ru_stime),
    )
}

fn one(c: Config, rounds: u32, dir: &Path) -> Sample {
    // Requests start once a session is on (at most 2.5 s after `ready`: alone); /slow waits 0 ms.
    let mut w = Workload::new("Http", Runtime::Net8)
        .arg(0)
        .arg(rounds)
        .arg(0)
        .arg(2500)
        .start()
        .unwrap();
    let obs = observer(c, &w, dir);
    w.wait(Duration::from_secs(120));
    let mut s = Sample::default();
    if let Some(o) = obs {
        let (st, cpu) = wait_cpu(o);
        assert!(st.success(), "{} failed", c.name());
        s.observer_cpu_ms = cpu;
    }
    let value = |k: &str| -> f64 {
        w.output()
            .iter()
            .find_map(|l| l.strip_prefix(k).map(|v| v.trim().parse().unwrap()))
            .unwrap_or_else(|| panic!("no {k}: {:?}", w.output()))
    };
    s.wall_ms = value("elapsed_ms=");
    s.cpu_ms = value("cpu_ms=");
    s
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    require_root();
    let env = |k: &str, d: u32| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (runs, rounds) = (env("HTTP_BENCH_RUNS", 5), env("HTTP_BENCH_ROUNDS", 300));
    let dir = clrprobe_tests::scratch_dir("http-bench");
    let configs = [
        Config::Alone,
        Config::Floor,
        Config::Http,
        Config::HttpNoPerfMap,
        Config::HttpCpuOffcpu,
    ];
    let load0 = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); configs.len()];
    for run in 0..runs {
        // Interleaved, so drift in the machine's load hits every configuration alike.
        for (i, &c) in configs.iter().enumerate() {
            let s = one(c, rounds, &dir);
            eprintln!(
                "run {}/{runs}: {:<42} wall {:>8.1} ms  target CPU {:>8.1} ms  observer CPU {:>7.1} ms",
                run + 1,
                c.name(),
                s.wall_ms,
                s.cpu_ms,
                s.observer_cpu_ms
            );
            samples[i].push(s);
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "HTTP workload (tests/workloads/Http.cs, .NET 8): {} requests per run, {runs} runs interleaved; load before {} after {}",
        3 * rounds,
        load0.split_whitespace().next().unwrap_or("?"),
        load.split_whitespace().next().unwrap_or("?"),
    );
    let med = |i: usize, f: fn(&Sample) -> f64| median(samples[i].iter().map(f).collect());
    let (wall0, cpu0) = (med(0, |s| s.wall_ms), med(0, |s| s.cpu_ms));
    for (i, c) in configs.iter().enumerate() {
        let (wall, cpu, obs) = (
            med(i, |s| s.wall_ms),
            med(i, |s| s.cpu_ms),
            med(i, |s| s.observer_cpu_ms),
        );
        println!(
            "  {:<42} wall {wall:>8.1} ms ({:+6.1}%)  target CPU {cpu:>8.1} ms ({:+6.1}%)  observer CPU {obs:>7.1} ms",
            c.name(),
            (wall / wall0 - 1.0) * 100.0,
            (cpu / cpu0 - 1.0) * 100.0,
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
