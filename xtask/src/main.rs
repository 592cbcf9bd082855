//! `cargo xtask`: builds the BPF programs, sets up the .NET test bed, and runs every test.
mod bench;
mod bench_stacks;
mod bench_agent;
mod bench_memory;
mod cache;
mod demo;
mod dotnet;
mod ebpf;
mod fuzz;
mod link_order;
mod soak;
mod speedscope;
mod util;
mod windows;

use std::time::Instant;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "clrprobe build, set-up and test tasks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Builds the BPF programs (installs rust-src and bpf-linker 0.10.3 when missing).
    BuildEbpf,
    /// Builds the BPF programs and the `clrprobe` binary with them embedded (release).
    Build,
    /// Builds, then runs `clrprobe` as root with the given arguments.
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Fetches .NET 8.0.4 and .NET Core 3.1.23 runtimes and mono-mcs into the cache (idempotent).
    SetupDotnet,
    /// The main job: sets up, builds, and profiles the bundled sample .NET app (tests/workloads/Mixed.cs);
    /// prints the README's example output from that run (also in out/demo-readme.md).
    Demo {
        /// Seconds to record.
        #[arg(long, default_value_t = 5)]
        seconds: u32,
    },
    /// Each kind's cost to CPU-, allocation-, exception- and lock-heavy .NET apps, next to its
    /// floor (the same EventPipe session read by a client that only copies) and the app alone.
    Bench {
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long, default_value_t = 4)]
        seconds: u32,
        /// CPU sampling frequency of clrprobe (and perf).
        #[arg(long, default_value_t = 99)]
        freq: u64,
        /// Workloads to run (default: all of cpu,alloc,throw,lock).
        #[arg(long, value_delimiter = ',')]
        workloads: Vec<String>,
        /// Kinds to measure (default: all of cpu,alloc,exceptions,contention,offcpu,all).
        #[arg(long, value_delimiter = ',')]
        kinds: Vec<String>,
        /// Two copies of the workload at once, one followed (which one turns each run): the
        /// slowdown is the followed copy's against its twin's in the same seconds, so load on
        /// the machine hits both alike; "alone" is then neither followed (the twins' noise).
        #[arg(long)]
        paired: bool,
    },
    /// Stack unwinding's cost: CPU sampling and off-CPU with user stack copies, with frame
    /// pointers only, and under `perf record -g`, on CPU-, event- and switch-heavy workloads.
    BenchStacks {
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long, default_value_t = 6)]
        seconds: u32,
    },
    /// `clrprobe agent --all` for minutes with three busy .NET processes: their slowdown, the
    /// agent's CPU and RSS.
    BenchAgent {
        #[arg(long, default_value_t = 10)]
        minutes: u64,
        /// Seconds of the runs without the agent, before and after.
        #[arg(long, default_value_t = 60)]
        baseline: u64,
        /// Seconds between /metrics scrapes.
        #[arg(long, default_value_t = 15)]
        scrape: u64,
        /// More arguments for the agent (whitespace-separated), e.g. "--alloc-period 0".
        #[arg(long, default_value = "", allow_hyphen_values = true)]
        agent_args: String,
        /// More agent arguments for a fourth configuration of the slowdown rounds (the agent
        /// with them, beside alone / floor / agent), e.g. "--no-offcpu".
        #[arg(long, default_value = "", allow_hyphen_values = true)]
        variant: String,
        /// Port the agent serves on (two benchmarks side by side need two).
        #[arg(long, default_value_t = 19_464)]
        port: u16,
        /// Sets of interleaved rounds (alone / under the agent's EventPipe sessions only, the
        /// floor / under a new agent) of three Bench processes measuring the targets' slowdown
        /// first; 0 skips them.
        #[arg(long, default_value_t = 5)]
        pairs: usize,
        /// The slowdown rounds of each Bench process on its own (only it and what follows it
        /// running), instead of the three side by side (three busy processes and their clients
        /// oversubscribe this 2-core host; measured in round 15, one at a time was no steadier).
        #[arg(long)]
        apart: bool,
        /// The slowdown rounds as pairs: two copies of one Bench process at once, one alone,
        /// one under the floor or an agent following it only (`-p`), so both meet the same
        /// host; prints each mode's slowdown against its twin (and with nothing followed, what
        /// the design reads as noise).
        #[arg(long, conflicts_with = "apart")]
        paired: bool,
        /// Seconds each Bench process of the slowdown rounds runs before its rounds are
        /// counted (the agent's or the floor's set-up, and with 160 or more the System.Runtime
        /// counters' code tiered up in the target: at 5 s polls they cost a CPU-bound app +2.1 to
        /// +2.6 % of its CPU-seconds in its first seconds, +0.1 % after 160 s; see the README).
        #[arg(long, default_value_t = bench_agent::BENCH_WARMUP)]
        warmup: u64,
    },
    /// clrprobe's own memory (`record -p --cpu -F 99`; the output phase of every kind) and its
    /// CPU per 1k EventPipe events decoded with three busy .NET processes.
    BenchMemory {
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long, default_value_t = 6)]
        seconds: u32,
        /// Only the CPU per 1k events (three busy processes), not the memory runs.
        #[arg(long)]
        cpu_only: bool,
        /// CPU sampling frequency of the three-process CPU run (`-F 1`: the cost that does not
        /// grow with samples); the memory runs stay at 99 Hz, as one-collect's figure is.
        #[arg(long, default_value_t = 99)]
        freq: u64,
    },
    /// Lists the functions `record -p PID --cpu` runs, in the order it first runs them
    /// (callgrind, then page faults of a native run under perf), into
    /// userspace/clrprobe/link-order.txt: the release link places them together (build.rs).
    /// `BENCH_BIN=PATH` uses that binary instead of building one.
    LinkOrder {
        /// Start over instead of keeping the previous file's functions this run did not see.
        #[arg(long)]
        fresh: bool,
        /// Recordings under callgrind (their functions and phases are merged).
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// `record --all` (release, every kind) for MINUTES while .NET processes start and exit
    /// every few seconds: clrprobe's RSS and fds over time, stop time, files left behind.
    Soak {
        #[arg(long, default_value_t = 10)]
        minutes: u64,
        #[arg(long, default_value_t = 60)]
        sample_seconds: u64,
        /// Milliseconds between process starts.
        #[arg(long, default_value_t = 3000)]
        every_ms: u64,
        /// Instead of short-lived processes: N busy .NET processes running throughout.
        #[arg(long, default_value_t = 0)]
        busy: usize,
        /// More arguments for `clrprobe record` (e.g. `--arg=--no-eventpipe`).
        #[arg(long = "arg", allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Type-checks the crates that build for Windows (x86_64-pc-windows-gnu).
    CheckWindows,
    /// Runs the fuzz targets (cargo-fuzz, nightly) for SECONDS each, seeded from real files.
    Fuzz {
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Stop a target after this many executions if it gets there first.
        #[arg(long)]
        runs: Option<u64>,
        /// address (default, as in CI) or none (several times faster, for long runs).
        #[arg(long, default_value = "address")]
        sanitizer: String,
        /// Minimize each corpus (cargo fuzz cmin) before running.
        #[arg(long)]
        cmin: bool,
        /// Only these targets (default: all).
        targets: Vec<String>,
    },
    /// Does all set-up, then runs every test (unit, conformance, live end-to-end).
    Test {
        /// Extra arguments for `cargo test` (after `--`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::BuildEbpf => {
            ebpf::build()?;
        }
        Cmd::Build => {
            let bin = ebpf::build_userspace()?;
            println!("built {}", bin.display());
        }
        Cmd::Run { args } => {
            let bin = ebpf::build_userspace()?;
            util::run_as_root(&bin, &args)?;
        }
        Cmd::SetupDotnet => dotnet::setup()?,
        Cmd::Demo { seconds } => demo::run(seconds)?,
        Cmd::CheckWindows => windows::check()?,
        Cmd::Soak { minutes, sample_seconds, every_ms, busy, args } => soak::run(minutes, sample_seconds, every_ms, busy, &args)?,
        Cmd::Bench { runs, seconds, freq, workloads, kinds, paired } => {
            bench::run(&bench::Options { runs, seconds, freq, workloads, kinds, paired })?
        }
        Cmd::BenchStacks { runs, seconds } => bench_stacks::run(runs, seconds)?,
        Cmd::BenchAgent { minutes, baseline, scrape, agent_args, variant, port, pairs, apart, paired, warmup } => bench_agent::run(minutes, baseline, scrape, &agent_args, &variant, port, bench_agent::Rounds { pairs, apart, paired, warmup })?,
        Cmd::BenchMemory { runs, seconds, cpu_only, freq } => bench_memory::run(runs, seconds, cpu_only, freq)?,
        Cmd::LinkOrder { fresh, runs } => link_order::run(fresh, runs)?,
        Cmd::Fuzz { seconds, runs, sanitizer, cmin, targets } => {
            fuzz::run(&fuzz::Options { seconds, runs, sanitizer, cmin }, &targets)?;
        }
        Cmd::Test { args } => test(&args)?,
    }
    Ok(())
}

fn test(extra: &[String]) -> Result<()> {
    let t0 = Instant::now();
    dotnet::setup()?;
    // `go tool pprof` reads clrprobe's pprof files in the live tests.
    util::ensure_apt("go", "golang-go", "go tool pprof, an independent pprof reader for the tests")?;
    // `clrprobe top` runs in a real terminal under tmux in its live test.
    util::ensure_apt("tmux", "tmux", "a terminal for the `clrprobe top` live test")?;
    // `clrprobe agent` is scraped by a real Prometheus server in its live test.
    util::ensure_apt("prometheus", "prometheus", "a Prometheus server scraping `clrprobe agent` in its live test")?;
    // speedscope's schema validates clrprobe's speedscope files in a test.
    speedscope::setup()?;
    let t1 = Instant::now();
    let obj = ebpf::build()?;
    let t2 = Instant::now();
    windows::check()?;
    util::check(
        util::cargo()
            .args(["clippy", "--workspace", "--exclude", "clrprobe-ebpf", "--all-targets", "--", "-D", "warnings"])
            .env("CLRPROBE_BPF_OBJ", &obj),
        "cargo clippy (Linux)",
    )?;
    let mut cmd = util::cargo();
    cmd.args(["test", "--workspace", "--exclude", "clrprobe-ebpf", "--no-fail-fast"])
        .env("CLRPROBE_BPF_OBJ", &obj)
        .env("CLRPROBE_CACHE", cache::dir());
    if !extra.is_empty() {
        cmd.arg("--").args(extra);
    }
    util::check(&mut cmd, "cargo test")?;
    let t3 = Instant::now();
    // Each fuzz target (the parsers', the NetTrace reader's and the IPC replies') for a few
    // seconds over its seeds: they keep building and the seeds (and regressions) keep
    // passing. Installs cargo-fuzz if needed.
    let smoke = fuzz::Options { seconds: 5, runs: None, sanitizer: "address".into(), cmin: false };
    fuzz::run(&smoke, &[])?;
    let t4 = Instant::now();
    eprintln!(
        "xtask test: setup-dotnet {:.1}s, build-ebpf {:.1}s, windows check + cargo test {:.1}s, fuzz smoke {:.1}s, total {:.1}s",
        (t1 - t0).as_secs_f64(),
        (t2 - t1).as_secs_f64(),
        (t3 - t2).as_secs_f64(),
        (t4 - t3).as_secs_f64(),
        (t4 - t0).as_secs_f64()
    );
    Ok(())
}
