//! Live: the recordings `record` left on the old one-shot path until round 9, on the streaming
//! pipeline, checked against what the workloads are known to do: `--save-raw` (replayed twice
//! to the same bytes, with the live names and counts), `--http` (every request of the client's
//! own tally, its stack and phases) and `--providers` (the EventSource's known events and
//! field sums), event kinds without BPF and `--cxa-throw` (the workload's exceptions counted
//! exactly, by the runtime and by the kernel's uprobe; its allocated types), and a launched
//! command that is not `dotnet`.
use std::{
    collections::BTreeMap,
    path::Path,
    process::Command,
    time::Duration,
};

use clrprobe::http::{HttpLine, read_jsonl};
use clrprobe_tests::{
    Running, Runtime, Workload,
    outputs::{events_json, files, out_dir, run, run_json, top, with_suffix},
    require_root,
};
use serde_json::Value;

const CLRPROBE: &str = env!("CARGO_BIN_EXE_clrprobe");

/// `clrprobe record ARGS`.
fn record(args: &[&str]) -> Command {
    let mut c = Command::new(CLRPROBE);
    c.arg("record").args(args);
    c
}

fn exceptions_of(s: &Value) -> Value {
    s["events"][0][1]["exceptions_by_type"].clone()
}

#[test]
fn save_raw_on_the_pipeline_replays_to_the_same_bytes_twice_with_the_live_names() {
    require_root();
    let mut w = Workload::new("Mixed", Runtime::Net8).arg(30.0).start().unwrap();
    let dir = out_dir("pipekinds", "raw");
    let pid = w.pid.to_string();
    let (raw, live) = (dir.join("raw"), dir.join("live"));
    let (s, err) = run_json(
        record(&["--quiet", "--json", "-p", &pid, "-d", "4s", "-F", "499", "--format", "pprof", "-o"]).arg(&live).arg("--save-raw").arg(&raw),
    );
    eprintln!("live CPU samples {}; exceptions {}", s["samples"], exceptions_of(&s));
    assert!(w.is_alive(), "the workload outlives the recording");
    assert!(err.contains("saved the raw inputs"), "{err}");
    assert!(s["samples"].as_u64().is_some_and(|n| n > 0), "{s}");
    for f in ["records.clrraw", &format!("{pid}.nettrace")] {
        assert!(raw.join(f).is_file(), "{f} saved: {:?}", std::fs::read_dir(&raw).unwrap().flatten().map(|e| e.file_name()).collect::<Vec<_>>());
    }
    // Twice: the same bytes.
    let mut replays = Vec::new();
    for n in ["one", "two"] {
        let prefix = dir.join(n);
        let out = run(Command::new(CLRPROBE).args(["report", "--replay"]).arg(&raw).arg("-o").arg(&prefix));
        eprintln!("{out}");
        assert!(out.contains("runtime events") && !out.contains("did not end cleanly"), "{out}");
        replays.push(files(&prefix));
    }
    for k in ["cpu.pb.gz", "alloc.pb.gz", "exceptions.pb.gz", "contention.pb.gz", "offcpu.pb.gz", "events.json"] {
        assert!(replays[0].contains_key(k), "replay wrote {k}: {:?}", replays[0].keys().collect::<Vec<_>>());
    }
    assert_eq!(replays[0].keys().collect::<Vec<_>>(), replays[1].keys().collect::<Vec<_>>());
    for (file, bytes) in &replays[0] {
        assert!(bytes == &replays[1][file], "{file}: the two replays differ");
    }
    // The replay's top CPU frames are the live recording's (the workload's spin loop among
    // them); its reports count the same (the workload's one exception type, its lock's waits).
    let live_top = top(CLRPROBE, &with_suffix(&live, "cpu.pb.gz"), Some("cpu"), 5);
    let replay_top = top(CLRPROBE, &dir.join("one.cpu.pb.gz"), Some("cpu"), 5);
    eprintln!("live   {live_top:?}\nreplay {replay_top:?}");
    assert!(live_top.iter().any(|(n, _)| n.contains("Mixed::Spin")), "{live_top:?}");
    let names = |t: &[(String, i64)]| t.iter().take(3).map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&live_top), names(&replay_top));
    let (l, r) = (events_json(&live)["reports"][0][1].clone(), events_json(&dir.join("one"))["reports"][0][1].clone());
    let by_type = l["exceptions_by_type"].as_array().unwrap();
    assert!(by_type.len() == 1 && by_type[0][0] == "System.InvalidOperationException" && by_type[0][1].as_u64() > Some(0), "{l}");
    assert!(l["contention"]["waits"].as_u64().is_some_and(|n| n > 0), "{l}");
    assert_eq!(l["exceptions_by_type"], r["exceptions_by_type"]);
    assert_eq!(l["contention"]["waits"], r["contention"]["waits"]);
    assert_eq!(l["allocations"], r["allocations"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Rounds of the Http workload (each sends /fast, /slow and /missing concurrently).
const ROUNDS: u32 = 10;
const SLOW_MS: u32 = 300;

fn client_tally(w: &Running) -> BTreeMap<(String, i32), u64> {
    w.wait_for_line("sent ", Duration::from_secs(60)).expect("the client finished its requests");
    assert!(w.output().iter().any(|l| l == "session=on"), "the requests ran before the session was on: {:?}", w.output());
    w.output()
        .iter()
        .filter_map(|l| l.strip_prefix("count "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            ((f[0].to_string(), f[1].parse().unwrap()), f[2].parse().unwrap())
        })
        .collect()
}

fn tally_of(lines: &[HttpLine]) -> BTreeMap<(String, i32), u64> {
    let mut t = BTreeMap::new();
    for l in lines {
        *t.entry((l.path.clone(), l.status.unwrap_or(-1))).or_insert(0) += 1;
    }
    t
}

#[test]
fn http_on_the_pipeline_lists_every_request_of_the_clients_tally() {
    require_root();
    let mut w = Workload::new("Http", Runtime::Net8).arg(8).arg(ROUNDS).arg(SLOW_MS).arg(30_000).arg("localhost").start().unwrap();
    let dir = out_dir("pipekinds", "http");
    let pipe = dir.join("pipe");
    let (s, _) = run_json(record(&["--http", "--cpu", "--offcpu", "--json", "--quiet", "-d", "30s", "-p", &w.pid.to_string(), "-o"]).arg(&pipe));
    let tally = client_tally(&w);
    w.wait(Duration::from_secs(10));
    let lines: Vec<HttpLine> = read_jsonl(&with_suffix(&pipe, "http.jsonl")).unwrap().into_iter().filter(|l| l.pid == w.pid).collect();
    eprintln!("{} requests {:?}", lines.len(), tally_of(&lines));
    // The client's own count (paths without their query): ROUNDS of each, 200 but /missing's 404.
    let expected: BTreeMap<(String, i32), u64> = [("/fast", 200), ("/missing", 404), ("/slow", 200)].iter().map(|(p, st)| ((p.to_string(), *st), u64::from(ROUNDS))).collect();
    assert_eq!(tally, expected, "the client's tally");
    assert_eq!(tally_of(&lines), tally, "the requests by (path, status) vs the client's own count");
    assert_eq!(lines.len() as u32, 3 * ROUNDS);
    for l in &lines {
        assert!(l.complete && l.error.is_none(), "{l:?}");
        assert!(l.stack.iter().any(|f| f.contains("Http::Get") || f.contains("Http.Get")), "RequestStart's stack named: {:?}", l.stack);
        if l.path == "/slow" {
            assert!(l.duration_ms >= f64::from(SLOW_MS) && l.phases.wait >= f64::from(SLOW_MS), "{l:?}");
        }
    }
    // The five slowest say what their threads did meanwhile, off CPU time included.
    let mut by_time: Vec<&HttpLine> = lines.iter().collect();
    by_time.sort_by(|a, b| b.duration_ms.total_cmp(&a.duration_ms));
    assert!(by_time[..5].iter().all(|l| l.meanwhile.is_some()) && by_time[5..].iter().all(|l| l.meanwhile.is_none()));
    for l in &by_time[..5] {
        let m = l.meanwhile.as_ref().unwrap();
        assert!(m.offcpu_ms.is_some_and(|o| o > 0.0) && !m.offcpu_top.is_empty(), "{m:?}");
    }
    // The summary's table per host and path: each path ROUNDS times, /missing's all errors.
    let report = s["http"].as_array().unwrap().iter().find(|r| r["pid"] == w.pid).cloned().expect("an HTTP report");
    let mut rows: Vec<(String, u64, u64)> = report["by_host_path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["path"].as_str().unwrap().to_string(), r["count"].as_u64().unwrap(), r["errors"].as_u64().unwrap()))
        .collect();
    rows.sort();
    let n = u64::from(ROUNDS);
    let want = vec![("/fast".to_string(), n, 0), ("/missing".to_string(), n, n), ("/slow".to_string(), n, 0)];
    assert_eq!(rows, want, "{report}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn providers_on_the_pipeline_count_the_eventsource_and_sum_its_fields() {
    require_root();
    // 20 events Work(name "item-i", count i, bytes i*1000, ratio i/4) 6 s after `ready`.
    let mut w = Workload::new("Telemetry", Runtime::Net8).arg(9).arg(20).arg(6000).start().unwrap();
    let dir = out_dir("pipekinds", "providers");
    let (s, _) = run_json(
        record(&["--providers", "Clrprobe-Telemetry", "--contention", "--json", "--quiet", "-d", "30s", "-p", &w.pid.to_string(), "-o"]).arg(dir.join("pipe")),
    );
    w.wait(Duration::from_secs(10));
    assert!(w.output().iter().any(|l| l == "sent 20"));
    let g = &s["http"].as_array().unwrap().iter().find(|r| r["pid"] == w.pid).expect("a report")["generic"];
    let work = g["events"].as_array().unwrap().iter().find(|e| e["event"] == "Work").cloned().expect("Work events");
    eprintln!("{work}");
    assert_eq!((work["provider"].as_str(), work["count"].as_u64()), (Some("Clrprobe-Telemetry"), Some(20)));
    let field = |n: &str| work["fields"].as_array().unwrap().iter().find(|f| f[0] == n).unwrap_or_else(|| panic!("field {n}: {work}"))[1].clone();
    assert_eq!(field("count")["sum"].as_f64(), Some(190.0));
    assert_eq!((field("count")["min"].as_f64(), field("count")["max"].as_f64()), (Some(0.0), Some(19.0)));
    assert_eq!(field("bytes")["sum"].as_f64(), Some(190_000.0));
    assert_eq!((field("bytes")["max"].as_f64(), field("bytes")["p50"].as_f64()), (Some(19_000.0), Some(9_000.0)));
    assert_eq!(field("ratio")["sum"].as_f64(), Some(47.5));
    assert_eq!(field("name")["top_values"].as_array().unwrap().len(), 5);
    assert!(!dir.join("pipe.http.jsonl").exists(), "no HTTP file without --http");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `record KINDS -p PID -d 6s --json --format pprof -o DIR/pipe`: its summary.
fn record_kinds(pid: u32, kinds: &[&str], dir: &Path) -> Value {
    let mut args: Vec<String> = kinds.iter().map(|s| s.to_string()).collect();
    args.extend(["--json", "--quiet", "--format", "pprof", "-d", "6s", "-p", &pid.to_string(), "-o", &dir.join("pipe").display().to_string()].map(String::from));
    run_json(&mut record(&args.iter().map(String::as_str).collect::<Vec<_>>())).0
}

#[test]
fn event_kinds_without_bpf_and_cxa_throw_on_the_pipeline_count_exactly() {
    require_root();
    // 300 + 120 exceptions 3 s after "ready", while the recording runs.
    let mut w = Workload::new("Exceptions", Runtime::Net8).arg(9).arg(300).arg(120).arg(3000).start().unwrap();
    let dir = out_dir("pipekinds", "nobpf");
    let p = record_kinds(w.pid, &["--exceptions", "--contention", "--cxa-throw"], &dir);
    let line = w.wait_for_line("thrown", Duration::from_secs(20)).expect("the workload threw");
    assert_eq!(line, "thrown InvalidOperationException=300 ArgumentException=120 FormatException=0");
    let exact = serde_json::json!([["System.InvalidOperationException", 300], ["System.ArgumentException", 120]]);
    assert_eq!(exceptions_of(&p), exact, "{}", p["events"]);
    // The kernel's count of C++ throws (the runtime throws each managed exception through
    // __cxa_throw once), priced before placed.
    let pid = w.pid.to_string();
    eprintln!("__cxa_throw: {}; uprobe {} ns", p["cxa_throws"], p["uprobe_cost_ns"]);
    assert_eq!(p["cxa_throw_probed"], serde_json::json!([w.pid]));
    assert_eq!(p["cxa_throws"][&pid].as_u64(), Some(420));
    assert!(p["uprobe_cost_ns"].as_u64().is_some_and(|c| (200..1_000_000).contains(&c)), "{}", p["uprobe_cost_ns"]);
    assert!(p["sampler"].is_null(), "no CPU sampler");
    let _ = w.wait(Duration::from_secs(10));

    // Allocations and contention only: no BPF at all (no per-thread times from sched_switch);
    // the workload's allocated types all present.
    let mut w = Workload::new("AllocTypes", Runtime::Net8).arg(8).arg(1500).start().unwrap();
    let p = record_kinds(w.pid, &["--alloc", "--contention"], &dir);
    eprintln!("alloc only: thread_cpu {} allocations {}", p["thread_cpu"], p["events"][0][1]["allocations"]);
    assert!(p["sampler"].is_null() && p["offcpu"] == false, "{p}");
    assert_eq!(p["thread_cpu"], serde_json::json!([]), "sched_switch counted without BPF?");
    let allocations = p["events"][0][1]["allocations"].to_string();
    let alloc = top(CLRPROBE, &dir.join("pipe.alloc.pb.gz"), Some("alloc-bytes"), 20);
    eprintln!("{alloc:?}");
    assert!(alloc.iter().any(|(n, _)| n.contains("System.Double[]")), "{alloc:?}");
    for t in ["System.Double[]", "System.Int64[]"] {
        assert!(allocations.contains(t), "{t} in the allocations report: {allocations}");
    }
    let _ = w.wait(Duration::from_secs(10));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_launched_command_that_is_not_dotnet_is_recorded_on_the_pipeline() {
    require_root();
    // `sh -c` (not .NET) runs a CPU loop, then a .NET program as its child (found and set
    // up): 200 + 80 exceptions 4 s after "ready".
    let w = Workload::new("Exceptions", Runtime::Net8).arg(5).arg(200).arg(80).arg(4000);
    let inner = w.command().unwrap();
    let program = inner.get_program().to_str().unwrap().to_string();
    let args: Vec<String> = inner.get_args().map(|a| a.to_str().unwrap().to_string()).collect();
    let env: String = inner.get_envs().filter_map(|(k, v)| Some(format!("{}={} ", k.to_str()?, v?.to_str()?))).collect();
    let script = format!(
        "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; cd {}; {env}{program} {} >/dev/null; true",
        inner.get_current_dir().unwrap().display(),
        args.join(" ")
    );
    let dir = out_dir("pipekinds", "launch");
    let prefix = dir.join("pipe");
    let (s, _) = run_json(&mut record(&["--json", "--quiet", "--format", "pprof", "-d", "40s", "-o", prefix.to_str().unwrap(), "--", "sh", "-c", &script]));
    let recorded = s["recorded"].as_array().unwrap();
    eprintln!("recorded {}", s["recorded"]);
    let sh = recorded.iter().find(|r| r["parent"].is_null()).expect("the launched sh");
    assert_eq!(sh["dotnet"], false, "{sh}");
    let kids: Vec<&Value> = recorded.iter().filter(|r| r["dotnet"] == true && !r["parent"].is_null()).collect();
    assert_eq!(kids.len(), 1, "the dotnet child of sh: {}", s["recorded"]);
    assert_eq!(kids[0]["parent"], sh["pid"], "{}", s["recorded"]);
    assert_eq!(exceptions_of(&s), serde_json::json!([["System.InvalidOperationException", 200], ["System.ArgumentException", 80]]), "{}", s["events"]);
    // The shell's own loop is sampled too.
    let profile = clrprobe::report::load(std::slice::from_ref(&prefix)).unwrap();
    let col = profile.sample_type_index("cpu").expect("cpu kind");
    let sh_pid = sh["pid"].as_u64().unwrap() as u32;
    let samples: i64 = profile.samples().filter(|x| profile.labels(x.labels).unwrap().pid == Some(sh_pid)).map(|x| x.values[col]).sum();
    eprintln!("the launched shell's CPU samples: {samples}");
    assert!(samples > 0, "the launched shell's CPU samples: {samples}");
    std::fs::remove_dir_all(&dir).unwrap();
}
