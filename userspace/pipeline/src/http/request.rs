//! One HTTP client request as built from its events.
use serde::{Deserialize, Serialize};

/// What a connection set-up span did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SetupKind {
    Dns,
    Connect,
    Tls,
}

/// A DNS lookup, socket connect or TLS handshake (Start … Stop of its source).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetupSpan {
    pub kind: SetupKind,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Host name looked up, address connected to, or TLS target host.
    pub target: String,
    /// The Failed event's message (or "failed").
    pub error: Option<String>,
    /// How it was tied to its request: "activity" (its activity descends from the request's),
    /// "connection" (through the connection it set up) or "time" (the open request of the same
    /// host waiting for a connection when it ran).
    pub linked_by: String,
}

/// Time spent per phase, nanoseconds. The phases tile the request from RequestStart to the end
/// of the response content; `queue` is the part of the wait for a connection not spent in the
/// DNS, connect and TLS spans of that wait.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phases {
    /// RequestStart → RequestHeadersStart, less `dns + connect + tls`: waiting in the pool.
    pub queue_ns: u64,
    pub dns_ns: u64,
    pub connect_ns: u64,
    pub tls_ns: u64,
    /// RequestHeadersStart → the end of sending (RequestHeadersStop, or RequestContentStop).
    pub send_ns: u64,
    /// Request sent → ResponseHeadersStop: the server's time plus the response headers.
    pub wait_ns: u64,
    /// ResponseHeadersStop → ResponseContentStop (or RequestStop): the response body, including
    /// any time the app took before reading it.
    pub content_ns: u64,
}

impl Phases {
    pub fn total_ns(&self) -> u64 {
        self.queue_ns
            + self.dns_ns
            + self.connect_ns
            + self.tls_ns
            + self.send_ns
            + self.wait_ns
            + self.content_ns
    }

    /// (name, ns) in order.
    pub fn named(&self) -> [(&'static str, u64); 7] {
        [
            ("queue", self.queue_ns),
            ("dns", self.dns_ns),
            ("connect", self.connect_ns),
            ("tls", self.tls_ns),
            ("send", self.send_ns),
            ("wait", self.wait_ns),
            ("content", self.content_ns),
        ]
    }
}

/// One outgoing HTTP request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HttpRequest {
    pub scheme: String,
    pub host: String,
    pub port: u16,
    /// The path without the query (queries may carry secrets and defeat grouping).
    pub path: String,
    pub has_query: bool,
    /// HTTP version used: the connection's when known, else the one asked for ("1.1", "2.0").
    pub version: String,
    /// Status code (RequestStop on .NET 8, else ResponseHeadersStop); None when no response.
    pub status: Option<i32>,
    /// RequestFailed's message; Some("failed") when the request failed without one.
    pub error: Option<String>,
    /// RequestStart time on the source's clock.
    pub start_ns: u64,
    /// RequestStop time (or RequestFailed, or the last event seen when `complete` is false).
    pub end_ns: u64,
    pub duration_ns: u64,
    pub phases: Phases,
    /// `duration_ns - phases.total_ns()` (negative when phases overlap the end).
    pub unaccounted_ns: i64,
    /// Saw RequestStop (false: the recording ended first).
    pub complete: bool,
    pub connection_id: Option<i64>,
    /// The request waited for a connection opened for it (DNS/connect/TLS spans linked).
    pub setups: Vec<SetupSpan>,
    /// Time the pool reported the request queued (RequestLeftQueue), nanoseconds.
    pub queued_ns: Option<u64>,
    pub redirects: u32,
    /// Thread of RequestStart.
    pub start_tid: u64,
    /// Every thread that logged one of the request's events, RequestStart's first.
    pub threads: Vec<u64>,
    /// RequestStart's stack: instruction pointers, leaf first.
    pub stack: Vec<u64>,
    /// The request's activity id (GUID text), for finding its events in a trace dump.
    pub activity_id: String,
}

impl HttpRequest {
    /// A failure or an HTTP status of 400 and up (OpenTelemetry's client error rule).
    pub fn is_error(&self) -> bool {
        self.error.is_some()
            || self.status.is_some_and(|s| s >= 400)
            || self.status.is_none() && self.complete
    }

    pub fn duration_ms(&self) -> f64 {
        self.duration_ns as f64 / 1e6
    }
}
