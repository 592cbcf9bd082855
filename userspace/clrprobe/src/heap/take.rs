//! Taking one snapshot: an EventPipe session whose keywords make the runtime run a blocking
//! gen-2 GC and stream its heap walk (GCHeapCollect + GCHeapDump + Type + names), read on its
//! own thread into a [`HeapBuilder`] until the induced GC's GCEnd; then the session is stopped
//! and the rest of the stream read to its end. Every wait has a deadline.
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use clr_events::{ClrEvent, decode, gc_enums::GcType, heap::decode_heap, ids};
use clrprobe_eventpipe::{
    ipc::{Client, IpcError, Level, ProviderConfig, RUNTIME_PROVIDER, SessionConfig},
    nettrace::{NetTraceError, NetTraceReader, ReaderStats},
};
use clrprobe_pipeline::heap::{HeapBuilder, HeapError, HeapGraph, WalkInfo};

/// Why a snapshot was not taken. Nothing is written in any of these cases.
#[derive(Debug, thiserror::Error)]
pub enum TakeError {
    #[cfg(target_os = "linux")]
    #[error(transparent)]
    SetUp(#[from] crate::lifecycle::setup::SetupError),
    #[error("EventPipe session on pid {pid}: {source}")]
    Ipc {
        pid: u32,
        #[source]
        source: IpcError,
    },
    #[error("reading the EventPipe stream of pid {pid}: {source}")]
    Stream {
        pid: u32,
        #[source]
        source: NetTraceError,
    },
    #[error("interrupted while the runtime walked its heap ({objects} objects so far); nothing was written")]
    Interrupted { objects: u64 },
    #[error("pid {pid}: {what} within {secs} s ({objects} objects so far); nothing was written (a larger heap needs a longer --timeout)")]
    TimedOut { pid: u32, what: &'static str, secs: u64, objects: u64 },
    #[error("pid {pid}: the stream ended before the heap walk finished (did the process exit?); nothing was written")]
    Ended { pid: u32 },
    #[error(
        "pid {pid}: the runtime dropped {dropped} events of the heap walk (the session buffer filled); nothing was written (retry with a larger --buffer-mb)"
    )]
    Dropped { pid: u32, dropped: u64 },
    #[error("pid {pid}: undecodable heap event: {source}")]
    Decode {
        pid: u32,
        #[source]
        source: clr_events::DecodeError,
    },
    #[error("pid {pid}: {source}")]
    Graph {
        pid: u32,
        #[source]
        source: HeapError,
    },
}

/// How to take a snapshot.
#[derive(Debug, Clone)]
pub struct TakeOptions {
    pub pid: u32,
    /// Bound on the whole walk (session start to the end of the stream).
    pub timeout: Duration,
    pub buffer_mb: u32,
}

/// Live counters of a walk, for the progress line.
#[derive(Debug, Default)]
pub struct Progress {
    pub objects: AtomicU64,
    pub references: AtomicU64,
    /// Set when the induced GC has started (the walk is on).
    pub gc_started: AtomicBool,
    /// Set at the induced GC's end: the walk is complete.
    pub walk_done: AtomicBool,
}

/// A taken snapshot: the graph and how it was taken.
pub struct Taken {
    pub graph: HeapGraph,
    pub walk: WalkInfo,
    /// Peak bytes of the collector's arrays while receiving.
    pub builder_bytes: usize,
}

/// The session's one provider: the runtime at Verbose with the heap snapshot keywords.
pub fn session_config(buffer_mb: u32) -> SessionConfig {
    SessionConfig {
        circular_buffer_mb: buffer_mb,
        request_rundown: false,
        // Not asking for stacks needs CollectTracing3 (.NET 9+); a stack per bulk event (a few
        // hundred per million objects) costs little.
        request_stackwalk: true,
        providers: vec![ProviderConfig::new(RUNTIME_PROVIDER, clr_events::heap::HEAP_SNAPSHOT_KEYWORDS, Level::Verbose)],
    }
}

/// The runtime names each type once (BulkType) and then remembers it was named; it forgets
/// only when a change of its sessions leaves the Type keyword off. The session of a previous
/// snapshot ending does not do it (seen on .NET 8.0.4 and 3.1.23: a second snapshot had no type
/// names), so a short session without that keyword is opened and closed first. Dropping the
/// session stops it and drains it for a bounded time.
fn forget_logged_types(client: &Client) -> Result<(), IpcError> {
    let config = SessionConfig {
        circular_buffer_mb: 1,
        request_rundown: false,
        request_stackwalk: true,
        providers: vec![ProviderConfig::new(RUNTIME_PROVIDER, clr_events::keywords::runtime::GC, Level::Informational)],
    };
    let session = client.start_session(&config)?;
    session.stop_handle().stop()?;
    drop(session);
    Ok(())
}

struct ReaderOut {
    builder: Result<HeapBuilder, TakeError>,
    stats: ReaderStats,
    gc_index: u32,
    pause_ns: i64,
}

/// Takes one snapshot of `opts.pid`, calling `on_progress` about every 100 ms while the
/// runtime walks. `stop` (Ctrl-C) abandons the walk.
pub fn take(opts: &TakeOptions, stop: &AtomicBool, mut on_progress: impl FnMut(&Progress, Duration)) -> Result<Taken, TakeError> {
    let pid = opts.pid;
    let started = Instant::now();
    // Not while another clrprobe sets the target up (no wait for the runtime's start-up: this
    // sends no EnablePerfMap, and a session may be started in a runtime suspended at start-up).
    #[cfg(target_os = "linux")]
    let setting_up = crate::lifecycle::setup::lock(pid, Instant::now() + crate::lifecycle::setup::SETUP_WAIT)?;
    let client = Client::for_pid(pid).map_err(|source| TakeError::Ipc { pid, source })?;
    forget_logged_types(&client).map_err(|source| TakeError::Ipc { pid, source })?;
    let session = client.start_session(&session_config(opts.buffer_mb)).map_err(|source| TakeError::Ipc { pid, source })?;
    #[cfg(target_os = "linux")]
    drop(setting_up);
    let stopper = session.stop_handle();
    let progress = Arc::new(Progress::default());
    let shared = Arc::clone(&progress);
    let reader: JoinHandle<ReaderOut> = std::thread::Builder::new()
        .name(format!("heap-{pid}"))
        .spawn(move || read(pid, session, &shared))
        .map_err(|e| TakeError::Ipc { pid, source: IpcError::Io(e) })?;
    let deadline = started + opts.timeout;
    let objects = || progress.objects.load(Ordering::Relaxed);
    // Wait for the walk (the induced GC's end), Ctrl-C, the deadline or the end of the stream.
    let outcome: Result<(), TakeError> = loop {
        std::thread::sleep(Duration::from_millis(100));
        on_progress(&progress, started.elapsed());
        if progress.walk_done.load(Ordering::SeqCst) {
            break Ok(());
        }
        if stop.load(Ordering::SeqCst) {
            break Err(TakeError::Interrupted { objects: objects() });
        }
        if reader.is_finished() {
            break Err(TakeError::Ended { pid });
        }
        if Instant::now() >= deadline {
            let what = if progress.gc_started.load(Ordering::SeqCst) {
                "the heap walk did not finish"
            } else {
                "the runtime did not start the heap walk's GC"
            };
            break Err(TakeError::TimedOut { pid, what, secs: opts.timeout.as_secs(), objects: objects() });
        }
    };
    // Stop the session; the runtime flushes what is buffered and closes the stream.
    let _ = stopper.stop();
    // A complete walk: read the rest (up to the deadline, at least 30 s more); an abandoned one:
    // give the runtime a moment to close the stream, no more.
    let drain = if outcome.is_ok() {
        Duration::from_secs(30).max(deadline.saturating_duration_since(Instant::now()))
    } else {
        Duration::from_secs(2)
    };
    let drain_deadline = Instant::now() + drain;
    while !reader.is_finished() && Instant::now() < drain_deadline {
        std::thread::sleep(Duration::from_millis(50));
        on_progress(&progress, started.elapsed());
    }
    outcome?;
    if !reader.is_finished() {
        // The reader thread is left blocked on the socket; the process exits soon after.
        return Err(TakeError::TimedOut { pid, what: "the stream did not end after the session stopped", secs: 30, objects: objects() });
    }
    let out = reader.join().map_err(|_| TakeError::Ended { pid })?;
    let builder = out.builder?;
    if out.stats.dropped_events > 0 {
        return Err(TakeError::Dropped { pid, dropped: out.stats.dropped_events });
    }
    let events = out.stats.events;
    let builder_bytes = builder.memory_bytes();
    let graph = builder.finish().map_err(|source| TakeError::Graph { pid, source })?;
    let walk = WalkInfo {
        pid,
        taken_at_ms: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
        gc_index: out.gc_index,
        pause_ms: out.pause_ns as f64 / 1e6,
        walk_ms: started.elapsed().as_secs_f64() * 1e3,
        events,
        unresolved_references: graph.unresolved_references,
        runtime: String::new(),
    };
    Ok(Taken { graph, walk, builder_bytes })
}

/// The reader thread: every event until the stream ends.
fn read(pid: u32, stream: impl std::io::Read, progress: &Progress) -> ReaderOut {
    let mut out = ReaderOut { builder: Ok(HeapBuilder::new()), stats: ReaderStats::default(), gc_index: 0, pause_ns: 0 };
    let mut reader = match NetTraceReader::new(stream) {
        Ok(r) => r,
        Err(source) => {
            out.builder = Err(TakeError::Stream { pid, source });
            return out;
        }
    };
    let pointer_size = reader.trace_info().pointer_size as u8;
    let mut builder = HeapBuilder::new();
    let mut error = None;
    // The induced GC: the first blocking gen-2 GC; its pause runs from the SuspendEE before its
    // GCStart to the RestartEE end after its GCEnd.
    let mut ours: Option<u32> = None;
    let mut ended = false;
    let mut suspend_begin: i64 = 0;
    let mut our_suspend: i64 = 0;
    loop {
        let ev = match reader.next_event() {
            Ok(Some(ev)) => ev,
            Ok(None) => break,
            Err(source) => {
                error = Some(TakeError::Stream { pid, source });
                break;
            }
        };
        let mut raw = ev.raw_event();
        raw.pointer_size = pointer_size;
        match decode_heap(&raw) {
            Ok(Some(h)) => {
                // The walk runs inside the induced GC, before its GCEnd. Any change of the
                // target's sessions while ours is on (another tool attaching, an earlier
                // session ending) makes the runtime force another GC and walk again: those
                // events come after our GCEnd and are not ours.
                if ours.is_some() && !ended {
                    if let Err(e) = builder.on_event(&h) {
                        error = Some(TakeError::Graph { pid, source: e });
                        break;
                    }
                    progress.objects.store(builder.objects(), Ordering::Relaxed);
                    progress.references.store(builder.references(), Ordering::Relaxed);
                } else if let clr_events::heap::HeapEvent::BulkType(_) = h {
                    // Types may be described before the walk's first node; keep them.
                    let _ = builder.on_event(&h);
                }
                continue;
            }
            Ok(None) => {}
            Err(source) => {
                error = Some(TakeError::Decode { pid, source });
                break;
            }
        }
        if !matches!(
            raw.event_id,
            ids::runtime::GC_START | ids::runtime::GC_END | ids::runtime::GC_SUSPEND_EE_BEGIN | ids::runtime::GC_RESTART_EE_END
        ) {
            continue;
        }
        let Ok(decoded) = decode(&raw) else { continue };
        let t = ev.time_ns();
        match decoded {
            ClrEvent::GcSuspendEeBegin(_) => suspend_begin = t,
            ClrEvent::GcStart(s) if ours.is_none() && s.depth == Some(2) && s.gc_type != Some(GcType::Background) => {
                ours = Some(s.count);
                our_suspend = suspend_begin;
                out.gc_index = s.count;
                progress.gc_started.store(true, Ordering::SeqCst);
            }
            ClrEvent::GcEnd(e) if Some(e.count) == ours && !ended => {
                if builder.objects() == 0 {
                    // A gen-2 GC without a walk (the app's own): wait for ours.
                    ours = None;
                    progress.gc_started.store(false, Ordering::SeqCst);
                } else {
                    ended = true;
                    progress.walk_done.store(true, Ordering::SeqCst);
                }
            }
            ClrEvent::GcRestartEeEnd { .. } if ended && out.pause_ns == 0 && our_suspend > 0 => out.pause_ns = t - our_suspend,
            _ => {}
        }
    }
    out.stats = reader.stats();
    out.builder = match error {
        Some(e) => Err(e),
        None => Ok(builder),
    };
    out
}
