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
    /// `record --http --cpu --offcpu` (what the slowest requests' threads did).
    HttpCpuOffcpu,
}

impl Config {
    fn name(self) -> &'static str {
        match self {
            Config::Alone => "alone",
            Config::Floor => "floor: trace same providers -o /dev/null",
            Config::Http => "record --http",
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

/// One run: the client's request-loop time in ms.
fn one(c: Config, rounds: u32, dir: &Path) -> f64 {
    // Requests start 2.5 s after `ready` (time to attach); /slow waits 0 ms; exits when done.
    let mut w = Workload::new("Http", Runtime::Net8)
        .arg(0)
        .arg(rounds)
        .arg(0)
        .arg(2500)
        .start()
        .unwrap();
    let obs = observer(c, &w, dir);
    w.wait(Duration::from_secs(120));
    if let Some(mut o) = obs {
        let st = o.wait().unwrap();
        assert!(st.success(), "{} failed", c.name());
    }
    w.output()
        .iter()
        .find_map(|l| {
            l.strip_prefix("elapsed_ms=")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no elapsed_ms: {:?}", w.output()))
}

fn median(v: &mut [f64]) -> f64 {
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
    let dir = std::env::temp_dir().join(format!("clrprobe-http-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let configs = [
        Config::Alone,
        Config::Floor,
        Config::Http,
        Config::HttpCpuOffcpu,
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for run in 0..runs {
        for (i, &c) in configs.iter().enumerate() {
            let ms = one(c, rounds, &dir);
            eprintln!(
                "run {}/{runs}: {:<42} {ms:>9.1} ms for {} requests",
                run + 1,
                c.name(),
                3 * rounds
            );
            times[i].push(ms);
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "HTTP workload (tests/workloads/Http.cs, .NET 8): {} requests per run, {runs} runs interleaved; load {}",
        3 * rounds,
        load.trim()
    );
    let alone = median(&mut times[0].clone());
    for (i, c) in configs.iter().enumerate() {
        let m = median(&mut times[i]);
        println!(
            "  {:<42} median {m:>9.1} ms  ({:+.1}% vs alone)",
            c.name(),
            (m / alone - 1.0) * 100.0
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
