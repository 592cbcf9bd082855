//! The agent's HTTP sink (axum on a one-thread tokio runtime): `/metrics` in Prometheus text,
//! and Go-compatible `/debug/pprof/*` endpoints serving gzipped pprof as Go's net/http/pprof
//! does (`profile?seconds=N` waits N seconds and returns the CPU samples of those seconds;
//! `allocs`, `mutex`, `block`, `exceptions` are cumulative since each process was found);
//! `&pid=P` keeps one process.
use std::{
    fmt::Write,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use axum::{
    Router,
    extract::{Path, Query as UrlQuery, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use clrprobe_pipeline::stream::ProfileKind;
use crossbeam_channel::Sender;
use serde::Deserialize;
use tokio::sync::oneshot;

use crate::pipeline::{aggregate::Query, sources::monotonic_ns};

#[derive(Clone)]
struct App {
    queries: Sender<Query>,
    /// Longest `profile?seconds=` served (`--window`).
    max_seconds: f64,
    /// How long after a sample it reaches the aggregator (the host source drains each second).
    drain_lag: Duration,
}

#[derive(Debug, Deserialize)]
struct Params {
    seconds: Option<f64>,
    pid: Option<u32>,
}

/// How long past its answer's due time a CPU request's hold on the samples lasts when no
/// answer is asked for (its client went away).
const HOLD_SLACK: Duration = Duration::from_secs(5);

/// Serves until `stop` is set.
pub async fn serve(listener: tokio::net::TcpListener, queries: Sender<Query>, max_seconds: f64, stop: &'static AtomicBool) -> std::io::Result<()> {
    let app = App { queries, max_seconds, drain_lag: Duration::from_millis(1200) };
    let router = Router::new()
        .route("/", get(index))
        .route("/debug/pprof/", get(index))
        .route("/metrics", get(metrics))
        .route("/debug/pprof/{name}", get(pprof))
        .with_state(app);
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
}

async fn index() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "clrprobe agent\n/metrics\n/debug/pprof/profile?seconds=N[&pid=P]\n/debug/pprof/allocs\n/debug/pprof/mutex\n/debug/pprof/block\n/debug/pprof/exceptions\n",
    )
}

fn unavailable() -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, "the aggregator has stopped\n").into_response()
}

async fn metrics(State(app): State<App>) -> Response {
    let (tx, rx) = oneshot::channel();
    if app.queries.send(Query::Metrics(tx)).is_err() {
        return unavailable();
    }
    let Ok(mut text) = rx.await else { return unavailable() };
    own_health(&mut text);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

async fn pprof(State(app): State<App>, Path(name): Path<String>, UrlQuery(p): UrlQuery<Params>) -> Response {
    let Some(kind) = ProfileKind::parse(&name) else {
        return (StatusCode::NOT_FOUND, format!("Unknown profile: {name}\n")).into_response();
    };
    let mut since_ns = 0;
    if kind == ProfileKind::Cpu {
        let seconds = p.seconds.unwrap_or(30.0);
        if !(seconds > 0.0 && seconds <= app.max_seconds) {
            return (StatusCode::BAD_REQUEST, format!("seconds must be in (0, {}]\n", app.max_seconds)).into_response();
        }
        since_ns = monotonic_ns() as u64;
        // Held until answered; a client gone mid-wait lets go a few seconds after it would
        // have been.
        let until_ns = since_ns.saturating_add((Duration::from_secs_f64(seconds) + app.drain_lag + HOLD_SLACK).as_nanos() as u64);
        if app.queries.send(Query::HoldCpu { from_ns: since_ns, until_ns }).is_err() {
            return unavailable();
        }
        tokio::time::sleep(Duration::from_secs_f64(seconds) + app.drain_lag).await;
    }
    let (tx, rx) = oneshot::channel();
    if app.queries.send(Query::Profile { kind, pid: p.pid, since_ns, reply: tx }).is_err() {
        return unavailable();
    }
    match rx.await {
        Ok(Ok(bytes)) => (
            [(header::CONTENT_TYPE, "application/octet-stream"), (header::CONTENT_DISPOSITION, "attachment; filename=\"profile\"")],
            bytes,
        )
            .into_response(),
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, format!("building the profile: {e}\n")).into_response(),
        Err(_) => unavailable(),
    }
}

/// The agent's own RSS and CPU time.
fn own_health(out: &mut String) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // SAFETY: getrusage writes one rusage through a valid pointer.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let cpu = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let _ = writeln!(out, "# HELP clrprobe_agent_resident_memory_bytes Resident memory of the agent.");
    let _ = writeln!(out, "# TYPE clrprobe_agent_resident_memory_bytes gauge");
    let _ = writeln!(out, "clrprobe_agent_resident_memory_bytes {}", rss_kb * 1024);
    let _ = writeln!(out, "# HELP clrprobe_agent_cpu_seconds_total CPU time of the agent (user and system).");
    let _ = writeln!(out, "# TYPE clrprobe_agent_cpu_seconds_total counter");
    let _ = writeln!(out, "clrprobe_agent_cpu_seconds_total {}", cpu(ru.ru_utime) + cpu(ru.ru_stime));
}
