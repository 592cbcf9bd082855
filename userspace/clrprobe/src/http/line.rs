//! The per-request JSON record of `PREFIX.http.jsonl`, and the per-process HTTP report.
use serde::{Deserialize, Serialize};

use clrprobe_pipeline::http::{
    EventSourceStats, HostPathStats, HttpRequest, OtelHistogram, SetupSpan,
};

/// Phases in milliseconds (see [`clrprobe_pipeline::http::Phases`]); they add up to
/// `duration_ms - unaccounted_ms`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhasesMs {
    pub queue: f64,
    pub dns: f64,
    pub connect: f64,
    pub tls: f64,
    pub send: f64,
    pub wait: f64,
    pub content: f64,
}

impl PhasesMs {
    pub fn total(&self) -> f64 {
        self.queue + self.dns + self.connect + self.tls + self.send + self.wait + self.content
    }
}

/// What a slow request's threads did while it ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meanwhile {
    /// CPU samples of the request's threads inside its window.
    pub cpu_samples: u64,
    /// Sampling period, ms (`cpu_samples × period` is the CPU time seen).
    pub cpu_period_ms: f64,
    /// (stack leaf first, samples), most first.
    pub cpu_top: Vec<(String, u64)>,
    /// Off-CPU time of the request's threads inside its window, ms (None: not recorded).
    pub offcpu_ms: Option<f64>,
    /// (stack leaf first, ms), most first.
    pub offcpu_top: Vec<(String, f64)>,
    /// Why something is missing (no sample times, no off-CPU times...).
    pub notes: Vec<String>,
}

/// One request: one line of `PREFIX.http.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HttpLine {
    pub pid: u32,
    pub scheme: String,
    pub host: String,
    pub port: u16,
    pub path: String,
    #[serde(default)]
    pub has_query: bool,
    pub version: String,
    pub status: Option<i32>,
    pub error: Option<String>,
    /// RequestStart, Unix epoch nanoseconds.
    pub start_ns: u64,
    /// RequestStart, ms since the recording started.
    pub offset_ms: f64,
    pub duration_ms: f64,
    pub phases: PhasesMs,
    pub unaccounted_ms: f64,
    /// RequestStop was seen (false: still running when the recording ended).
    pub complete: bool,
    pub connection_id: Option<i64>,
    /// DNS lookups, connects and TLS handshakes the request waited for (times: ms since its start).
    pub setups: Vec<SetupLine>,
    pub queued_ms: Option<f64>,
    pub redirects: u32,
    pub start_thread: u64,
    pub threads: Vec<u64>,
    /// RequestStart's stack, leaf first.
    pub stack: Vec<String>,
    pub activity_id: String,
    /// For the slowest requests: what their threads did meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meanwhile: Option<Meanwhile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetupLine {
    pub kind: String,
    pub start_ms: f64,
    pub duration_ms: f64,
    pub target: String,
    pub error: Option<String>,
    pub linked_by: String,
}

impl SetupLine {
    fn from_span(s: &SetupSpan, request_start_ns: u64) -> Self {
        Self {
            kind: format!("{:?}", s.kind).to_ascii_lowercase(),
            start_ms: (s.start_ns as i64 - request_start_ns as i64) as f64 / 1e6,
            duration_ms: s.end_ns.saturating_sub(s.start_ns) as f64 / 1e6,
            target: s.target.clone(),
            error: s.error.clone(),
            linked_by: s.linked_by.clone(),
        }
    }
}

const MS: f64 = 1e6;

impl HttpLine {
    /// `unix_of` maps a source time to Unix ns, `offset_of` to ms since the recording start;
    /// `stack` is RequestStart's stack named.
    pub fn new(
        pid: u32,
        r: &HttpRequest,
        start_unix_ns: u64,
        offset_ms: f64,
        stack: Vec<String>,
    ) -> Self {
        let p = &r.phases;
        Self {
            pid,
            scheme: r.scheme.clone(),
            host: r.host.clone(),
            port: r.port,
            path: r.path.clone(),
            has_query: r.has_query,
            version: r.version.clone(),
            status: r.status,
            error: r.error.clone(),
            start_ns: start_unix_ns,
            offset_ms,
            duration_ms: r.duration_ns as f64 / MS,
            phases: PhasesMs {
                queue: p.queue_ns as f64 / MS,
                dns: p.dns_ns as f64 / MS,
                connect: p.connect_ns as f64 / MS,
                tls: p.tls_ns as f64 / MS,
                send: p.send_ns as f64 / MS,
                wait: p.wait_ns as f64 / MS,
                content: p.content_ns as f64 / MS,
            },
            unaccounted_ms: r.unaccounted_ns as f64 / MS,
            complete: r.complete,
            connection_id: r.connection_id,
            setups: r
                .setups
                .iter()
                .map(|s| SetupLine::from_span(s, r.start_ns))
                .collect(),
            queued_ms: r.queued_ns.map(|n| n as f64 / MS),
            redirects: r.redirects,
            start_thread: r.start_tid,
            threads: r.threads.clone(),
            stack,
            activity_id: r.activity_id.clone(),
            meanwhile: None,
        }
    }

    /// The request again, as far as the summaries need it (for `report` from the file).
    pub fn to_request(&self) -> HttpRequest {
        let ns = |ms: f64| (ms * MS).max(0.0) as u64;
        HttpRequest {
            scheme: self.scheme.clone(),
            host: self.host.clone(),
            port: self.port,
            path: self.path.clone(),
            has_query: self.has_query,
            version: self.version.clone(),
            status: self.status,
            error: self.error.clone(),
            start_ns: self.start_ns,
            end_ns: self.start_ns + ns(self.duration_ms),
            duration_ns: ns(self.duration_ms),
            phases: Default::default(),
            unaccounted_ns: 0,
            complete: self.complete,
            connection_id: self.connection_id,
            setups: Vec::new(),
            queued_ns: None,
            redirects: self.redirects,
            start_tid: self.start_thread,
            threads: self.threads.clone(),
            stack: Vec::new(),
            activity_id: self.activity_id.clone(),
        }
    }
}

/// The HTTP part of a recording, per process.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HttpReport {
    pub pid: u32,
    /// Events of the networking sources seen.
    pub events: u64,
    /// Stop events without their Start (the recording began mid-request).
    pub unmatched: u64,
    /// Starts without an activity id (activity tracking was off: requests cannot be tied together).
    pub without_activity: u64,
    /// Requests past the limit kept per process (counted, not listed).
    pub dropped: u64,
    /// `--http` was on for this process.
    pub http_on: bool,
    pub decode_errors: u64,
    /// In `PREFIX.http.jsonl`; not repeated in the JSON summary.
    #[serde(skip)]
    pub requests: Vec<HttpLine>,
    pub request_count: usize,
    pub by_host_path: Vec<HostPathStats>,
    /// OpenTelemetry `http.client.request.duration` points (seconds).
    pub otel_duration: Vec<OtelHistogram>,
    /// Events of the providers named with `--providers`.
    pub generic: Option<EventSourceStats>,
}
