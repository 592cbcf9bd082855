//! The EventPipe session of a recording: its providers and keywords from the kinds asked for,
//! how long stopping it may take, and the error of opening it (the pipeline's EventPipe
//! source reads it).
use std::time::Duration;

use clrprobe_eventpipe::ipc::{IpcError, Level, ProviderConfig, RUNDOWN_PROVIDER, RUNTIME_PROVIDER, SessionConfig};

use clrprobe_pipeline::Kinds;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("EventPipe session on pid {pid}: {source}")]
    Ipc { pid: u32, #[source] source: IpcError },
}

/// Keywords of the runtime provider clrprobe asks for to name JIT code: Jit (0x10) and
/// Loader (0x8) give MethodLoadVerbose and module loads while recording.
pub const NAMING_KEYWORDS: u64 = 0x10 | 0x8;

/// The runtime's GC keyword: GCStart/End, SuspendEE/RestartEE, GCHeapStats and the heap
/// histories of the GC timeline (asked for in every session, so every recording of a .NET
/// target has its GCs; at verbose it also brings AllocationTick, one per ~100 KB allocated).
pub const GC_KEYWORD: u64 = 0x1;

/// The runtime's Exception keyword: ExceptionThrown (at Error), and at Informational also the
/// catch/finally/filter and thrown-stop events of every throw.
pub const EXCEPTION_KEYWORD: u64 = 0x8000;

/// Runtime keywords for the event kinds: GC (AllocationTick at verbose), Exception, Contention,
/// Threading (ThreadCreated), and Stack (a stack with each event).
pub fn kind_keywords(kinds: Kinds) -> u64 {
    let mut k = 0;
    if kinds.alloc || kinds.exceptions || kinds.contention {
        // Threading (ThreadCreated) and a stack with each event.
        k |= 0x10000 | 0x4000_0000;
    }
    if kinds.alloc {
        k |= 0x1;
    }
    if kinds.exceptions {
        k |= EXCEPTION_KEYWORD;
    }
    if kinds.contention {
        k |= 0x4000;
    }
    k
}

/// The session for one target: JIT/loader events and the rundown name code; GC events feed
/// the GC timeline; `extra_runtime_keywords` add the event kinds.
///
/// The runtime provider runs at Verbose only when something needs it: AllocationTick
/// (allocations) or MethodLoadVerbose (naming JIT code when the target has no perf map, as on
/// .NET Core 3.1). Otherwise Informational, which still carries GC, exception and contention
/// events but not one AllocationTick (with a stack walk) per 100 KB allocated — measured as
/// most of the cost of a session on an allocation-heavy app.
pub fn session_config(extra_runtime_keywords: u64, verbose: bool) -> SessionConfig {
    let level = if verbose { Level::Verbose } else { Level::Informational };
    SessionConfig {
        circular_buffer_mb: 64,
        request_rundown: true,
        request_stackwalk: true,
        providers: vec![
            ProviderConfig::new(RUNTIME_PROVIDER, NAMING_KEYWORDS | GC_KEYWORD | extra_runtime_keywords, level),
            // Rundown keywords: Loader | Jit | End enumeration | NGen.
            ProviderConfig::new(RUNDOWN_PROVIDER, 0x8 | 0x10 | 0x100 | 0x20, Level::Verbose),
        ],
    }
}

/// The session's providers as `clrprobe trace --providers` takes them
/// (`Name:0xKEYWORDS:LEVEL[:key=value;...]`, comma-separated): the benchmarks open the same
/// session with a client that only reads.
pub fn providers_spec(config: &SessionConfig) -> String {
    let entries: Vec<String> = config
        .providers
        .iter()
        .map(|p| {
            let mut e = format!("{}:{:#x}:{}", p.name, p.keywords, p.level as u32);
            if !p.arguments.is_empty() {
                e.push(':');
                e.push_str(&p.arguments.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(";"));
            }
            e
        })
        .collect();
    entries.join(",")
}

/// How long stopping sessions may take in all: StopTracing, the rundown, the end of the
/// stream. A runtime that has not finished by then (stopped with SIGSTOP, a fake server, a
/// rundown too long) is given up on: its stream is shut down and what was read is kept.
pub const STOP_DEADLINE: Duration = Duration::from_millis(1000);
/// … when the recording ended by its duration or its targets' exit (no one waits on a 2 s
/// bound): rundowns name the JIT code (all of it on .NET Core 3.1, which has no perf map),
/// and four .NET Core 3.1 runtimes' rundowns took more than 1 s at load 7 here.
pub const UNHURRIED_STOP_DEADLINE: Duration = Duration::from_secs(5);

/// The time sessions get to stop: [`STOP_DEADLINE`] after Ctrl-C or SIGTERM,
/// [`UNHURRIED_STOP_DEADLINE`] otherwise.
pub fn stop_deadline() -> Duration {
    if crate::signals::signalled() { STOP_DEADLINE } else { UNHURRIED_STOP_DEADLINE }
}

/// The process is stopped (state `T` or `t` in /proc/PID/stat): its runtime answers nothing
/// until it is continued.
pub(crate) fn process_stopped(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next());
    matches!(state, Some("T" | "t"))
}
