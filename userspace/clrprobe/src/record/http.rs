//! `record --http` and `record --providers`: the networking EventSources (and any named
//! provider) in the recording's EventPipe session, one record per HTTP request, and for the
//! slowest requests what their threads did meanwhile (CPU samples and off-CPU time inside the
//! request's window, from sample times on the host's monotonic clock).
use std::collections::{HashMap, HashSet};

use clrprobe_eventpipe::ipc::{
    ConfigError, ProviderConfig, RUNDOWN_PROVIDER, RUNTIME_PROVIDER, SessionConfig, parse_providers,
};
use clrprobe_pipeline::http::{host_path_stats, otel_duration_histograms};
use clrprobe_profile::{Marker, Profile, ProfileError};

use super::FrameResolver;
use crate::http::{
    HttpLine, HttpReport, Meanwhile, NetCollector, NetOutcome, SLOWEST, http_providers,
    merge_providers,
};

/// What `--http` and `--providers` ask of a recording.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetArgs {
    pub http: bool,
    /// Providers named with `--providers` (their events get the generic summary).
    pub providers: Vec<ProviderConfig>,
}

impl NetArgs {
    /// From the command line: `--http`, and `--providers SPEC` in `trace`'s syntax.
    pub fn parse(http: bool, providers: Option<&str>) -> Result<Self, ConfigError> {
        let providers = match providers {
            Some(spec) => parse_providers(spec)?,
            None => Vec::new(),
        };
        Ok(Self { http, providers })
    }

    /// EventSources whose events get the generic summary (the runtime's own are not EventSources).
    pub fn generic_names(&self) -> Vec<String> {
        self.providers
            .iter()
            .filter(|p| p.name != RUNTIME_PROVIDER && p.name != RUNDOWN_PROVIDER)
            .map(|p| p.name.clone())
            .collect()
    }

    /// Adds the providers to a session.
    pub fn extend_session(&self, config: &mut SessionConfig) {
        if self.http {
            merge_providers(&mut config.providers, &http_providers());
        }
        merge_providers(&mut config.providers, &self.providers);
    }

    /// A collector for a new session, or None when neither is asked for.
    pub fn collector(&self) -> Option<NetCollector> {
        let c = NetCollector::new(self.http, &self.generic_names());
        (!c.is_off()).then_some(c)
    }
}

/// Makes off-CPU intervals carry their start time (one map entry per interval instead of one
/// per distinct stack), so they can be placed in request windows.
pub fn enable_offcpu_times(l: &mut crate::bpf::Loaded) -> Result<(), String> {
    use aya::maps::{Array, MapData};
    use clrprobe_common::{names, switch_config};
    let name = names::SWITCH_CONFIG;
    let map = l
        .ebpf
        .map_mut(name)
        .ok_or_else(|| format!("no map {name}"))?;
    let mut cfg: Array<&mut MapData, u64> =
        Array::try_from(map).map_err(|e| format!("map {name}: {e}"))?;
    let flags = cfg
        .get(&switch_config::FLAGS, 0)
        .map_err(|e| format!("map {name}: {e}"))?;
    cfg.set(
        switch_config::FLAGS,
        flags | switch_config::FLAG_OFFCPU_TIME,
        0,
    )
    .map_err(|e| format!("map {name}: {e}"))
}

/// One process's EventSource results at the end of a recording.
pub struct NetPart {
    pub pid: u32,
    pub outcome: NetOutcome,
    /// Time 0 of the session's clock in host monotonic ns.
    pub origin_mono_ns: Option<i64>,
}

/// Where a recording sits in time: its start on the monotonic and Unix clocks, the CPU period.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub started_mono_ns: i64,
    pub start_unix_ns: u64,
    pub cpu_period_ms: f64,
    pub offcpu: bool,
}

/// One timed stack: pid, tid, kernel frames, user frames (leaf first), host monotonic ns,
/// value (samples; off-CPU: ns).
pub type TimedStack<'a> = (u32, u32, &'a [u64], &'a [u64], u64, u64);

/// Where the slowest requests' threads are looked up: the recording's timed CPU samples and
/// off-CPU intervals (the pipeline aggregator's).
pub trait StackTimes {
    fn cpu(&self) -> Box<dyn Iterator<Item = TimedStack<'_>> + '_>;
    /// Off-CPU intervals by their start.
    fn offcpu(&self) -> Box<dyn Iterator<Item = TimedStack<'_>> + '_>;
}

/// The per-process HTTP reports: requests with named stacks and times, summaries, and for the
/// slowest requests what their threads did meanwhile.
pub fn finish(
    parts: Vec<NetPart>,
    resolver: &mut FrameResolver,
    timed: &dyn StackTimes,
    clock: Clock,
) -> Vec<HttpReport> {
    parts
        .into_iter()
        .map(|p| report_of(p, resolver, timed, clock))
        .collect()
}

fn report_of(
    part: NetPart,
    resolver: &mut FrameResolver,
    timed: &dyn StackTimes,
    clock: Clock,
) -> HttpReport {
    let NetPart {
        pid,
        outcome,
        origin_mono_ns,
    } = part;
    let origin = origin_mono_ns.unwrap_or(clock.started_mono_ns);
    let mono = |t: u64| origin.saturating_add(t as i64);
    let mut lines: Vec<HttpLine> = outcome
        .requests
        .iter()
        .map(|r| {
            let since_start = mono(r.start_ns) - clock.started_mono_ns;
            let unix = (clock.start_unix_ns as i64)
                .saturating_add(since_start)
                .max(0) as u64;
            let mut frames = resolver.stack(pid, &[], &r.stack);
            frames.reverse();
            // From the caller of HttpClient on: the EventSource plumbing above it says nothing.
            let plumbing = frames
                .iter()
                .rposition(|f| {
                    f.name.starts_with("System.Diagnostics.Tracing.")
                        || f.name.contains("HttpTelemetry::")
                })
                .map_or(0, |i| i + 1);
            let stack = frames
                .into_iter()
                .skip(plumbing)
                .take(48)
                .map(|f| f.name.to_string())
                .collect();
            HttpLine::new(pid, r, unix, since_start as f64 / 1e6, stack)
        })
        .collect();
    let mut order: Vec<usize> = (0..lines.len())
        .filter(|&i| outcome.requests[i].complete)
        .collect();
    order.sort_by_key(|&i| std::cmp::Reverse(outcome.requests[i].duration_ns));
    for &i in order.iter().take(SLOWEST) {
        let r = &outcome.requests[i];
        let window = (mono(r.start_ns).max(0) as u64, mono(r.end_ns).max(0) as u64);
        lines[i].meanwhile = Some(meanwhile(pid, &r.threads, window, resolver, timed, clock));
    }
    HttpReport {
        pid,
        events: outcome.events,
        unmatched: outcome.unmatched,
        without_activity: outcome.without_activity,
        dropped: outcome.dropped,
        http_on: outcome.http_on,
        decode_errors: outcome.decode_errors,
        request_count: lines.len(),
        by_host_path: host_path_stats(&outcome.requests),
        otel_duration: otel_duration_histograms(&outcome.requests),
        generic: outcome.generic,
        requests: lines,
    }
}

/// Innermost frames of a stack, leaf first (off-CPU stacks: user frames only, as their kernel
/// part is always the scheduler's).
fn stack_text(resolver: &mut FrameResolver, pid: u32, kernel: &[u64], user: &[u64]) -> String {
    let mut frames = resolver.stack(pid, kernel, user);
    frames.reverse();
    let names: Vec<String> = frames.iter().take(8).map(|f| f.name.to_string()).collect();
    if names.is_empty() {
        "[no stack]".into()
    } else {
        names.join(" ← ")
    }
}

fn meanwhile(
    pid: u32,
    threads: &[u64],
    (lo, hi): (u64, u64),
    resolver: &mut FrameResolver,
    timed: &dyn StackTimes,
    clock: Clock,
) -> Meanwhile {
    let tids: HashSet<u32> = threads.iter().map(|&t| t as u32).collect();
    let mine = |p: u32, tid: u32| p == pid && tids.contains(&tid);
    let mut m = Meanwhile {
        cpu_period_ms: clock.cpu_period_ms,
        ..Meanwhile::default()
    };
    let mut cpu: HashMap<(&[u64], &[u64]), u64> = HashMap::new();
    let mut any_cpu = false;
    for (p, tid, kernel, user, t, n) in timed.cpu() {
        any_cpu = true;
        if mine(p, tid) && (lo..=hi).contains(&t) {
            *cpu.entry((kernel, user)).or_insert(0) += n;
            m.cpu_samples += n;
        }
    }
    let mut top: HashMap<String, u64> = HashMap::new();
    for ((kernel, user), n) in cpu {
        *top.entry(stack_text(resolver, pid, kernel, user))
            .or_insert(0) += n;
    }
    m.cpu_top = sorted(top);
    m.cpu_top.truncate(5);
    if !any_cpu {
        m.notes.push(
            "no CPU sample times: CPU sampling was off, used perf_event, or recorded --all".into(),
        );
    }
    if clock.offcpu && timed.offcpu().next().is_some() {
        let mut off: HashMap<String, u64> = HashMap::new();
        let mut total = 0u64;
        for (p, tid, _, user, t, ns) in timed.offcpu() {
            let (s, e) = (t, t.saturating_add(ns));
            if !mine(p, tid) || e <= lo || s >= hi {
                continue;
            }
            let overlap = e.min(hi) - s.max(lo);
            total += overlap;
            *off.entry(stack_text(resolver, pid, &[], user)).or_insert(0) += overlap;
        }
        m.offcpu_ms = Some(total as f64 / 1e6);
        let mut v: Vec<(String, f64)> = sorted(off)
            .into_iter()
            .map(|(s, ns)| (s, ns as f64 / 1e6))
            .collect();
        v.truncate(5);
        m.offcpu_top = v;
    } else {
        m.notes
            .push("no off-CPU times: record with --offcpu and the BPF sampler".into());
    }
    m
}

fn sorted(map: HashMap<String, u64>) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = map.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// One interval marker per request on the thread that started it.
pub fn add_markers(profile: Profile, reports: &[HttpReport]) -> Result<Profile, ProfileError> {
    if reports.iter().all(|r| r.requests.is_empty()) {
        return Ok(profile);
    }
    // Markers and comments need no interning: added to the built profile, not copied.
    let mut b = profile;
    for r in reports {
        for l in &r.requests {
            let start = (l.offset_ms * 1e6).max(0.0) as u64;
            let status = match (&l.error, l.status) {
                (Some(e), _) => format!("failed: {e}"),
                (None, Some(s)) => s.to_string(),
                (None, None) => "-".into(),
            };
            let p = &l.phases;
            let mut data = vec![
                (
                    "url".to_string(),
                    format!("{}://{}:{}{}", l.scheme, l.host, l.port, l.path),
                ),
                ("status".into(), status.clone()),
                ("duration_ms".into(), format!("{:.3}", l.duration_ms)),
                ("version".into(), l.version.clone()),
            ];
            for (k, v) in [
                ("queue_ms", p.queue),
                ("dns_ms", p.dns),
                ("connect_ms", p.connect),
                ("tls_ms", p.tls),
                ("send_ms", p.send),
                ("wait_ms", p.wait),
                ("content_ms", p.content),
            ] {
                data.push((k.into(), format!("{v:.3}")));
            }
            b.add_marker(Marker {
                name: format!("HTTP {} {}", l.path, status),
                start_ns: start,
                end_ns: start + (l.duration_ms * 1e6) as u64,
                pid: Some(l.pid),
                tid: Some(l.start_thread as u32),
                data,
            });
        }
    }
    Ok(b)
}

/// Writes `PREFIX.http.jsonl` when `--http` recorded requests (or saw networking events).
pub fn write_outputs(
    summary: &super::RecordSummary,
    prefix: &std::path::Path,
) -> Vec<super::Written> {
    if !summary
        .http
        .iter()
        .any(|r| r.events > 0 || !r.requests.is_empty())
    {
        return Vec::new();
    }
    let path = crate::http::jsonl_path(prefix);
    let result =
        crate::http::write_jsonl(&path, &summary.http).map_err(|source| ProfileError::Write {
            path: path.clone(),
            source,
        });
    if result.is_ok() {
        chown_to_sudo_user(&path);
    }
    vec![super::Written { path, result }]
}

/// Under sudo, hands the file to the invoking user (as the other outputs).
fn chown_to_sudo_user(path: &std::path::Path) {
    let id = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
    if let (Some(uid), Some(gid)) = (id("SUDO_UID"), id("SUDO_GID")) {
        let _ = std::os::unix::fs::lchown(path, Some(uid), Some(gid));
    }
}
