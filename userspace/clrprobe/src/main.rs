use std::process::ExitCode;

use clap::Parser;
use clrprobe::{
    cli::{Cli, Command},
    doctor,
};

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("clrprobe: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Doctor(cmd) => {
            let report = doctor::Report::probe();
            if cmd.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{report}");
            }
            Ok(if report.has_missing() { ExitCode::FAILURE } else { ExitCode::SUCCESS })
        }
        Command::Probe(cmd) => probe(cmd),
        Command::Record(cmd) => record(cmd),
        Command::Ps(cmd) => ps(cmd),
        Command::Top(cmd) => top(cmd),
        Command::Trace(cmd) => trace(cmd),
        Command::Counters(cmd) => counters(cmd),
        Command::Report(cmd) => {
            let r = clrprobe::report::read(&cmd.file, cmd.top)?;
            if cmd.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", clrprobe::report::text(&r));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn trace(cmd: clrprobe::cli::TraceCmd) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    use clrprobe::trace;
    if let Some(file) = &cmd.dump {
        let stdout = std::io::stdout();
        let stats = trace::dump(file, cmd.json, std::io::BufWriter::new(stdout.lock()))?;
        eprintln!(
            "clrprobe: {} events, {} dropped, {} not decoded, stream {}",
            stats.events, stats.dropped_events, stats.decode_errors, stats.status
        );
        return Ok(ExitCode::SUCCESS);
    }
    let pid = cmd.pid.context("--pid is required")?;
    let providers = clrprobe_eventpipe::ipc::parse_providers(&cmd.providers).context("--providers")?;
    let args = trace::TraceArgs {
        pid,
        providers,
        duration: cmd.duration.map(std::time::Duration::from_secs_f64),
        output: cmd.output.clone(),
        rundown: !cmd.no_rundown,
        buffer_mb: cmd.buffer_mb,
    };
    let s = trace::record_to_file(&args, trace_stop_flag())?;
    eprintln!(
        "clrprobe: wrote {} ({} bytes, {:.1} s, ended by {})",
        cmd.output.display(),
        s.bytes,
        s.seconds,
        s.ended_by
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(target_os = "linux")]
fn trace_stop_flag() -> &'static std::sync::atomic::AtomicBool {
    clrprobe::signals::stop_flag()
}

#[cfg(not(target_os = "linux"))]
fn trace_stop_flag() -> &'static std::sync::atomic::AtomicBool {
    static NEVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    &NEVER
}

#[cfg(target_os = "linux")]
fn record(cmd: clrprobe::cli::RecordCmd) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    use std::time::Duration;

    use clrprobe::record::{self, RecordArgs, RecordKinds};
    let named = cmd.cpu || cmd.alloc || cmd.exceptions || cmd.contention || cmd.offcpu;
    let kinds = if named {
        RecordKinds { cpu: cmd.cpu, alloc: cmd.alloc, exceptions: cmd.exceptions, contention: cmd.contention, offcpu: cmd.offcpu }
    } else {
        RecordKinds::default()
    };
    let launched = if cmd.command.is_empty() { None } else { Some(clrprobe::launch::spawn_stopped(&cmd.command)?) };
    let pids = launched.as_ref().map(|l| vec![l.pid]).unwrap_or_else(|| cmd.pids.clone());
    let args = RecordArgs {
        all: cmd.all,
        resume_after_attach: launched.is_some(),
        kinds,
        offcpu_min: Duration::from_micros(cmd.offcpu_min_us),
        pids: pids.clone(),
        duration: cmd.duration.map(Duration::from_secs_f64),
        freq: cmd.freq,
        sampler: cmd.sampler,
        eventpipe: !cmd.no_eventpipe,
        perf_map: !cmd.no_perf_map,
        cxa_throw: cmd.cxa_throw,
    };
    let stop = clrprobe::signals::stop_flag();
    let quiet = cmd.quiet;
    let result = record::run(&args, stop, |s| {
        if !quiet {
            eprint!(
                "\rclrprobe: {:5.1} s  {} samples  {} lost  {:.1}% of managed frames named   ",
                s.elapsed.as_secs_f64(),
                s.samples,
                s.lost,
                s.symbolized * 100.0
            );
            let _ = std::io::stderr().flush();
        }
    });
    if !quiet {
        eprintln!();
    }
    let (profile, mut summary) = match result {
        Ok(r) => r,
        Err(e) => {
            let doctor = doctor::Report::probe();
            if doctor.has_missing() {
                eprint!("{doctor}");
            }
            return Err(anyhow::Error::new(e).context("record failed"));
        }
    };
    let prefix = cmd.output.clone().unwrap_or_else(|| if cmd.all { "clrprobe-all".into() } else { record::default_prefix(&pids) });
    let mut written = record::write_all(&profile, &prefix, &cmd.format);
    if cmd.all {
        written.extend(record::write_per_process(&profile, &prefix));
    }
    if let Some(l) = launched {
        match l.finish() {
            Ok(status) => eprintln!("clrprobe: {} exited: {status}", cmd.command.join(" ")),
            Err(e) => eprintln!("clrprobe: warning: waiting for the launched command: {e}"),
        }
    }
    let mut failed = false;
    for w in &written {
        match &w.result {
            Ok(()) => eprintln!("clrprobe: wrote {}", w.path.display()),
            Err(e) => {
                failed = true;
                eprintln!("clrprobe: error: could not write {}: {e}", w.path.display());
            }
        }
    }
    drop(profile);
    summary.memory.after_outputs();
    for warning in &summary.warnings {
        eprintln!("clrprobe: warning: {warning}");
    }
    if cmd.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", clrprobe::record::summary_text(&summary));
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// Windows: the same flags and outputs, from ETW (needs an elevated prompt).
#[cfg(windows)]
fn record(cmd: clrprobe::cli::RecordCmd) -> anyhow::Result<ExitCode> {
    use std::time::Duration;

    use clrprobe_etw::RecordKinds;
    use clrprobe_pipeline::Kinds;
    anyhow::ensure!(cmd.pids.len() <= 1, "on Windows, record one process (-p PID) or every process (-p 0)");
    let pid = cmd.pids.first().copied().filter(|&p| p != 0);
    let named = cmd.cpu || cmd.alloc || cmd.exceptions || cmd.contention;
    let kinds = if named {
        RecordKinds { cpu: cmd.cpu, events: Kinds { alloc: cmd.alloc, exceptions: cmd.exceptions, contention: cmd.contention } }
    } else {
        RecordKinds { cpu: true, events: Kinds::ALL }
    };
    let duration = Duration::from_secs_f64(cmd.duration.unwrap_or(10.0));
    let (profile, report) = clrprobe_etw::record(pid, duration, kinds)?;
    let prefix = cmd.output.clone().unwrap_or_else(|| format!("clrprobe-{}", pid.unwrap_or(0)).into());
    let mut failed = false;
    for w in clrprobe::output::write_all(&profile, &prefix, &cmd.format) {
        match &w.result {
            Ok(()) => eprintln!("clrprobe: wrote {}", w.path.display()),
            Err(e) => {
                failed = true;
                eprintln!("clrprobe: error: could not write {}: {e}", w.path.display());
            }
        }
    }
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

#[cfg(not(any(target_os = "linux", windows)))]
fn record(_cmd: clrprobe::cli::RecordCmd) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`clrprobe record` needs Linux (BPF + EventPipe) or Windows (ETW)")
}

#[cfg(windows)]
fn counters(cmd: clrprobe::cli::CountersCmd) -> anyhow::Result<ExitCode> {
    let pid = cmd.pid.unwrap_or_else(std::process::id);
    let c = clrprobe_etw::counters(pid)?;
    println!("{c:#?}");
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(windows))]
fn counters(_cmd: clrprobe::cli::CountersCmd) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`clrprobe counters` reads the .NET Framework CLR's shared IPC block, which exists only on Windows; on Linux use `clrprobe trace --providers System.Runtime:0:4:EventCounterIntervalSec=1`")
}

#[cfg(target_os = "linux")]
fn probe(cmd: clrprobe::cli::ProbeCmd) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    use std::time::Duration;
    let args = clrprobe::probe::ProbeArgs {
        pids: cmd.pids.clone(),
        duration: Duration::from_secs_f64(cmd.duration),
        freq: cmd.freq,
        uprobe: cmd.uprobe_target(),
    };
    let report = match clrprobe::probe::run(&args, || eprintln!("clrprobe: attached, recording for {:.1} s", cmd.duration)) {
        Ok(r) => r,
        Err(e) => {
            let doctor = doctor::Report::probe();
            if doctor.has_missing() {
                eprint!("{doctor}");
            }
            return Err(e).context("probe failed");
        }
    };
    if cmd.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("cpus sampled: {}", report.cpus);
        for (pid, n) in &report.samples {
            println!("pid {pid}: {n} samples, {} distinct stacks", report.sample_keys[pid]);
        }
        for (pid, n) in &report.uprobe_hits {
            println!("pid {pid}: {n} uprobe hits");
        }
        for l in &report.bpf_logs {
            println!("bpf: {l}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(target_os = "linux"))]
fn probe(_cmd: clrprobe::cli::ProbeCmd) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`clrprobe probe` loads BPF programs and needs Linux")
}

#[cfg(target_os = "linux")]
fn ps(cmd: clrprobe::cli::PsCmd) -> anyhow::Result<ExitCode> {
    let procs = clrprobe::ps::list();
    if cmd.json {
        println!("{}", serde_json::to_string_pretty(&procs)?);
    } else {
        print!("{}", clrprobe::ps::table(&procs));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(target_os = "linux")]
fn top(cmd: clrprobe::cli::TopCmd) -> anyhow::Result<ExitCode> {
    clrprobe::top::run(&cmd)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(target_os = "linux"))]
fn ps(_cmd: clrprobe::cli::PsCmd) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`clrprobe ps` reads /proc and needs Linux")
}

#[cfg(not(target_os = "linux"))]
fn top(_cmd: clrprobe::cli::TopCmd) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`clrprobe top` needs Linux")
}
