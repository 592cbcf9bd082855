//! `clrprobe agent`: always-on profiling. The host source and one EventPipe reader per .NET
//! process feed the aggregator thread; an HTTP server (axum on tokio) answers Prometheus
//! (`/metrics`) and pprof scrapers (`/debug/pprof/*`) from it. Runs until SIGINT/SIGTERM;
//! then every session is stopped and every perf map clrprobe switched on is switched off.
use std::{
    net::SocketAddr,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use clrprobe_pipeline::stream::AggregatorConfig;

use crate::pipeline::{
    aggregate,
    sinks::http,
    sources::{self, HostConfig, SourceError, monotonic_ns},
};

#[derive(Debug, Clone)]
pub struct AgentArgs {
    pub listen: SocketAddr,
    pub host: HostConfig,
    /// The longest `profile?seconds=` (CPU samples are kept from a request's start until it
    /// is answered).
    pub window_s: u64,
    /// Seconds an exited process's series stay.
    pub exited_grace_s: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot listen on {addr}: {source} (is another agent running there? choose another with --listen)")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("starting a thread or the HTTP runtime: {0}")]
    Runtime(std::io::Error),
    #[error("HTTP server: {0}")]
    Serve(std::io::Error),
}

/// Runs the agent until `stop` is set.
pub fn run(args: &AgentArgs, stop: &'static AtomicBool, on_ready: impl FnOnce(SocketAddr, Option<&str>)) -> Result<(), AgentError> {
    // Records are allocated on the reader threads and freed on the aggregator's: with an arena
    // per thread glibc keeps each reader's freed memory apart (RSS grew with the processes
    // followed). Two arenas hold it all.
    // SAFETY: mallopt only sets the allocator's parameters.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
    let listener = std::net::TcpListener::bind(args.listen).map_err(|source| AgentError::Listen { addr: args.listen, source })?;
    listener.set_nonblocking(true).map_err(|source| AgentError::Listen { addr: args.listen, source })?;
    let local = listener.local_addr().map_err(|source| AgentError::Listen { addr: args.listen, source })?;
    // Bounded: a stalled aggregator slows the sources (the runtimes then drop events, counted)
    // instead of growing memory.
    // 16 Ki records of ~90 bytes: the slots are touched cyclically, so all of them end up resident.
    let (rec_tx, rec_rx) = crossbeam_channel::bounded(16_384);
    let (q_tx, q_rx) = crossbeam_channel::unbounded();
    let cfg = AggregatorConfig {
        freq_hz: args.host.freq,
        buckets: args.window_s.max(1) as usize,
        exited_grace_ns: args.exited_grace_s * 1_000_000_000,
        kinds: args.host.kinds,
        unix_offset_ns: unix_offset_ns(),
        // Exact allocated bytes from the runtime's counter (allocation events may be sliced).
        alloc_bytes_from_counters: args.host.counters_interval_s.is_some(),
        // `profile?seconds=N` reads from its start on: no rolling window of every sample.
        cpu_on_request: true,
        ..AggregatorConfig::default()
    };
    let aggregator = aggregate::spawn(cfg, rec_rx, q_rx).map_err(AgentError::Runtime)?;
    let (host, fallback, _) = sources::spawn(args.host.clone(), rec_tx, stop)?;
    on_ready(local, fallback.as_deref());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(AgentError::Runtime)?;
    let served = rt.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        http::serve(listener, q_tx, args.window_s as f64, stop).await
    });
    stop.store(true, Ordering::SeqCst);
    let stopping = std::time::Instant::now();
    let _ = host.join();
    log::info!("stop: sources done after {:?}", stopping.elapsed());
    // Nobody reads the aggregator once the server has stopped: what it has queued is not
    // worth the wait (with 20 busy processes it absorbed for a second after the sources).
    let until = std::time::Instant::now() + AGGREGATOR_GRACE;
    while !aggregator.is_finished() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    if aggregator.is_finished() {
        let _ = aggregator.join();
        log::info!("stop: aggregator done after {:?}", stopping.elapsed());
    } else {
        log::info!("stop: aggregator left with its queue after {:?}", stopping.elapsed());
    }
    rt.shutdown_timeout(Duration::from_secs(1));
    served.map_err(AgentError::Serve)
}

/// How long the agent waits at its stop for the aggregator to finish its queue.
const AGGREGATOR_GRACE: Duration = Duration::from_millis(200);

/// Unix time minus host monotonic time, ns.
fn unix_offset_ns() -> i64 {
    let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0);
    unix - monotonic_ns()
}
