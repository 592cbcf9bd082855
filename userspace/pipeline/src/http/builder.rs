//! Builds [`HttpRequest`]s from System.Net events tied together by activity ids.
use std::collections::HashMap;

use clr_events::guid::Guid;

use super::event::{NetEvent, providers};
use super::request::{HttpRequest, Phases, SetupKind, SetupSpan};

type Aid = [u8; 16];
const ZERO: Aid = [0; 16];
/// Deepest activity nesting followed from an event to its request.
const MAX_DEPTH: usize = 64;
/// Requests kept (about 1 KB each with their stack); later ones are counted in `dropped`.
pub const MAX_REQUESTS: usize = 100_000;
/// Activity parent links kept (48 bytes each).
const MAX_ACTIVITIES: usize = 2_000_000;

#[derive(Debug, Default, Clone)]
struct Marks {
    req_headers_start: Option<u64>,
    req_headers_stop: Option<u64>,
    req_content_stop: Option<u64>,
    resp_headers_stop: Option<u64>,
    resp_content_stop: Option<u64>,
}

#[derive(Debug, Clone)]
struct Open {
    req: HttpRequest,
    marks: Marks,
    stopped: bool,
    last_ns: u64,
}

#[derive(Debug, Clone)]
struct Setup {
    span: SetupSpan,
    /// Activity current when it started (its Start event's related activity id).
    parent: Aid,
    open: bool,
}

/// Turns networking events into requests. Feed every event of the four System.Net sources in
/// time order; [`HttpBuilder::finish`] returns the requests in start order.
#[derive(Debug, Default)]
pub struct HttpBuilder {
    /// Child activity → the activity current when it started.
    parents: HashMap<Aid, Aid>,
    /// Request activity → index in `requests`.
    by_activity: HashMap<Aid, usize>,
    requests: Vec<Open>,
    /// Set-up span activity → index in `setups`.
    open_setups: HashMap<Aid, usize>,
    setups: Vec<Setup>,
    /// ConnectionEstablished: (activity, connection id).
    connections: Vec<(Aid, i64)>,
    /// Connection id → its HTTP version.
    versions: HashMap<i64, String>,
    /// Events of the networking sources seen.
    pub events: u64,
    /// Requests and spans whose events carried no activity id (activity tracking off).
    pub without_activity: u64,
    /// Stop/Failed events whose Start was not seen (the session began mid-request).
    pub unmatched: u64,
    /// Requests not kept: more than [`MAX_REQUESTS`].
    pub dropped: u64,
}

impl HttpBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Requests seen so far (open ones included).
    pub fn request_count(&self) -> usize {
        self.requests.len()
    }

    pub fn on_event(&mut self, ev: &NetEvent<'_>) {
        if !providers::NET.contains(&ev.provider) {
            return;
        }
        self.events += 1;
        let name = ev.event_name();
        if ev.is_start()
            && ev.activity_id != ZERO
            && ev.related_activity_id != ZERO
            && self.parents.len() < MAX_ACTIVITIES
        {
            self.parents.insert(ev.activity_id, ev.related_activity_id);
        }
        match ev.provider {
            providers::HTTP => self.http(ev, name),
            providers::NAME_RESOLUTION => self.setup(ev, name, SetupKind::Dns, "hostNameOrAddress"),
            providers::SOCKETS if name.starts_with("Connect") => {
                self.setup(ev, name, SetupKind::Connect, "address")
            }
            providers::SECURITY => {
                // The server side of a handshake (isServer) is not a client request's.
                if ev
                    .field("isServer")
                    .is_some_and(|v| matches!(v, clr_events::Value::Bool(true)))
                {
                    return;
                }
                self.setup(ev, name, SetupKind::Tls, "targetHost")
            }
            _ => {}
        }
        if let Some(i) = self.request_of(ev.activity_id) {
            let r = &mut self.requests[i];
            if !r.req.threads.contains(&ev.tid) {
                r.req.threads.push(ev.tid);
            }
            r.last_ns = r.last_ns.max(ev.time_ns);
        }
    }

    /// The request whose activity `aid` is or descends from.
    fn request_of(&self, mut aid: Aid) -> Option<usize> {
        for _ in 0..MAX_DEPTH {
            if aid == ZERO {
                return None;
            }
            if let Some(&i) = self.by_activity.get(&aid) {
                return Some(i);
            }
            aid = *self.parents.get(&aid)?;
        }
        None
    }

    fn http(&mut self, ev: &NetEvent<'_>, name: &str) {
        if name == "RequestStart" {
            self.start_request(ev);
            return;
        }
        if name == "ConnectionEstablished" {
            if let Some(id) = ev.int_field("connectionId") {
                self.connections.push((ev.activity_id, id));
                if let (Some(major), Some(minor)) =
                    (ev.int_field("versionMajor"), ev.int_field("versionMinor"))
                {
                    self.versions.insert(id, format!("{major}.{minor}"));
                }
            }
            return;
        }
        if name == "ConnectionClosed" {
            return;
        }
        let Some(i) = self.request_of(ev.activity_id) else {
            if matches!(name, "RequestStop" | "RequestFailed") && self.dropped == 0 {
                self.unmatched += 1;
            }
            return;
        };
        let t = ev.time_ns;
        let open = &mut self.requests[i];
        let m = &mut open.marks;
        match name {
            "RequestStop" => {
                open.stopped = true;
                open.req.end_ns = t;
                // .NET 8 logs the status (-1: no response); older runtimes log no field.
                if let Some(s) = ev.int_field("statusCode").filter(|s| *s >= 0) {
                    open.req.status = i32::try_from(s).ok();
                }
            }
            "RequestFailed" => {
                let msg = ev
                    .str_field("exceptionMessage")
                    .filter(|s| !s.is_empty())
                    .unwrap_or("failed");
                open.req.error = Some(msg.to_string());
                if !open.stopped {
                    open.req.end_ns = t;
                }
            }
            "RequestLeftQueue" => {
                if let Some(ms) = ev.f64_field("timeOnQueueMilliseconds") {
                    open.req.queued_ns = Some((ms.max(0.0) * 1e6) as u64);
                }
            }
            "RequestHeadersStart" => {
                m.req_headers_start.get_or_insert(t);
                if let Some(c) = ev.int_field("connectionId") {
                    open.req.connection_id = Some(c);
                }
            }
            "RequestHeadersStop" => m.req_headers_stop = Some(t),
            "RequestContentStop" => m.req_content_stop = Some(t),
            "ResponseHeadersStop" => {
                m.resp_headers_stop = Some(t);
                if let Some(s) = ev.int_field("statusCode").filter(|s| *s >= 0) {
                    open.req.status = i32::try_from(s).ok();
                }
            }
            "ResponseContentStop" => m.resp_content_stop = Some(t),
            "Redirect" => open.req.redirects += 1,
            _ => {}
        }
    }

    fn start_request(&mut self, ev: &NetEvent<'_>) {
        if self.requests.len() >= MAX_REQUESTS {
            self.dropped += 1;
            return;
        }
        if ev.activity_id == ZERO {
            self.without_activity += 1;
        }
        let path_and_query = ev.str_field("pathAndQuery").unwrap_or("");
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, _)) => (p, true),
            None => (path_and_query, false),
        };
        let major = ev.int_field("versionMajor").unwrap_or(1);
        let minor = ev.int_field("versionMinor").unwrap_or(1);
        let req = HttpRequest {
            scheme: ev.str_field("scheme").unwrap_or("").to_string(),
            host: ev.str_field("host").unwrap_or("").to_string(),
            port: ev
                .int_field("port")
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(0),
            path: path.to_string(),
            has_query: query,
            version: format!("{major}.{minor}"),
            status: None,
            error: None,
            start_ns: ev.time_ns,
            end_ns: ev.time_ns,
            duration_ns: 0,
            phases: Phases::default(),
            unaccounted_ns: 0,
            complete: false,
            connection_id: None,
            setups: Vec::new(),
            queued_ns: None,
            redirects: 0,
            start_tid: ev.tid,
            threads: vec![ev.tid],
            stack: ev.stack.to_vec(),
            activity_id: Guid::from_bytes_le(ev.activity_id).to_string(),
        };
        let i = self.requests.len();
        self.requests.push(Open {
            req,
            marks: Marks::default(),
            stopped: false,
            last_ns: ev.time_ns,
        });
        if ev.activity_id != ZERO {
            self.by_activity.insert(ev.activity_id, i);
        }
    }

    fn setup(&mut self, ev: &NetEvent<'_>, name: &str, kind: SetupKind, target_field: &str) {
        if name.ends_with("Start") {
            if ev.activity_id == ZERO {
                self.without_activity += 1;
            }
            let target = ev.str_field(target_field).unwrap_or("");
            let span = SetupSpan {
                kind,
                start_ns: ev.time_ns,
                end_ns: ev.time_ns,
                target: if kind == SetupKind::Connect {
                    socket_address(target)
                } else {
                    target.to_string()
                },
                error: None,
                linked_by: String::new(),
            };
            self.open_setups.insert(ev.activity_id, self.setups.len());
            self.setups.push(Setup {
                span,
                parent: ev.related_activity_id,
                open: true,
            });
        } else if name.ends_with("Stop") || name.ends_with("Failed") {
            let Some(&i) = self.open_setups.get(&ev.activity_id) else {
                if name.ends_with("Stop") {
                    self.unmatched += 1;
                }
                return;
            };
            let s = &mut self.setups[i];
            s.span.end_ns = ev.time_ns;
            if name.ends_with("Failed") {
                let msg = ev
                    .str_field("exceptionMessage")
                    .filter(|m| !m.is_empty())
                    .unwrap_or("failed");
                s.span.error = Some(msg.to_string());
            } else {
                s.open = false;
                self.open_setups.remove(&ev.activity_id);
            }
        }
    }

    /// The request a set-up span served, and how it was found.
    fn owner_of(&self, s: &Setup, taken: &HashMap<i64, usize>) -> Option<(usize, &'static str)> {
        if let Some(i) = self.request_of(s.parent) {
            return Some((i, "activity"));
        }
        // The connection the span's flow established: the first request sent on it.
        let mut aid = s.parent;
        for _ in 0..MAX_DEPTH {
            if aid == ZERO {
                break;
            }
            if let Some(&(_, conn)) = self.connections.iter().find(|(a, _)| *a == aid) {
                if let Some(&i) = taken.get(&conn) {
                    return Some((i, "connection"));
                }
                break;
            }
            match self.parents.get(&aid) {
                Some(&p) => aid = p,
                None => break,
            }
        }
        // Else the earliest request still waiting for a connection when the span started.
        self.requests
            .iter()
            .enumerate()
            .filter(|(_, o)| {
                let send = o
                    .marks
                    .req_headers_start
                    .unwrap_or(o.req.end_ns.max(o.last_ns));
                o.req.start_ns <= s.span.start_ns
                    && s.span.start_ns <= send
                    && host_matches(&o.req.host, &s.span)
            })
            .min_by_key(|(_, o)| o.req.start_ns)
            .map(|(i, _)| (i, "time"))
    }

    /// The requests seen, in start order; open ones end at their last event (`complete` false).
    pub fn finish(mut self) -> Vec<HttpRequest> {
        // Connection id → the first request that sent on it.
        let mut first_on: HashMap<i64, usize> = HashMap::new();
        for (i, o) in self.requests.iter().enumerate() {
            if let (Some(c), Some(t)) = (o.req.connection_id, o.marks.req_headers_start) {
                let e = first_on.entry(c).or_insert(i);
                if self.requests[*e]
                    .marks
                    .req_headers_start
                    .is_some_and(|u| t < u)
                {
                    *e = i;
                }
            }
        }
        let mut links = Vec::new();
        for s in &self.setups {
            if let Some((i, how)) = self.owner_of(s, &first_on) {
                let mut span = s.span.clone();
                span.linked_by = how.to_string();
                links.push((i, span));
            }
        }
        for (i, span) in links {
            self.requests[i].req.setups.push(span);
        }
        for o in &mut self.requests {
            if let Some(v) = o.req.connection_id.and_then(|c| self.versions.get(&c)) {
                o.req.version.clone_from(v);
            }
        }
        let mut out: Vec<HttpRequest> = self.requests.into_iter().map(close).collect();
        out.sort_by_key(|r| r.start_ns);
        out
    }
}

/// `SocketAddress.ToString()` as System.Net.Sockets logs it (`InterNetwork:16:{p,p,a,b,c,d,…}`,
/// `InterNetworkV6:28:{p,p,flow×4,addr×16,scope×4}`) as `a.b.c.d:port` / `[v6]:port`; anything
/// else unchanged.
pub fn socket_address(s: &str) -> String {
    let parse = || -> Option<String> {
        let (family, rest) = s.split_once(':')?;
        let bytes: Vec<u8> = rest
            .split_once('{')?
            .1
            .strip_suffix('}')?
            .split(',')
            .map(|b| b.trim().parse().ok())
            .collect::<Option<_>>()?;
        let port = u16::from_be_bytes([*bytes.first()?, *bytes.get(1)?]);
        match family {
            "InterNetwork" => {
                let a: [u8; 4] = bytes.get(2..6)?.try_into().ok()?;
                Some(format!("{}:{port}", std::net::Ipv4Addr::from(a)))
            }
            "InterNetworkV6" => {
                let a: [u8; 16] = bytes.get(6..22)?.try_into().ok()?;
                let ip = std::net::Ipv6Addr::from(a);
                Some(match ip.to_ipv4_mapped() {
                    Some(v4) => format!("{v4}:{port}"),
                    None => format!("[{ip}]:{port}"),
                })
            }
            _ => None,
        }
    };
    parse().unwrap_or_else(|| s.to_string())
}

/// A span's target names the request's host (DNS and TLS name it; connects give an address).
fn host_matches(host: &str, s: &SetupSpan) -> bool {
    s.kind == SetupKind::Connect || s.target.is_empty() || s.target.eq_ignore_ascii_case(host)
}

/// Length of the union of `spans` clipped to [lo, hi].
fn covered(mut spans: Vec<(u64, u64)>, lo: u64, hi: u64) -> u64 {
    spans.retain_mut(|(s, e)| {
        *s = (*s).max(lo);
        *e = (*e).min(hi);
        s < e
    });
    spans.sort_unstable();
    let (mut total, mut cur) = (0u64, None::<(u64, u64)>);
    for (s, e) in spans {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    total + cur.map_or(0, |(s, e)| e - s)
}

fn close(o: Open) -> HttpRequest {
    let Open {
        mut req,
        marks: m,
        stopped,
        last_ns,
    } = o;
    if !stopped && req.error.is_none() {
        req.end_ns = req.end_ns.max(last_ns);
    }
    req.complete = stopped;
    let (start, end) = (req.start_ns, req.end_ns.max(req.start_ns));
    req.duration_ns = end - start;
    let clamp = |t: u64| t.clamp(start, end);
    let send_start = clamp(m.req_headers_start.unwrap_or(end));
    let spans_of = |k: SetupKind| {
        req.setups
            .iter()
            .filter(|s| s.kind == k)
            .map(|s| (s.start_ns, s.end_ns))
            .collect::<Vec<_>>()
    };
    let mut p = Phases {
        dns_ns: covered(spans_of(SetupKind::Dns), start, send_start),
        connect_ns: covered(spans_of(SetupKind::Connect), start, send_start),
        tls_ns: covered(spans_of(SetupKind::Tls), start, send_start),
        ..Phases::default()
    };
    // Overlapping spans (a connect inside a DNS lookup's window) are counted once, DNS first.
    let setup = covered(
        req.setups.iter().map(|s| (s.start_ns, s.end_ns)).collect(),
        start,
        send_start,
    );
    let sum = p.dns_ns + p.connect_ns + p.tls_ns;
    if sum > setup {
        let over = sum - setup;
        let cut = over.min(p.connect_ns);
        p.connect_ns -= cut;
        p.tls_ns -= (over - cut).min(p.tls_ns);
    }
    p.queue_ns = (send_start - start).saturating_sub(setup);
    if m.req_headers_start.is_some() {
        let sent = clamp(
            m.req_content_stop
                .into_iter()
                .chain(m.req_headers_stop)
                .max()
                .unwrap_or(send_start),
        );
        p.send_ns = sent - send_start;
        let headers = clamp(m.resp_headers_stop.unwrap_or(sent).max(sent));
        p.wait_ns = headers - sent;
        let body_end = clamp(m.resp_content_stop.unwrap_or(end).max(headers));
        p.content_ns = body_end - headers;
    }
    req.unaccounted_ns = req.duration_ns as i64 - p.total_ns() as i64;
    req.phases = p;
    req
}

#[cfg(test)]
mod tests {
    use super::*;
    use clr_events::Value;

    fn aid(n: u8) -> Aid {
        let mut a = [0u8; 16];
        a[0] = n;
        a
    }

    struct Ev {
        provider: &'static str,
        name: &'static str,
        t: u64,
        tid: u64,
        aid: u8,
        rel: u8,
        fields: Vec<(String, Value)>,
    }

    fn ev(provider: &'static str, name: &'static str, t: u64, aid: u8, rel: u8) -> Ev {
        Ev {
            provider,
            name,
            t,
            tid: 7,
            aid,
            rel,
            fields: Vec::new(),
        }
    }

    impl Ev {
        fn with(mut self, k: &str, v: Value) -> Self {
            self.fields.push((k.to_string(), v));
            self
        }
        fn feed(&self, b: &mut HttpBuilder) {
            b.on_event(&NetEvent {
                provider: self.provider,
                name: self.name,
                event_id: 0,
                opcode: 0,
                tid: self.tid,
                time_ns: self.t,
                activity_id: aid(self.aid),
                related_activity_id: aid(self.rel),
                fields: &self.fields,
                stack: &[1, 2],
            });
        }
    }

    const H: &str = providers::HTTP;

    fn start(t: u64, a: u8, path: &str) -> Ev {
        ev(H, "RequestStart", t, a, 1)
            .with("scheme", Value::String("http".into()))
            .with("host", Value::String("example.test".into()))
            .with("port", Value::I32(8080))
            .with("pathAndQuery", Value::String(path.into()))
            .with("versionMajor", Value::U8(1))
            .with("versionMinor", Value::U8(1))
    }

    /// One request on a new connection whose set-up ran in the request's own flow.
    #[test]
    fn phases_tile_a_request_with_its_connection_setup() {
        let mut b = HttpBuilder::new();
        let evs = [
            start(1_000, 10, "/a?x=1"),
            ev(providers::NAME_RESOLUTION, "ResolutionStart", 1_100, 11, 10)
                .with("hostNameOrAddress", Value::String("example.test".into())),
            ev(providers::NAME_RESOLUTION, "ResolutionStop", 1_300, 11, 0),
            ev(providers::SOCKETS, "ConnectStart", 1_300, 12, 10)
                .with("address", Value::String("10.0.0.1:8080".into())),
            ev(providers::SOCKETS, "ConnectStop", 1_600, 12, 0),
            ev(H, "ConnectionEstablished", 1_650, 10, 0).with("connectionId", Value::I64(3)),
            ev(H, "RequestHeadersStart", 1_700, 13, 10).with("connectionId", Value::I64(3)),
            ev(H, "RequestHeadersStop", 1_750, 13, 0),
            ev(H, "ResponseHeadersStart", 1_760, 14, 10),
            ev(H, "ResponseHeadersStop", 5_000, 14, 0).with("statusCode", Value::I32(200)),
            ev(H, "ResponseContentStart", 5_010, 15, 10),
            ev(H, "ResponseContentStop", 5_500, 15, 0),
            Ev {
                tid: 9,
                ..ev(H, "RequestStop", 5_520, 10, 0).with("statusCode", Value::I32(200))
            },
        ];
        evs.iter().for_each(|e| e.feed(&mut b));
        let r = b.finish();
        assert_eq!(r.len(), 1);
        let r = &r[0];
        assert_eq!(
            (r.path.as_str(), r.has_query, r.status, r.complete),
            ("/a", true, Some(200), true)
        );
        assert_eq!(r.duration_ns, 4_520);
        let p = r.phases;
        assert_eq!(
            (p.dns_ns, p.connect_ns, p.tls_ns, p.queue_ns),
            (200, 300, 0, 200)
        );
        assert_eq!((p.send_ns, p.wait_ns, p.content_ns), (50, 3_250, 500));
        assert_eq!(r.unaccounted_ns, 20);
        assert_eq!(r.threads, vec![7, 9]);
        assert_eq!(r.connection_id, Some(3));
        assert!(r.setups.iter().all(|s| s.linked_by == "activity"));
        assert!(!r.is_error());
    }

    /// Set-up in a flow of its own is found through the connection it established; a second
    /// request that reused the connection gets none of it; a failure and a 404 are errors.
    #[test]
    fn setup_outside_the_flow_goes_to_the_first_request_on_its_connection() {
        let mut b = HttpBuilder::new();
        let evs = [
            start(1_000, 10, "/a"),
            ev(providers::SOCKETS, "ConnectStart", 1_100, 31, 30),
            ev(providers::SOCKETS, "ConnectStop", 1_400, 31, 0),
            ev(H, "ConnectionEstablished", 1_450, 30, 0)
                .with("versionMajor", Value::U8(2))
                .with("versionMinor", Value::U8(0))
                .with("connectionId", Value::I64(5)),
            ev(H, "RequestHeadersStart", 1_500, 13, 10).with("connectionId", Value::I64(5)),
            ev(H, "RequestHeadersStop", 1_510, 13, 0),
            ev(H, "ResponseHeadersStart", 1_520, 14, 10),
            ev(H, "ResponseHeadersStop", 2_000, 14, 0).with("statusCode", Value::I32(404)),
            ev(H, "RequestStop", 2_100, 10, 0),
            start(3_000, 20, "/b"),
            ev(H, "RequestHeadersStart", 3_010, 23, 20).with("connectionId", Value::I64(5)),
            ev(H, "RequestFailed", 3_400, 20, 0)
                .with("exceptionMessage", Value::String("reset".into())),
            ev(H, "RequestStop", 3_410, 20, 0).with("statusCode", Value::I32(-1)),
        ];
        evs.iter().for_each(|e| e.feed(&mut b));
        let r = b.finish();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].setups.len(), 1);
        assert_eq!(r[0].setups[0].linked_by, "connection");
        assert_eq!((r[0].phases.connect_ns, r[0].phases.queue_ns), (300, 200));
        assert_eq!(r[0].status, Some(404));
        assert_eq!(
            r[0].version, "2.0",
            "the connection's version, not the one asked for"
        );
        assert!(r[0].is_error());
        assert!(r[1].setups.is_empty());
        assert_eq!((r[1].status, r[1].error.as_deref()), (None, Some("reset")));
        assert_eq!(r[1].duration_ns, 410);
    }

    #[test]
    fn a_request_still_open_at_the_end_is_incomplete() {
        let mut b = HttpBuilder::new();
        start(100, 10, "/x").feed(&mut b);
        ev(H, "RequestHeadersStart", 150, 11, 10).feed(&mut b);
        ev(H, "RequestStop", 160, 99, 0).feed(&mut b);
        let r = b.unmatched;
        let out = b.finish();
        assert_eq!(r, 1);
        assert!(!out[0].complete);
        assert_eq!(out[0].duration_ns, 50);
    }

    #[test]
    fn socket_addresses_as_logged_become_readable() {
        assert_eq!(
            socket_address("InterNetwork:16:{166,53,127,0,0,1,0,0,0,0,0,0,0,0}"),
            "127.0.0.1:42549"
        );
        let v6 = "InterNetworkV6:28:{132,9,0,0,0,0,0,0,0,0,0,0,0,0,0,0,255,255,127,0,0,1,0,0,0,0}";
        assert_eq!(socket_address(v6), "127.0.0.1:33801");
        let v6 = "InterNetworkV6:28:{0,80,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0}";
        assert_eq!(socket_address(v6), "[::1]:80");
        assert_eq!(socket_address("Unix:5:{1,2}"), "Unix:5:{1,2}");
        assert_eq!(socket_address("garbage"), "garbage");
    }

    #[test]
    fn union_of_overlapping_spans() {
        assert_eq!(covered(vec![(0, 10), (5, 20), (30, 40)], 0, 100), 30);
        assert_eq!(covered(vec![(0, 10), (5, 20)], 8, 12), 4);
        assert_eq!(covered(vec![], 0, 1), 0);
    }
}
