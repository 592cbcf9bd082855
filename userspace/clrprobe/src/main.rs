use std::process::ExitCode;

/// Writes to stdout; a closed pipe (`| head -1`) ends the program quietly with status 0.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($t)*)?
    }};
}

macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($t)*)?
    }};
}

use clap::Parser;
use clrprobe::{
    cli::{Cli, Command},
    doctor,
};

fn main() -> ExitCode {
    #[cfg(target_os = "linux")]
    clrprobe::alloc_tuning::return_large_frees();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) if clrprobe::errors::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("clrprobe: error: {}", clrprobe::errors::one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// Help and version print as clap writes them; a bad command line is one line on stderr
/// (clap's first line: what was wrong and what is accepted) and exit status 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand) {
        e.exit();
    }
    let text = e.to_string();
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("invalid command line");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    eprintln!("clrprobe: error: {first} (see clrprobe --help)");
    ExitCode::from(2)
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Doctor(cmd) => {
            let report = doctor::Report::probe();
            if cmd.json {
                outln!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                out!("{report}");
            }
            Ok(if report.has_missing() { ExitCode::FAILURE } else { ExitCode::SUCCESS })
        }
        Command::Probe(cmd) => probe(cmd),
        Command::Record(cmd) => record(cmd),
        Command::Ps(cmd) => ps(cmd),
        Command::Top(cmd) => top(cmd),
        Command::Trace(cmd) => trace(cmd),
        Command::Heap(cmd) => Ok(if clrprobe::heap::run(&cmd, trace_stop_flag())? { ExitCode::SUCCESS } else { ExitCode::FAILURE }),
        Command::Counters(cmd) => counters(cmd),
        Command::Agent(cmd) => agent(cmd),
        #[cfg(target_os = "linux")]
        Command::Report(cmd) if cmd.replay.is_some() => replay(cmd),
        Command::Report(cmd) => {
            let r = clrprobe::report::read_inputs(&cmd.files, cmd.top)?;
            if cmd.json {
                outln!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                out!("{}", clrprobe::report::text(&r));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `report --replay DIR`: the profiles rebuilt from a `record --save-raw` directory.
#[cfg(target_os = "linux")]
fn replay(cmd: clrprobe::cli::ReportCmd) -> anyhow::Result<ExitCode> {
    let dir = cmd.replay.clone().expect("checked by the caller");
    let r = clrprobe::replay::profiles(&dir)?;
    let prefix = cmd.output.clone().unwrap_or_else(|| clrprobe::replay::default_prefix(&dir));
    clrprobe::output::prepare(&prefix)?;
    eprint!("clrprobe: {}", clrprobe::replay::summary(&r));
    let mut failed = false;
    for w in clrprobe::replay::write(&r, &prefix, &cmd.format) {
        match w.error_line() {
            Some(line) => {
                eprintln!("clrprobe: {line}");
                failed = true;
            }
            None => eprintln!("clrprobe: wrote {}", w.path.display()),
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

fn trace(cmd: clrprobe::cli::TraceCmd) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    use clrprobe::trace;
    if let Some(file) = &cmd.dump {
        if cmd.format == clrprobe::cli::TraceFormat::Speedscope {
            let output = cmd.output.clone().unwrap_or_else(|| "trace.speedscope.json".into());
            let n = trace::to_speedscope(file, &output)?;
            eprintln!("clrprobe: wrote {} ({n} stack samples)", output.display());
            return Ok(ExitCode::SUCCESS);
        }
        let stdout = std::io::stdout();
        let stats = trace::dump(file, cmd.json, std::io::BufWriter::new(stdout.lock()))?;
        eprintln!(
            "clrprobe: {} events, {} dropped, {} not decoded, stream {}",
            stats.events, stats.dropped_events, stats.decode_errors, stats.status
        );
        return Ok(ExitCode::SUCCESS);
    }
    let pid = match (&cmd.pid, &cmd.name) {
        (Some(pid), _) => *pid,
        (None, Some(name)) => one_pid_named(name)?,
        (None, None) => anyhow::bail!("name the process to trace with -p PID or -n NAME"),
    };
    let providers = clrprobe_eventpipe::ipc::parse_providers(&cmd.providers).context("--providers")?;
    let speedscope = cmd.format == clrprobe::cli::TraceFormat::Speedscope;
    let output = cmd.output.clone().unwrap_or_else(|| {
        if speedscope { "trace.speedscope.json".into() } else { "trace.nettrace".into() }
    });
    // speedscope: the NetTrace goes to a temporary file next to the output, then converts.
    let nettrace = if speedscope { output.with_extension("nettrace.tmp") } else { output.clone() };
    let args = trace::TraceArgs {
        pid,
        providers,
        duration: cmd.duration,
        output: nettrace.clone(),
        rundown: !cmd.no_rundown,
        buffer_mb: cmd.buffer_mb,
    };
    let s = trace::record_to_file(&args, trace_stop_flag())?;
    if speedscope {
        let converted = trace::to_speedscope(&nettrace, &output);
        let _ = std::fs::remove_file(&nettrace);
        let n = converted.with_context(|| format!("converting the trace to {}", output.display()))?;
        eprintln!("clrprobe: {n} stack samples");
    }
    eprintln!(
        "clrprobe: wrote {} ({} bytes of NetTrace, {:.1} s, ended by {})",
        output.display(),
        s.bytes,
        s.seconds,
        s.ended_by
    );
    Ok(ExitCode::SUCCESS)
}

/// The one process called `name` (`trace -n`).
#[cfg(target_os = "linux")]
fn one_pid_named(name: &str) -> anyhow::Result<u32> {
    match clrprobe::cli_values::pids_named(name).as_slice() {
        [] => anyhow::bail!("no process named {name:?}; `clrprobe ps` lists the .NET ones"),
        [pid] => Ok(*pid),
        many => anyhow::bail!("{} processes are named {name:?} ({many:?}); pick one with -p PID", many.len()),
    }
}

#[cfg(not(target_os = "linux"))]
fn one_pid_named(name: &str) -> anyhow::Result<u32> {
    anyhow::bail!("-n {name:?}: finding processes by name needs Linux; use -p PID")
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
    use std::time::Duration;

    use clrprobe::record::{self, RecordArgs, RecordKinds};
    let named = cmd.cpu || cmd.alloc || cmd.exceptions || cmd.contention || cmd.offcpu || cmd.http;
    let kinds = if named {
        RecordKinds { cpu: cmd.cpu, alloc: cmd.alloc, exceptions: cmd.exceptions, contention: cmd.contention, offcpu: cmd.offcpu }
    } else {
        RecordKinds::default()
    };
    anyhow::ensure!(
        !(cmd.no_eventpipe && (cmd.http || cmd.providers.is_some())),
        "--http and --providers read EventPipe: drop --no-eventpipe"
    );
    let mut named_pids = cmd.pids.clone();
    for name in &cmd.names {
        let found = clrprobe::cli_values::pids_named(name);
        anyhow::ensure!(!found.is_empty(), "no process named {name:?}; `clrprobe ps` lists the .NET ones");
        named_pids.extend(found);
    }
    named_pids.sort_unstable();
    named_pids.dedup();
    let launched = if cmd.command.is_empty() { None } else { Some(clrprobe::launch::spawn_stopped(&cmd.command)?) };
    let pids = launched.as_ref().map(|l| vec![l.pid]).unwrap_or(named_pids);
    let default_prefix = if cmd.all { "clrprobe-all".into() } else { record::default_prefix(&pids) };
    let name = match &cmd.output {
        Some(o) => clrprobe::output::OutputName::parse(o, &default_prefix.to_string_lossy()),
        None => clrprobe::output::OutputName { prefix: default_prefix, file: None },
    };
    // A bad output directory fails now, not after the recording.
    clrprobe::output::prepare(&name.prefix)?;
    let args = RecordArgs {
        all: cmd.all,
        fold_files: cmd.all.then(|| name.prefix.clone()),
        resume_after_attach: launched.is_some(),
        kinds,
        offcpu_min: Duration::from_micros(cmd.offcpu_min_us),
        pids: pids.clone(),
        duration: cmd.duration,
        freq: cmd.freq,
        sampler: cmd.sampler,
        eventpipe: !cmd.no_eventpipe,
        perf_map: !cmd.no_perf_map,
        thread_roots: cmd.thread_roots,
        net: record::http::NetArgs::parse(cmd.http, cmd.providers.as_deref())?,
        cxa_throw: cmd.cxa_throw,
        save_raw: cmd.save_raw.clone(),
        parent: cmd.parent,
    };
    let mut named: Vec<_> = pids.iter().map(|&p| clrprobe::target_notes::NamedTarget::probe(p)).collect();
    if launched.is_some() {
        // Still the stopped shell that execs the command: named by the command, judged at the end.
        let program = cmd.command.first().map(|c| c.rsplit('/').next().unwrap_or(c).to_string()).unwrap_or_default();
        for t in &mut named {
            t.comm = program.clone();
        }
    }
    let early: Vec<String> = if launched.is_some() { Vec::new() } else { named.iter().filter_map(|t| t.early_note()).collect() };
    for note in &early {
        eprintln!("clrprobe: {note}");
    }
    // Every recording runs on the streaming pipeline (record::run, the old one-shot path,
    // was removed in round 10).
    let shown = PipelineShown { quiet: cmd.quiet, json: cmd.json, named: &named, early: &early, launched, command: &cmd.command };
    record_on_pipeline(&args, &name, &cmd.format, shown)
}

/// What `record` on the pipeline shows besides the files.
#[cfg(target_os = "linux")]
struct PipelineShown<'a> {
    quiet: bool,
    json: bool,
    named: &'a [clrprobe::target_notes::NamedTarget],
    /// Notes printed before the recording (not repeated as warnings).
    early: &'a [String],
    launched: Option<clrprobe::launch::Launched>,
    command: &'a [String],
}

/// `record`: the recording on the streaming pipeline, and its outputs.
#[cfg(target_os = "linux")]
fn record_on_pipeline(
    args: &clrprobe::record::RecordArgs,
    name: &clrprobe::output::OutputName,
    formats: &[clrprobe::formats::Format],
    shown: PipelineShown<'_>,
) -> anyhow::Result<ExitCode> {
    let PipelineShown { quiet, json, named, early, launched, command } = shown;
    let stop = clrprobe::signals::stop_flag();
    let mut rec = clrprobe::pipeline::recorder::run(args, stop, |s| show_status(s, quiet))
    .map_err(|e| anyhow::Error::new(e).context("record failed"))?;
    if !quiet {
        eprintln!();
    }
    let writing = std::time::Instant::now();
    let mut summary = clrprobe::pipeline::recorder::summary(&rec, args);
    summary.warnings.extend(clrprobe::target_notes::warnings(named, &summary, args.perf_map || args.eventpipe));
    if let Some(line) = &summary.saved_raw {
        eprintln!("clrprobe: {line}");
    }
    log::info!("outputs: summary made in {:?}", writing.elapsed());
    let mut failed = false;
    // `--all`: each recorded process's own files too (those of processes folded as they
    // exited were written then), beside the host-wide ones.
    let folded_files = rec.folded.as_mut().map(|f| std::mem::take(&mut f.written)).unwrap_or_default();
    let mut written = std::thread::scope(|s| {
        let (profile, prefix) = (&rec.profile, &name.prefix);
        let recorded: Vec<u32> = summary.recorded.iter().filter(|r| r.dotnet).map(|r| r.pid).filter(|p| !summary.folded_file_pids.contains(p)).collect();
        let per_process = args.all.then(|| s.spawn(move || clrprobe::record::write_per_process(profile, prefix, &recorded)));
        let mut w = clrprobe::output::write_named(profile, name, formats);
        w.extend(per_process.and_then(|h| h.join().ok()).unwrap_or_default());
        w.extend(folded_files);
        w
    });
    written.extend(clrprobe::record::http::write_outputs(&summary, &name.prefix));
    log::info!("outputs: {} files written after {:?}", written.len(), writing.elapsed());
    for w in written {
        match w.error_line() {
            None => eprintln!("clrprobe: wrote {}", w.path.display()),
            Some(e) => {
                failed = true;
                eprintln!("clrprobe: error: {e}");
            }
        }
    }
    if summary.folded_files_more > 0 {
        eprintln!("clrprobe: wrote {} more files of processes that exited ({}.PID.*)", summary.folded_files_more, name.prefix.display());
    }
    if summary.reports_in_files > 0 {
        eprintln!(
            "clrprobe: the event reports of {} processes that exited are in their {}.PID.events.json only",
            summary.reports_in_files,
            name.prefix.display()
        );
    }
    drop(rec);
    if let Some(l) = launched {
        match l.finish() {
            Ok(status) => eprintln!("clrprobe: {} exited: {status}", command.join(" ")),
            Err(e) => eprintln!("clrprobe: warning: waiting for the launched command: {e}"),
        }
    }
    summary.memory.after_outputs();
    for w in summary.warnings.iter().filter(|w| !early.contains(w)) {
        eprintln!("clrprobe: warning: {w}");
    }
    if json {
        outln!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        out!("{}", clrprobe::record::summary_text(&summary));
    }
    log::info!("record: done {:?} after writing began", writing.elapsed());
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// Windows: the same flags and outputs, from ETW (needs an elevated prompt).
#[cfg(windows)]
fn record(cmd: clrprobe::cli::RecordCmd) -> anyhow::Result<ExitCode> {
    use std::time::Duration;

    use clrprobe_etw::RecordKinds;
    use clrprobe_pipeline::Kinds;
    anyhow::ensure!(cmd.pids.len() <= 1 && cmd.names.is_empty(), "on Windows, record one process (-p PID) or every process (-a)");
    let pid = if cmd.all { None } else { cmd.pids.first().copied() };
    let named = cmd.cpu || cmd.alloc || cmd.exceptions || cmd.contention;
    let kinds = if named {
        RecordKinds { cpu: cmd.cpu, events: Kinds { alloc: cmd.alloc, exceptions: cmd.exceptions, contention: cmd.contention } }
    } else {
        RecordKinds { cpu: true, events: Kinds::ALL }
    };
    let duration = cmd.duration.unwrap_or(Duration::from_secs(10));
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
    outln!("{}", serde_json::to_string_pretty(&report)?);
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
    outln!("{c:#?}");
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
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        outln!("cpus sampled: {}", report.cpus);
        for (pid, n) in &report.samples {
            outln!("pid {pid}: {n} samples, {} distinct stacks", report.sample_keys[pid]);
        }
        for (pid, n) in &report.uprobe_hits {
            outln!("pid {pid}: {n} uprobe hits");
        }
        for l in &report.bpf_logs {
            outln!("bpf: {l}");
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
        outln!("{}", serde_json::to_string_pretty(&procs)?);
    } else {
        out!("{}", clrprobe::ps::table(&procs));
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

#[cfg(target_os = "linux")]
fn agent(cmd: clrprobe::agent_cli::AgentCmd) -> anyhow::Result<ExitCode> {
    use std::time::Duration;

    use clrprobe_pipeline::Kinds;
    let args = clrprobe::agent::AgentArgs {
        listen: cmd.listen,
        host: clrprobe::pipeline::sources::HostConfig {
            all: cmd.all || cmd.pids.is_empty(),
            dotnet_only: cmd.dotnet_only,
            pids: cmd.pids.clone(),
            freq: cmd.freq,
            sampler: cmd.sampler,
            offcpu: !cmd.no_offcpu,
            offcpu_min: Duration::from_micros(cmd.offcpu_min_us),
            oncpu: false,
            kinds: Kinds { alloc: !cmd.no_alloc, exceptions: true, contention: true },
            eventpipe: true,
            perf_map: true,
            rundown: true,
            parent: cmd.parent,
            children: false,
            stack_copies: cmd.unwind_copies,
            counters_interval_s: (cmd.counters_interval > 0).then_some(cmd.counters_interval),
            alloc_slices: cmd.alloc_duty(),
            warnings: None,
            recording: None,
        },
        window_s: cmd.window,
        exited_grace_s: cmd.exited_grace,
    };
    if cmd.print_sessions {
        let specs = clrprobe::pipeline::sources::dotnet_session_specs(&args.host);
        println!("buffer-mb {}", clrprobe::record::EVENTPIPE_BUFFER_MB);
        println!("session {}", specs.session);
        // A second session for the process's life, without rundown.
        if let Some(exceptions) = specs.exceptions {
            println!("also {exceptions}");
        }
        if let (Some(slice), Some(duty)) = (specs.slice, args.host.alloc_slices) {
            println!("slice {} {} {slice}", duty.slice.as_secs(), duty.period.as_secs());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let stop = clrprobe::signals::stop_flag();
    let result = clrprobe::agent::run(&args, stop, |addr, fallback| {
        if let Some(why) = fallback {
            eprintln!("clrprobe: warning: {why}");
        }
        eprintln!("clrprobe agent: serving http://{addr}/metrics and http://{addr}/debug/pprof/");
    });
    if let Err(e) = result {
        let doctor = doctor::Report::probe();
        if doctor.has_missing() {
            eprint!("{doctor}");
        }
        return Err(anyhow::Error::new(e).context("agent failed"));
    }
    eprintln!("clrprobe agent: stopped");
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(target_os = "linux"))]
fn agent(_cmd: clrprobe::agent_cli::AgentCmd) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`clrprobe agent` needs Linux (BPF + EventPipe)")
}

/// The recording's status line on stderr (both recording paths), unless `quiet`.
#[cfg(target_os = "linux")]
fn show_status(s: &clrprobe::record::Status, quiet: bool) {
    use std::io::Write;
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
}
