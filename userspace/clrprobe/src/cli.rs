//! Command-line arguments, parsed by clap into plain structs.
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::cli_values::{parse_duration, parse_freq, parse_pid};

#[derive(Debug, Parser)]
#[command(name = "clrprobe", version, about = "A kernel-assisted profiler for .NET")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Checks what this machine allows (kernel, BTF, capabilities, perf, tracefs, uprobes).
    Doctor(DoctorCmd),
    /// Loads the BPF programs, samples the given processes and counts a uprobe in them.
    Probe(ProbeCmd),
    /// Records a profile of running .NET processes (CPU samples with named frames).
    Record(RecordCmd),
    /// Lists the .NET processes on this host: pid, runtime version, command line, container, perf map.
    Ps(PsCmd),
    /// A live view refreshed each second: top frames by CPU, allocations, exceptions, contention.
    Top(TopCmd),
    /// Records an EventPipe session to a .nettrace file, or dumps a file's events decoded.
    Trace(TraceCmd),
    /// Prints a recorded profile: top frames per kind, exceptions, contended sites, wait times.
    Report(ReportCmd),
    /// Heap snapshot of a process (types by retained bytes, root paths), or `heap diff A B`.
    Heap(crate::heap::HeapCmd),
    /// .NET Framework runtime counters from the CLR's shared IPC block (Windows).
    Counters(CountersCmd),
    /// Runs until stopped, profiling every .NET process; serves Prometheus `/metrics` and
    /// Go-style `/debug/pprof/*` over HTTP.
    Agent(crate::agent_cli::AgentCmd),
}

#[derive(Debug, Args)]
pub struct CountersCmd {
    /// Process to read (default: this process).
    #[arg(short = 'p', long = "pid")]
    pub pid: Option<u32>,
}

#[derive(Debug, Args)]
pub struct ReportCmd {
    /// What `clrprobe record` wrote: a PREFIX (reads every PREFIX.KIND.pb.gz and
    /// PREFIX.events.json), or pprof files (any pprof, also rewritten or merged ones) and
    /// events files.
    #[arg(required_unless_present = "replay", num_args = 1.., value_name = "PREFIX|FILE")]
    pub files: Vec<PathBuf>,
    /// Rebuild the profiles from what `record --save-raw DIR` kept (no root, no process
    /// needed): names from the saved maps and perf maps, native names from the files on disk
    /// when they are the ones recorded (build id), else `module+offset`.
    #[arg(long, value_name = "DIR", conflicts_with = "files")]
    pub replay: Option<PathBuf>,
    /// With --replay: output prefix (PREFIX.cpu.pb.gz, ...; default: the DIR's name + `.replay`).
    #[arg(short, long, requires = "replay")]
    pub output: Option<PathBuf>,
    /// With --replay: output formats.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "pprof", requires = "replay")]
    pub format: Vec<crate::formats::Format>,
    /// Frames listed per kind.
    #[arg(long, default_value_t = 15)]
    pub top: usize,
    /// JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TraceCmd {
    /// Process to trace.
    #[arg(short = 'p', long = "pid", visible_alias = "process-id", value_parser = parse_pid, required_unless_present_any = ["dump", "name"])]
    pub pid: Option<u32>,
    /// The process to trace by name (it must match exactly one; see `clrprobe ps`).
    #[arg(short = 'n', long, conflicts_with_all = ["pid", "dump"])]
    pub name: Option<String>,
    /// Providers: runtime keyword sets like `gc+exception+contention:verbose`, or
    /// `Name[:keywords[:level[:key=value;...]]]` (comma separated).
    #[arg(long, default_value = "gc+exception+contention+loader+jit:verbose")]
    pub providers: String,
    /// How long to trace: 10, 10s, 5m, hh:mm:ss (default: until Ctrl-C or the target exits).
    #[arg(short, long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Output file (default: trace.nettrace, or trace.speedscope.json with --format speedscope).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// What to write: the runtime's NetTrace bytes, or a speedscope file of the sampled
    /// stacks (the sample profiler's ThreadSample events, evented per thread).
    #[arg(long, value_enum, default_value_t = TraceFormat::Nettrace)]
    pub format: TraceFormat,
    /// No rundown (method/module names) at the end.
    #[arg(long)]
    pub no_rundown: bool,
    /// Session buffer size in MB.
    #[arg(long, default_value_t = 256)]
    pub buffer_mb: u32,
    /// Print the events of a .nettrace file instead of recording.
    #[arg(long, value_name = "FILE", conflicts_with = "pid")]
    pub dump: Option<PathBuf>,
    /// With --dump: JSON lines instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `trace --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceFormat {
    /// The NetTrace bytes as the runtime sent them (PerfView, TraceEvent, `trace --dump`).
    Nettrace,
    /// speedscope JSON of the sampled stacks (needs the sample profiler provider).
    Speedscope,
}

#[derive(Debug, Args)]
pub struct RecordCmd {
    /// Process ids to record: lists and repeats (-p 1,2 -p 3).
    #[arg(short = 'p', long = "pid", visible_alias = "process-id", value_parser = parse_pid, value_delimiter = ',',
          num_args = 1.., required_unless_present_any = ["all", "command", "names"])]
    pub pids: Vec<u32>,
    /// Every process with this name (comm, program file name, or the .dll dotnet runs); repeats.
    #[arg(short = 'n', long = "name", value_name = "NAME", conflicts_with_all = ["all", "command"])]
    pub names: Vec<String>,
    /// Every process on the host: all CPUs sampled, every .NET process (also ones that start
    /// while recording) gets names; writes PREFIX.* for the host and PREFIX.PID.* per process.
    #[arg(short = 'a', long, conflicts_with_all = ["pids", "command"])]
    pub all: bool,
    /// With --all: only .NET processes descending from PID get perf maps and EventPipe
    /// sessions (the whole host is still sampled).
    #[arg(long, value_name = "PID", requires = "all")]
    pub parent: Option<u32>,
    /// Start this command and record it from its first instruction until it exits.
    #[arg(last = true, conflicts_with = "pids")]
    pub command: Vec<String>,
    /// How long to record: 10, 2.5, 10s, 500ms, 5m, hh:mm:ss (default: until Ctrl-C or the
    /// targets exit).
    #[arg(short, long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Sampling frequency in Hz (1 to 100000).
    #[arg(short = 'F', long, default_value = "99", value_parser = parse_freq)]
    pub freq: u64,
    /// Call graphs: accepted for perf's habit; stacks are always recorded.
    #[arg(short = 'g', long = "call-graph", num_args = 0..=1, default_missing_value = "fp", value_name = "MODE")]
    pub call_graph: Option<String>,
    /// Output prefix (PREFIX.cpu.pb.gz, PREFIX.cpu.svg, ...), a directory (ending in /), or a
    /// file name whose suffix names the format (`-o cpu.pb.gz` with one kind writes that file).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Output formats.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "pprof,folded,svg,firefox")]
    pub format: Vec<crate::formats::Format>,
    /// Which CPU sampler to use.
    #[arg(long, value_enum, default_value_t = SamplerChoice::Auto)]
    pub sampler: SamplerChoice,
    /// Record CPU samples. Naming any kind records only the kinds named; none: all of them.
    #[arg(long)]
    pub cpu: bool,
    /// Record allocations (AllocationTick).
    #[arg(long)]
    pub alloc: bool,
    /// Record exceptions (ExceptionThrown from EventPipe; on .NET 5+ from a second session at
    /// Error level, so the runtime does not also write its catch and finally events, each with
    /// a stack walk).
    #[arg(long)]
    pub exceptions: bool,
    /// With exceptions: also count `__cxa_throw` in the kernel with a uprobe (a trap per throw,
    /// priced at start-up; on by itself only where EventPipe is unavailable).
    #[arg(long)]
    pub cxa_throw: bool,
    /// Record lock contention (ContentionStart/Stop).
    #[arg(long)]
    pub contention: bool,
    /// Record off-CPU time (sched_switch): time threads spend blocked (locks, sleeps, I/O,
    /// sched_yield) under the stacks they blocked at, labelled wait=KIND. Time spent preempted
    /// (runnable, waiting for a CPU) is counted per thread under one `[preempted]` frame,
    /// without stacks.
    #[arg(long)]
    pub offcpu: bool,
    /// Record outgoing HTTP requests (System.Net EventSources with activity tracking): writes
    /// PREFIX.http.jsonl, a table per host and path, Firefox Profiler markers. Only when named;
    /// add --cpu --offcpu to see what the slowest requests' threads did meanwhile.
    #[arg(long)]
    pub http: bool,
    /// EventSources to add to the session, as in `trace --providers`
    /// (`Name[:keywords[:level[:key=value;…]]]`, comma separated); each gets a summary of its
    /// events (counts, numeric fields summed and as percentiles).
    #[arg(long)]
    pub providers: Option<String>,
    /// Shortest off-CPU interval recorded, in microseconds.
    #[arg(long, default_value_t = 1000)]
    pub offcpu_min_us: u64,
    /// Put each thread (`thread NAME (TID)`) at the root of its stacks.
    #[arg(long)]
    pub thread_roots: bool,
    /// Do not open an EventPipe session in the targets.
    #[arg(long)]
    pub no_eventpipe: bool,
    /// Do not switch perf maps on in the targets.
    #[arg(long)]
    pub no_perf_map: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// No live status line.
    #[arg(short, long)]
    pub quiet: bool,
    /// Also keep the raw inputs (samples with addresses, maps and perf-map snapshots, each
    /// process's EventPipe stream) in DIR, for `clrprobe report --replay DIR`.
    #[arg(long, value_name = "DIR")]
    pub save_raw: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DoctorCmd {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ProbeCmd {
    /// Process ids to record (0 = every process).
    #[arg(short = 'p', long = "pid", required = true, num_args = 1..)]
    pub pids: Vec<u32>,
    /// Seconds to record.
    #[arg(short, long, default_value_t = 2.0)]
    pub duration: f64,
    /// Sampling frequency in Hz.
    #[arg(long, default_value_t = 99)]
    pub freq: u64,
    /// Uprobe to count, as LIBRARY:SYMBOL (LIBRARY a path or a name such as libc).
    #[arg(long, default_value = "libc:write")]
    pub uprobe: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

impl ProbeCmd {
    /// Splits `--uprobe LIB:SYMBOL` at the last colon.
    pub fn uprobe_target(&self) -> Option<(PathBuf, String)> {
        let (lib, sym) = self.uprobe.rsplit_once(':')?;
        (!lib.is_empty() && !sym.is_empty()).then(|| (PathBuf::from(lib), sym.to_string()))
    }
}

/// Which sampler to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SamplerChoice {
    /// BPF when it loads, else the perf_event fallback.
    #[default]
    Auto,
    Bpf,
    Perf,
}


#[derive(Debug, Args)]
pub struct PsCmd {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TopCmd {
    /// Process to watch.
    #[arg(short = 'p', long = "pid", visible_alias = "process-id", value_parser = parse_pid, required_unless_present = "all")]
    pub pid: Option<u32>,
    /// Every .NET process on the host.
    #[arg(short = 'a', long, conflicts_with = "pid")]
    pub all: bool,
    /// Sampling frequency in Hz (1 to 100000).
    #[arg(short = 'F', long, default_value = "99", value_parser = parse_freq)]
    pub freq: u64,
    /// Rows per table.
    #[arg(long, default_value_t = 10)]
    pub rows: usize,
    /// Stop after this long: 10, 10s, 5m, hh:mm:ss (default: until q or Ctrl-C).
    #[arg(short, long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
}
