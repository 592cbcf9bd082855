//! Live: HTTP requests of a real .NET 8 client (HttpClient against an HttpListener on loopback in
//! the same process) recorded with `record --http`, and built again from a `trace` of the same
//! providers; checked against the client's own tally and the server's known delay. Also the
//! generic summary of an EventSource named with `--providers`.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use clrprobe::http::{HttpLine, read_jsonl};
use clrprobe_tests::{Running, Runtime, Workload, require_root};
use serde_json::Value;

/// Rounds of the workload (each sends /fast, /slow and /missing concurrently).
const ROUNDS: u32 = 10;
/// The server holds /slow this long.
const SLOW_MS: f64 = 300.0;

fn scratch(name: &str) -> PathBuf {
        clrprobe_tests::scratch_dir(&format!("http-{name}"))
}

/// The Http workload: requests start once a session has enabled TplEventSource (the workload
/// prints `session=on`; at most 30 s after `ready`); it lives 6 s or until its requests are done.
/// `host`: `localhost` adds a DNS lookup to each new connection.
fn start_http(host: &str) -> Running {
    Workload::new("Http", Runtime::Net8)
        .arg(6)
        .arg(ROUNDS)
        .arg(SLOW_MS)
        .arg(30_000)
        .arg(host)
        .start()
        .unwrap()
}

fn port_of(w: &Running) -> u16 {
    w.output()
        .iter()
        .find_map(|l| l.strip_prefix("port=").map(|p| p.trim().parse().unwrap()))
        .expect("workload printed its port")
}

/// (path, status) → count, as the client tallied them.
fn client_tally(w: &Running) -> BTreeMap<(String, i32), u64> {
    w.wait_for_line("sent ", Duration::from_secs(60))
        .expect("the client finished its requests");
    assert!(
        w.output().iter().any(|l| l == "session=on"),
        "the requests ran before the session was on: {:?}",
        w.output()
    );
    w.output()
        .iter()
        .filter_map(|l| l.strip_prefix("count "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                (f[0].to_string(), f[1].parse().unwrap()),
                f[2].parse().unwrap(),
            )
        })
        .collect()
}

fn tally_of(lines: &[HttpLine]) -> BTreeMap<(String, i32), u64> {
    let mut t = BTreeMap::new();
    for l in lines {
        *t.entry((l.path.clone(), l.status.unwrap_or(-1)))
            .or_insert(0) += 1;
    }
    t
}

/// The checks of the issue on one request list: every request with its path and status, counts
/// equal to the client's, the delayed path at least the delay, phases adding up to the total.
fn check_requests(lines: &[HttpLine], tally: &BTreeMap<(String, i32), u64>, host: &str) {
    assert_eq!(
        &tally_of(lines),
        tally,
        "requests by (path, status): recorded vs the client's own count"
    );
    assert_eq!(lines.len() as u32, 3 * ROUNDS);
    let (mut phases, mut total) = (0.0, 0.0);
    for l in lines {
        assert!(l.complete && l.error.is_none(), "{l:?}");
        assert_eq!(
            (l.scheme.as_str(), l.host.as_str(), l.version.as_str()),
            ("http", host, "1.1")
        );
        if l.path == "/slow" {
            assert!(l.has_query);
            assert!(
                l.duration_ms >= SLOW_MS,
                "/slow took {} ms < the server's {SLOW_MS} ms delay",
                l.duration_ms
            );
            assert!(
                l.phases.wait >= SLOW_MS,
                "the delay is in the wait phase: {:?}",
                l.phases
            );
            // Long requests: their phases add up to within 5 % of the total, each on its own.
            let sum = l.phases.total();
            assert!(
                (sum - l.duration_ms).abs() <= 0.05 * l.duration_ms,
                "phases {sum} ms vs {} ms: {l:?}",
                l.duration_ms
            );
        }
        phases += l.phases.total();
        total += l.duration_ms;
    }
    // Every request together: within 5 % (a sub-millisecond request can lose its last tens of
    // microseconds, ResponseContentStop → RequestStop, to no phase).
    assert!(
        (phases - total).abs() <= 0.05 * total,
        "phases {phases} ms vs {total} ms in all"
    );
    // The first round opened the connections: connect spans tied to its requests.
    let connects = lines
        .iter()
        .flat_map(|l| &l.setups)
        .filter(|s| s.kind == "connect")
        .count();
    assert!(connects >= 1, "no connect span linked to a request");
    assert!(
        lines
            .iter()
            .filter(|l| !l.setups.is_empty())
            .all(|l| l.phases.connect > 0.0)
    );
    // By name: each new connection looked the host up first.
    if host == "localhost" {
        let with_dns: Vec<&HttpLine> = lines
            .iter()
            .filter(|l| l.setups.iter().any(|s| s.kind == "dns"))
            .collect();
        assert!(!with_dns.is_empty(), "no DNS span linked to a request");
        assert!(with_dns.iter().all(|l| {
            l.phases.dns > 0.0
                && l.setups
                    .iter()
                    .any(|s| s.kind == "dns" && s.target == "localhost")
        }));
    } else {
        assert!(lines.iter().all(|l| l.phases.dns == 0.0));
    }
}

#[test]
fn record_http_lists_every_request_with_path_status_phases_and_markers() {
    require_root();
    let dir = scratch("record");
    let prefix = dir.join("p");
    let mut w = start_http("localhost");
    let port = port_of(&w);
    let out = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args([
            "record",
            "--http",
            "--cpu",
            "--offcpu",
            "--json",
            "--quiet",
            "-p",
            &w.pid.to_string(),
            "-o",
        ])
        .arg(&prefix)
        .output()
        .expect("run clrprobe record");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tally = client_tally(&w);
    w.wait(Duration::from_secs(10));
    let lines = read_jsonl(&PathBuf::from(format!("{}.http.jsonl", prefix.display()))).unwrap();
    let mine: Vec<HttpLine> = lines
        .into_iter()
        .filter(|l| l.port == port && l.pid == w.pid)
        .collect();
    for l in &mine {
        eprintln!(
            "{:>9.3} ms {} {:?} {:?} other {:.3}",
            l.duration_ms, l.path, l.status, l.phases, l.unaccounted_ms
        );
    }
    check_requests(&mine, &tally, "localhost");
    // Start time on the Unix clock, inside the recording; RequestStart's stack named.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    assert!(
        mine.iter()
            .all(|l| l.start_ns > now - 120_000_000_000 && l.start_ns < now && l.offset_ms > 0.0)
    );
    assert!(
        mine.iter().all(|l| l
            .stack
            .iter()
            .any(|f| f.contains("Http::Get") || f.contains("Http.Get"))),
        "{:?}",
        mine[0].stack
    );

    // The five slowest requests say what their threads did meanwhile.
    let mut by_time: Vec<&HttpLine> = mine.iter().collect();
    by_time.sort_by(|a, b| b.duration_ms.total_cmp(&a.duration_ms));
    assert!(
        by_time[..5].iter().all(|l| l.meanwhile.is_some())
            && by_time[5..].iter().all(|l| l.meanwhile.is_none())
    );
    for l in &by_time[..5] {
        let m = l.meanwhile.as_ref().unwrap();
        eprintln!("meanwhile of {} {:.1} ms: {m:?}", l.path, l.duration_ms);
        let off = m.offcpu_ms.expect("off-CPU time in the window");
        assert!(
            off > 0.0 && off <= l.duration_ms * l.threads.len() as f64 + 1.0,
            "{m:?}"
        );
        assert!(!m.offcpu_top.is_empty());
    }

    // The summary's table per host and path.
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let http = s["http"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pid"] == w.pid)
        .expect("an HTTP report for the target");
    let rows = http["by_host_path"].as_array().unwrap();
    let row = |p: &str| {
        rows.iter()
            .find(|r| r["path"] == p && r["host"] == format!("http://localhost:{port}"))
            .unwrap()
    };
    assert_eq!(
        (
            row("/slow")["count"].as_u64(),
            row("/slow")["errors"].as_u64()
        ),
        (Some(ROUNDS.into()), Some(0))
    );
    assert_eq!(
        (
            row("/missing")["count"].as_u64(),
            row("/missing")["errors"].as_u64()
        ),
        (Some(ROUNDS.into()), Some(ROUNDS.into()))
    );
    assert!(row("/slow")["p50_ms"].as_f64().unwrap() >= SLOW_MS);
    // OTel histogram points: every request once.
    let otel: u64 = http["otel_duration"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["count"].as_u64().unwrap())
        .sum();
    assert!(otel >= u64::from(3 * ROUNDS));

    // Firefox Profiler markers: one per request on the requesting thread.
    let ff = std::fs::read_to_string(format!("{}.cpu.firefox.json", prefix.display()))
        .expect("a firefox file");
    assert_eq!(count_markers(&ff, "HTTP /slow 200"), ROUNDS as usize);
    assert_eq!(count_markers(&ff, "HTTP /missing 404"), ROUNDS as usize);

    // `report` on the profile prints the table from PREFIX.http.jsonl.
    let pprof = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".pb.gz"))
        .unwrap();
    let rep = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .arg("report")
        .arg(&pprof)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&rep.stdout);
    assert!(
        rep.status.success() && text.contains(&format!("HTTP requests of {}", w.pid)),
        "{text}"
    );
    assert!(
        text.contains("/slow") && text.contains("meanwhile on its threads"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Markers named `name` over every thread of a processed Firefox profile.
fn count_markers(json: &str, name: &str) -> usize {
    let v: Value = serde_json::from_str(json).unwrap();
    let shared = v["shared"]["stringArray"].as_array();
    v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let strings = t["stringArray"]
                .as_array()
                .or(shared)
                .expect("a string table");
            let Some(idx) = strings.iter().position(|s| s == name) else {
                return 0;
            };
            t["markers"]["name"].as_array().map_or(0, |n| {
                n.iter().filter(|i| i.as_u64() == Some(idx as u64)).count()
            })
        })
        .sum()
}

#[test]
fn a_trace_of_the_same_providers_replays_into_the_same_requests() {
    require_root();
    let dir = scratch("trace");
    let file = dir.join("http.nettrace");
    let mut w = start_http("127.0.0.1");
    let port = port_of(&w);
    let providers = "System.Net.Http,System.Net.NameResolution,System.Net.Sockets,System.Net.Security,System.Threading.Tasks.TplEventSource:0x80:4";
    let out = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args([
            "trace",
            "-p",
            &w.pid.to_string(),
            "--no-rundown",
            "--providers",
            providers,
            "-o",
        ])
        .arg(&file)
        .output()
        .expect("run clrprobe trace");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tally = client_tally(&w);
    w.wait(Duration::from_secs(10));
    let outcome = clrprobe::http::replay(Path::new(&file), &[]).unwrap();
    assert_eq!(
        (
            outcome.unmatched,
            outcome.without_activity,
            outcome.decode_errors
        ),
        (0, 0, 0)
    );
    let lines: Vec<HttpLine> = outcome
        .requests
        .iter()
        .filter(|r| r.port == port)
        .map(|r| HttpLine::new(w.pid, r, r.start_ns, 0.0, Vec::new()))
        .collect();
    check_requests(&lines, &tally, "127.0.0.1");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn providers_named_on_record_get_counts_and_field_summaries() {
    require_root();
    // 20 events Work(name "item-i", count i, bytes i*1000, ratio i/4) 4 s after `ready`.
    let mut w = Workload::new("Telemetry", Runtime::Net8)
        .arg(6)
        .arg(20)
        .arg(4000)
        .start()
        .unwrap();
    let dir = scratch("providers");
    let out = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args([
            "record",
            "--providers",
            "Clrprobe-Telemetry",
            "--contention",
            "--json",
            "--quiet",
            "-p",
            &w.pid.to_string(),
            "-o",
        ])
        .arg(dir.join("p"))
        .output()
        .expect("run clrprobe record");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    w.wait(Duration::from_secs(10));
    assert!(w.output().iter().any(|l| l == "sent 20"));
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let g = &s["http"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pid"] == w.pid)
        .unwrap()["generic"];
    let work = g["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "Work")
        .expect("Work events");
    assert_eq!(
        (work["provider"].as_str(), work["count"].as_u64()),
        (Some("Clrprobe-Telemetry"), Some(20))
    );
    let field = |n: &str| {
        work["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f[0] == n)
            .unwrap()[1]
            .clone()
    };
    assert_eq!(field("count")["sum"].as_f64(), Some(190.0));
    assert_eq!(field("bytes")["sum"].as_f64(), Some(190_000.0));
    assert_eq!(
        (
            field("bytes")["max"].as_f64(),
            field("bytes")["p50"].as_f64()
        ),
        (Some(19_000.0), Some(9_000.0))
    );
    assert_eq!(field("ratio")["sum"].as_f64(), Some(47.5));
    assert_eq!(field("name")["top_values"].as_array().unwrap().len(), 5);
    // No HTTP file without --http.
    assert!(!dir.join("p.http.jsonl").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
