//! The EventPipe side of a recording: one session on the target's diagnostics socket, read on
//! its own thread by the NetTrace reader, each event handed to a [`ClrCollector`]. Stopping
//! sends StopTracing, which makes the runtime emit its rundown and close the stream.
use std::{
    io::Read,
    sync::{Arc, Mutex},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use clrprobe_eventpipe::{
    ipc::{Client, IpcError, Level, ProviderConfig, RUNDOWN_PROVIDER, RUNTIME_PROVIDER, SessionConfig, StopHandle},
    nettrace::{NetTraceError, NetTraceReader, ReaderStats, StreamStatus},
};

use clrprobe_pipeline::Kinds;

use super::clr_collect::ClrCollector;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("EventPipe session on pid {pid}: {source}")]
    Ipc { pid: u32, #[source] source: IpcError },
    #[error("reading the EventPipe stream of pid {pid}: {source}")]
    Stream { pid: u32, #[source] source: NetTraceError },
    #[error("the runtime of pid {pid} did not finish its EventPipe session within {seconds:.1} s of StopTracing (stopped or not answering): kept the events read before")]
    NoAnswer { pid: u32, seconds: f64 },
    #[error("the EventPipe reader of pid {pid} did not end after its stream was shut down: kept the events read before")]
    GaveUp { pid: u32 },
}

/// What the session thread produced.
pub struct SessionOutcome {
    pub collector: ClrCollector,
    pub stats: ReaderStats,
    pub status: StreamStatus,
    /// A read error that ended the stream early (events before it are kept in `collector`).
    pub error: Option<SessionError>,
}

pub struct RuntimeSession {
    pid: u32,
    stop: StopHandle,
    thread: Option<JoinHandle<SessionOutcome>>,
    /// Live view of the collector, shared with the reader thread.
    pub live: Arc<Mutex<ClrCollector>>,
}

/// Keywords of the runtime provider clrprobe asks for to name JIT code: Jit (0x10) and
/// Loader (0x8) give MethodLoadVerbose and module loads while recording.
pub const NAMING_KEYWORDS: u64 = 0x10 | 0x8;

/// The runtime's GC keyword: GCStart/End, SuspendEE/RestartEE, GCHeapStats and the heap
/// histories of the GC timeline (asked for in every session, so every recording of a .NET
/// target has its GCs; at verbose it also brings AllocationTick, one per ~100 KB allocated).
pub const GC_KEYWORD: u64 = 0x1;

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
        k |= 0x8000;
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

impl RuntimeSession {
    /// Opens the session and starts reading it, with EventSource events also going to `net`.
    pub fn start_with(pid: u32, config: &SessionConfig, kinds: Kinds, net: Option<crate::http::NetCollector>) -> Result<Self, SessionError> {
        let client = Client::for_pid(pid).map_err(|source| SessionError::Ipc { pid, source })?.with_timeout(START_TIMEOUT);
        let requested_mono_ns = super::gc::monotonic_ns();
        let session = client.start_session(config).map_err(|source| SessionError::Ipc { pid, source })?;
        let stop = session.stop_handle();
        let mut collector = ClrCollector::new(pid, kinds);
        collector.net = net;
        let live = Arc::new(Mutex::new(collector));
        let shared = Arc::clone(&live);
        let thread = std::thread::Builder::new()
            .name(format!("eventpipe-{pid}"))
            .spawn(move || read_all(pid, session, shared, kinds, requested_mono_ns))
            .map_err(|e| SessionError::Ipc { pid, source: IpcError::Io(e) })?;
        Ok(Self { pid, stop, thread: Some(thread), live })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    fn kinds(&self) -> Kinds {
        self.live.lock().map(|c| c.profiles.kinds()).unwrap_or(Kinds::ALL)
    }

    /// Sends StopTracing from a helper thread (bounded by `deadline`); the reader thread keeps
    /// reading the rundown meanwhile.
    fn begin_stop(&self, deadline: Instant) {
        self.begin_stop_after(deadline, || {});
    }

    /// [`Self::begin_stop`] once `first` has run, on the same helper thread.
    pub fn begin_stop_after(&self, deadline: Instant, first: impl FnOnce() + Send + 'static) {
        let stop = self.stop.clone();
        let spawned = std::thread::Builder::new().name(format!("stop-{}", self.pid)).spawn(move || {
            first();
            let timeout = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(50));
            let _ = stop.stop_within(timeout);
        });
        if let Err(e) = spawned {
            log::warn!("no thread to stop the session of {}: {e}", self.pid);
        }
    }

    /// The outcome, once the reader has ended by itself (the target exited): the reader
    /// thread is joined and the connection closed, so a long `--all` run keeps no threads,
    /// sockets or stream buffers of exited processes.
    pub fn try_finish(&mut self) -> Option<SessionOutcome> {
        if !self.thread.as_ref().is_some_and(|t| t.is_finished()) {
            return None;
        }
        Some(self.outcome())
    }

    fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// The reader's outcome if it has ended; else what it collected so far (the reader thread
    /// is left behind, its stream shut down).
    fn outcome(&mut self) -> SessionOutcome {
        match self.thread.take() {
            Some(t) if t.is_finished() => match t.join() {
                Ok(o) => o,
                Err(_) => self.partial(None),
            },
            Some(_) => self.partial(Some(SessionError::GaveUp { pid: self.pid })),
            None => self.partial(None),
        }
    }

    fn partial(&self, error: Option<SessionError>) -> SessionOutcome {
        SessionOutcome {
            collector: take(&self.live, self.pid, self.kinds()),
            stats: ReaderStats::default(),
            status: StreamStatus::Truncated,
            error,
        }
    }
}

/// Bound of CollectTracing (a stopped runtime does not answer).
const START_TIMEOUT: Duration = Duration::from_secs(5);

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

/// Stops every session at once and waits for them until `deadline`; sessions not done by then
/// are aborted (their events so far are kept, the outcome names the reason).
pub fn finish_all(sessions: Vec<RuntimeSession>, deadline: Instant) -> Vec<(u32, SessionOutcome)> {
    finish_all_while(sessions, deadline, || {})
}

/// [`finish_all`], calling `meanwhile` (bounded by `deadline` itself) while the sessions end.
pub fn finish_all_while(mut sessions: Vec<RuntimeSession>, deadline: Instant, mut meanwhile: impl FnMut()) -> Vec<(u32, SessionOutcome)> {
    for s in &sessions {
        s.begin_stop(deadline);
    }
    // A runtime whose process is stopped (SIGSTOP, a debugger) cannot answer before the
    // deadline: given up on at once, not after waiting the deadline out.
    let mut given_up = vec![false; sessions.len()];
    let mut checked = Instant::now();
    while Instant::now() < deadline && !sessions.iter().enumerate().all(|(i, s)| given_up[i] || s.is_finished()) {
        meanwhile();
        if checked.elapsed() >= Duration::from_millis(50) {
            checked = Instant::now();
            for (i, s) in sessions.iter().enumerate() {
                if !given_up[i] && !s.is_finished() && process_stopped(s.pid) {
                    given_up[i] = true;
                    s.stop.abort();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let late: Vec<usize> = (0..sessions.len()).filter(|&i| given_up[i] || !sessions[i].is_finished()).collect();
    for &i in &late {
        sessions[i].stop.abort();
    }
    // A shut-down stream ends the reader within milliseconds.
    let grace = Instant::now() + Duration::from_millis(150);
    while Instant::now() < grace && !late.iter().all(|&i| sessions[i].is_finished()) {
        std::thread::sleep(Duration::from_millis(5));
    }
    sessions
        .iter_mut()
        .enumerate()
        .map(|(i, s)| {
            let mut o = s.outcome();
            // A stream error after the shut-down is ours: the reason is the runtime's silence.
            if late.contains(&i) && !matches!(o.error, Some(SessionError::GaveUp { .. })) {
                o.error = Some(SessionError::NoAnswer { pid: s.pid, seconds: stop_deadline().as_secs_f64() });
            }
            (s.pid, o)
        })
        .collect()
}

/// The process is stopped (state `T` or `t` in /proc/PID/stat): its runtime answers nothing
/// until it is continued.
pub(crate) fn process_stopped(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next());
    matches!(state, Some("T" | "t"))
}

impl Drop for RuntimeSession {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let pid = self.pid;
            let me = std::mem::replace(
                self,
                RuntimeSession { pid, stop: self.stop.clone(), thread: None, live: Arc::clone(&self.live) },
            );
            let _ = finish_all(vec![me], Instant::now() + STOP_DEADLINE);
        }
    }
}

fn read_all(pid: u32, stream: impl Read, live: Arc<Mutex<ClrCollector>>, kinds: Kinds, requested_mono_ns: i64) -> SessionOutcome {
    let stream = super::save_raw::tee(pid, stream);
    let mut reader = match NetTraceReader::new(stream) {
        Ok(r) => r,
        Err(source) => {
            return SessionOutcome {
                collector: take(&live, pid, kinds),
                stats: ReaderStats::default(),
                status: StreamStatus::Truncated,
                error: Some(SessionError::Stream { pid, source }),
            };
        }
    };
    let pointer_size = reader.trace_info().pointer_size;
    // EventPipe timestamps on Linux are CLOCK_MONOTONIC ns (QPC frequency 1e9): the session's
    // sync time then sits just after the moment the session was requested.
    let info = reader.trace_info();
    let origin = i128_ns(info.sync_time_qpc, info.qpc_frequency);
    live.lock().unwrap_or_else(|e| e.into_inner()).profiles.clock = Some((origin, origin - requested_mono_ns));
    let mut error = None;
    loop {
        match reader.next_event() {
            Ok(Some(ev)) => {
                live.lock().unwrap_or_else(|e| e.into_inner()).on_event(&ev, pointer_size);
            }
            Ok(None) => break,
            Err(source) => {
                error = Some(SessionError::Stream { pid, source });
                break;
            }
        }
    }
    SessionOutcome { collector: take(&live, pid, kinds), stats: reader.stats(), status: reader.status(), error }
}

fn take(live: &Mutex<ClrCollector>, pid: u32, kinds: Kinds) -> ClrCollector {
    std::mem::replace(&mut *live.lock().unwrap_or_else(|e| e.into_inner()), ClrCollector::new(pid, kinds))
}

/// QPC ticks as nanoseconds.
fn i128_ns(ticks: i64, freq: i64) -> i64 {
    (i128::from(ticks) * 1_000_000_000 / i128::from(freq.max(1))).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}
