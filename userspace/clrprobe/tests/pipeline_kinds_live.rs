//! Live: the recordings `record` used to leave on `record::run`, on the streaming pipeline
//! (`record --pipeline`, which refuses what it does not do), each beside `record::run`
//! (`CLRPROBE_RECORD_PATH=run`) at the same time: `--save-raw` (replayed twice to the same
//! bytes, with the live names), `--http` and `--providers` (every request of the client's
//! tally; the EventSource's events counted exactly), event kinds without BPF, `--cxa-throw`,
//! and a launched command that is not `dotnet`.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use clrprobe::http::{HttpLine, read_jsonl};
use clrprobe_tests::{Running, Runtime, Workload, require_root};
use serde_json::Value;

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("clrprobe-pipekinds-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn clrprobe() -> Command {
    Command::new(env!("CARGO_BIN_EXE_clrprobe"))
}

/// `record ARGS` on the pipeline (`--pipeline`: refused if the pipeline does not do it).
fn on_pipeline(args: &[&str]) -> Command {
    let mut c = clrprobe();
    c.arg("record").arg("--pipeline").args(args);
    c
}

/// `record ARGS` on `record::run`.
fn on_run(args: &[&str]) -> Command {
    let mut c = clrprobe();
    c.env("CLRPROBE_RECORD_PATH", "run").arg("record").args(args);
    c
}

fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run clrprobe")
}

/// Waits for `c`; (stdout, stderr), failing the test if it failed.
fn finish(c: Child, what: &str) -> (String, String) {
    let out = c.wait_with_output().unwrap();
    let (o, e) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "{what} failed: {o}{e}");
    (o, e)
}

fn run(mut c: Command) -> String {
    let out = c.output().expect("run clrprobe");
    let (o, e) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "{c:?} failed: {o}{e}");
    o + &e
}

fn json(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("summary JSON: {e}: {stdout}"))
}

/// Files `PREFIX.*`, by what follows the prefix.
fn files(prefix: &Path) -> BTreeMap<String, Vec<u8>> {
    let stem = format!("{}.", prefix.file_name().unwrap().to_string_lossy());
    std::fs::read_dir(prefix.parent().unwrap())
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix(&stem)?.to_string();
            Some((rest, std::fs::read(e.path()).unwrap()))
        })
        .collect()
}

/// Top self frames of `kind` as `report --json` lists them: (name, self value).
fn top(file: &Path, kind: &str) -> Vec<(String, i64)> {
    let mut c = clrprobe();
    c.args(["report", "--json", "--top", "5"]).arg(file);
    let json = run(c);
    let json = &json[..json.rfind('}').unwrap() + 1];
    let v: Value = serde_json::from_str(json).unwrap();
    let k = v["kinds"].as_array().unwrap().iter().find(|k| k["kind"] == kind).unwrap_or_else(|| panic!("no {kind} in {}", file.display()));
    k["top_self"].as_array().unwrap().iter().map(|t| (t[0].as_str().unwrap().to_owned(), t[2].as_i64().unwrap())).collect()
}

fn events_json(prefix: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(format!("{}.events.json", prefix.display())).unwrap()).unwrap()
}

#[test]
fn save_raw_on_the_pipeline_replays_to_the_same_bytes_twice_with_the_live_names() {
    require_root();
    let mut w = Workload::new("Mixed", Runtime::Net8).arg(30.0).start().unwrap();
    let dir = out_dir("raw");
    let pid = w.pid.to_string();
    let (raw, raw_run, live, live_run) = (dir.join("raw"), dir.join("raw-run"), dir.join("live"), dir.join("live-run"));
    let args = |out: &Path, raw: &Path| -> Vec<String> {
        ["--quiet", "--json", "-p", &pid, "-d", "4s", "-F", "499", "--format", "pprof", "-o"]
            .iter()
            .map(|s| s.to_string())
            .chain([out.display().to_string(), "--save-raw".into(), raw.display().to_string()])
            .collect()
    };
    let (a, b) = (args(&live_run, &raw_run), args(&live, &raw));
    let legacy = spawn(on_run(&a.iter().map(String::as_str).collect::<Vec<_>>()));
    let (out, err) = finish(spawn(on_pipeline(&b.iter().map(String::as_str).collect::<Vec<_>>())), "record --pipeline --save-raw");
    let (out_run, _) = finish(legacy, "record --save-raw on record::run");
    let (sp, sr) = (json(&out), json(&out_run));
    eprintln!(
        "live CPU samples pipeline {} record::run {}; exceptions {} / {}",
        sp["samples"],
        sr["samples"],
        exceptions_of(&sp),
        exceptions_of(&sr)
    );
    assert!(w.is_alive(), "the workload outlives the recordings");
    assert!(err.contains("saved the raw inputs"), "{err}");
    for f in ["records.clrraw", &format!("{pid}.nettrace")] {
        assert!(raw.join(f).is_file(), "{f} saved: {:?}", std::fs::read_dir(&raw).unwrap().flatten().map(|e| e.file_name()).collect::<Vec<_>>());
    }
    // Twice: the same bytes.
    let mut replays = Vec::new();
    for n in ["one", "two"] {
        let prefix = dir.join(n);
        let mut c = clrprobe();
        c.args(["report", "--replay"]).arg(&raw).arg("-o").arg(&prefix);
        let out = run(c);
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
    // record::run's saved inputs replay into the same kinds.
    let mut c = clrprobe();
    c.args(["report", "--replay"]).arg(&raw_run).arg("-o").arg(dir.join("run"));
    eprintln!("record::run's: {}", run(c));
    assert_eq!(files(&dir.join("run")).keys().collect::<Vec<_>>(), replays[0].keys().collect::<Vec<_>>());
    // The replay's top CPU frames are the live recording's; its reports count the same.
    let live_top = top(&PathBuf::from(format!("{}.cpu.pb.gz", live.display())), "cpu");
    let replay_top = top(&dir.join("one.cpu.pb.gz"), "cpu");
    eprintln!("live   {live_top:?}\nreplay {replay_top:?}");
    assert!(live_top.iter().any(|(n, _)| n.contains("Mixed::Spin")), "{live_top:?}");
    let names = |t: &[(String, i64)]| t.iter().take(3).map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&live_top), names(&replay_top));
    let (l, r) = (events_json(&live)["reports"][0][1].clone(), events_json(&dir.join("one"))["reports"][0][1].clone());
    assert!(l["exceptions_by_type"].as_array().is_some_and(|a| !a.is_empty()), "{l}");
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
fn http_on_the_pipeline_lists_every_request_as_record_run_does() {
    require_root();
    // Two clients at once, one recorded on each path (the first session on a client starts
    // its requests: two sessions on one would not both see them all).
    let start = || Workload::new("Http", Runtime::Net8).arg(8).arg(ROUNDS).arg(SLOW_MS).arg(30_000).arg("localhost").start().unwrap();
    let (mut wp, mut wr) = (start(), start());
    let dir = out_dir("http");
    let (pipe, legacy) = (dir.join("pipe"), dir.join("legacy"));
    let args = |pid: u32, out: &Path| -> Vec<String> {
        ["--http", "--cpu", "--offcpu", "--json", "--quiet", "-d", "30s", "-p", &pid.to_string(), "-o", &out.display().to_string()].iter().map(|s| s.to_string()).collect()
    };
    let (a, b) = (args(wr.pid, &legacy), args(wp.pid, &pipe));
    let legacy_run = spawn(on_run(&a.iter().map(String::as_str).collect::<Vec<_>>()));
    let (out, _) = finish(spawn(on_pipeline(&b.iter().map(String::as_str).collect::<Vec<_>>())), "record --pipeline --http");
    let (out_run, _) = finish(legacy_run, "record --http on record::run");
    let (tp, tr) = (client_tally(&wp), client_tally(&wr));
    wp.wait(Duration::from_secs(10));
    wr.wait(Duration::from_secs(10));
    let lines = |p: &Path, pid: u32| -> Vec<HttpLine> {
        read_jsonl(&PathBuf::from(format!("{}.http.jsonl", p.display()))).unwrap().into_iter().filter(|l| l.pid == pid).collect()
    };
    let (lp, lr) = (lines(&pipe, wp.pid), lines(&legacy, wr.pid));
    eprintln!("pipeline {} requests {:?}\nrecord::run {} requests {:?}", lp.len(), tally_of(&lp), lr.len(), tally_of(&lr));
    assert_eq!(tally_of(&lp), tp, "the pipeline's requests by (path, status) vs its client's own count");
    assert_eq!(tally_of(&lr), tr, "record::run's vs its client's");
    assert_eq!(lp.len(), lr.len());
    assert_eq!(lp.len() as u32, 3 * ROUNDS);
    for l in &lp {
        assert!(l.complete && l.error.is_none(), "{l:?}");
        assert!(l.stack.iter().any(|f| f.contains("Http::Get") || f.contains("Http.Get")), "RequestStart's stack named: {:?}", l.stack);
        if l.path == "/slow" {
            assert!(l.duration_ms >= f64::from(SLOW_MS) && l.phases.wait >= f64::from(SLOW_MS), "{l:?}");
        }
    }
    // The five slowest say what their threads did meanwhile, off CPU time included.
    let mut by_time: Vec<&HttpLine> = lp.iter().collect();
    by_time.sort_by(|a, b| b.duration_ms.total_cmp(&a.duration_ms));
    assert!(by_time[..5].iter().all(|l| l.meanwhile.is_some()) && by_time[5..].iter().all(|l| l.meanwhile.is_none()));
    for l in &by_time[..5] {
        let m = l.meanwhile.as_ref().unwrap();
        assert!(m.offcpu_ms.is_some_and(|o| o > 0.0) && !m.offcpu_top.is_empty(), "{m:?}");
    }
    // The summaries' tables per host and path agree.
    let rows = |out: &str, pid: u32| -> Vec<(String, u64, u64)> {
        let s = json(out);
        let r = s["http"].as_array().unwrap().iter().find(|r| r["pid"] == pid).cloned().expect("an HTTP report");
        let mut v: Vec<(String, u64, u64)> = r["by_host_path"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["path"].as_str().unwrap().to_string(), r["count"].as_u64().unwrap(), r["errors"].as_u64().unwrap()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(rows(&out, wp.pid), rows(&out_run, wr.pid));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn providers_on_the_pipeline_count_the_eventsource_as_record_run_does() {
    require_root();
    // 20 events Work(count i, bytes i*1000) 6 s after `ready`: both sessions are on by then.
    let mut w = Workload::new("Telemetry", Runtime::Net8).arg(9).arg(20).arg(6000).start().unwrap();
    let dir = out_dir("providers");
    let pid = w.pid.to_string();
    let args = |out: &Path| -> Vec<String> {
        ["--providers", "Clrprobe-Telemetry", "--contention", "--json", "--quiet", "-d", "30s", "-p", &pid, "-o", &out.display().to_string()].iter().map(|s| s.to_string()).collect()
    };
    let (a, b) = (args(&dir.join("legacy")), args(&dir.join("pipe")));
    let legacy = spawn(on_run(&a.iter().map(String::as_str).collect::<Vec<_>>()));
    let (out, _) = finish(spawn(on_pipeline(&b.iter().map(String::as_str).collect::<Vec<_>>())), "record --pipeline --providers");
    let (out_run, _) = finish(legacy, "record --providers on record::run");
    w.wait(Duration::from_secs(10));
    assert!(w.output().iter().any(|l| l == "sent 20"));
    let work = |out: &str| -> Value {
        let s = json(out);
        let g = &s["http"].as_array().unwrap().iter().find(|r| r["pid"] == w.pid).expect("a report")["generic"];
        g["events"].as_array().unwrap().iter().find(|e| e["event"] == "Work").cloned().expect("Work events")
    };
    let (p, r) = (work(&out), work(&out_run));
    eprintln!("pipeline {p}\nrecord::run {r}");
    assert_eq!((p["provider"].as_str(), p["count"].as_u64()), (Some("Clrprobe-Telemetry"), Some(20)));
    assert_eq!(p["fields"], r["fields"], "the same field summaries");
    assert!(!dir.join("pipe.http.jsonl").exists(), "no HTTP file without --http");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `record ARGS -p PID -d 6s --json` on both paths at once: (pipeline's summary, record::run's).
fn both(pid: u32, kinds: &[&str], dir: &Path) -> (Value, Value) {
    let args = |out: &Path| -> Vec<String> {
        let mut v: Vec<String> = kinds.iter().map(|s| s.to_string()).collect();
        v.extend(["--json", "--quiet", "--format", "pprof", "-d", "6s", "-p", &pid.to_string(), "-o", &out.display().to_string()].map(String::from));
        v
    };
    let (a, b) = (args(&dir.join("legacy")), args(&dir.join("pipe")));
    let legacy = spawn(on_run(&a.iter().map(String::as_str).collect::<Vec<_>>()));
    let (out, _) = finish(spawn(on_pipeline(&b.iter().map(String::as_str).collect::<Vec<_>>())), "record --pipeline");
    let (out_run, _) = finish(legacy, "record on record::run");
    (json(&out), json(&out_run))
}

fn exceptions_of(s: &Value) -> Value {
    s["events"][0][1]["exceptions_by_type"].clone()
}

#[test]
fn event_kinds_without_bpf_and_cxa_throw_on_the_pipeline_count_as_record_run_does() {
    require_root();
    // 300 + 120 exceptions 3 s after "ready", while both recordings run.
    let mut w = Workload::new("Exceptions", Runtime::Net8).arg(9).arg(300).arg(120).arg(3000).start().unwrap();
    let dir = out_dir("nobpf");
    let (p, r) = both(w.pid, &["--exceptions", "--contention", "--cxa-throw"], &dir);
    w.wait_for_line("thrown", Duration::from_secs(20)).expect("the workload threw");
    let exact = serde_json::json!([["System.InvalidOperationException", 300], ["System.ArgumentException", 120]]);
    assert_eq!(exceptions_of(&p), exact, "{}", p["events"]);
    assert_eq!(exceptions_of(&r), exact, "{}", r["events"]);
    // The kernel's count of C++ throws: the same on both, priced before placed.
    let pid = w.pid.to_string();
    eprintln!("__cxa_throw: pipeline {} record::run {}; uprobe {} / {} ns", p["cxa_throws"], r["cxa_throws"], p["uprobe_cost_ns"], r["uprobe_cost_ns"]);
    assert_eq!(p["cxa_throw_probed"], serde_json::json!([w.pid]));
    assert_eq!(p["cxa_throws"][&pid].as_u64(), Some(420));
    assert_eq!(p["cxa_throws"][&pid], r["cxa_throws"][&pid]);
    assert!(p["uprobe_cost_ns"].as_u64().is_some_and(|c| (200..1_000_000).contains(&c)), "{}", p["uprobe_cost_ns"]);
    assert!(p["sampler"].is_null() && r["sampler"].is_null(), "no CPU sampler");
    let _ = w.wait(Duration::from_secs(10));

    // Allocations and contention only: no BPF at all, on either path (no per-thread times
    // from sched_switch).
    let mut w = Workload::new("AllocTypes", Runtime::Net8).arg(8).arg(1500).start().unwrap();
    let (p, r) = both(w.pid, &["--alloc", "--contention"], &dir);
    eprintln!("alloc only: pipeline thread_cpu {} record::run {}", p["thread_cpu"], r["thread_cpu"]);
    for s in [&p, &r] {
        assert!(s["sampler"].is_null() && s["offcpu"] == false, "{s}");
        assert_eq!(s["thread_cpu"], serde_json::json!([]), "sched_switch counted without BPF?");
        assert!(s["events"][0][1]["allocations"].as_array().is_some_and(|a| !a.is_empty()), "{}", s["events"]);
    }
    let alloc = top(&dir.join("pipe.alloc.pb.gz"), "alloc-bytes");
    assert!(alloc.iter().any(|(n, _)| n.contains("System.Double[]")), "{alloc:?}");
    let _ = w.wait(Duration::from_secs(10));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_launched_command_that_is_not_dotnet_is_recorded_on_the_pipeline() {
    require_root();
    // `sh -c` (not .NET) runs a CPU loop, then a .NET program as its child (found and set
    // up): 200 + 80 exceptions 4 s after "ready". Plain `record` (no --pipeline) takes the
    // pipeline for it; a second launch beside it on `record::run`.
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
    let dir = out_dir("launch");
    let (prefix, legacy) = (dir.join("pipe"), dir.join("legacy"));
    let launch = |out: &Path| -> Vec<String> {
        ["--json", "--quiet", "--format", "pprof", "-d", "40s", "-o", out.to_str().unwrap(), "--", "sh", "-c", &script].map(String::from).to_vec()
    };
    let (a, b) = (launch(&legacy), launch(&prefix));
    let legacy_run = spawn(on_run(&a.iter().map(String::as_str).collect::<Vec<_>>()));
    let mut c = clrprobe();
    c.arg("record").args(&b).env("RUST_LOG", "info");
    let (out, err) = finish(spawn(c), "record -- sh -c");
    let (out_run, _) = finish(legacy_run, "record -- sh -c on record::run");
    assert!(err.contains("record: on the pipeline"), "plain record takes the pipeline: {err}");
    let check = |out: &str, prefix: &Path, what: &str| -> i64 {
        let s = json(out);
        let recorded = s["recorded"].as_array().unwrap();
        eprintln!("{what}: recorded {}", s["recorded"]);
        let sh = recorded.iter().find(|r| r["parent"].is_null()).expect("the launched sh");
        assert_eq!(sh["dotnet"], false, "{what}: {sh}");
        let kids: Vec<&Value> = recorded.iter().filter(|r| r["dotnet"] == true && !r["parent"].is_null()).collect();
        assert_eq!(kids.len(), 1, "{what}: the dotnet child of sh: {}", s["recorded"]);
        assert_eq!(
            exceptions_of(&s),
            serde_json::json!([["System.InvalidOperationException", 200], ["System.ArgumentException", 80]]),
            "{what}: {}",
            s["events"]
        );
        // The shell's own loop is sampled too.
        let profile = clrprobe::report::load(&[prefix.to_path_buf()]).unwrap();
        let col = profile.sample_type_index("cpu").expect("cpu kind");
        let sh_pid = sh["pid"].as_u64().unwrap() as u32;
        profile.samples().filter(|x| profile.labels(x.labels).unwrap().pid == Some(sh_pid)).map(|x| x.values[col]).sum()
    };
    let (sp, sr) = (check(&out, &prefix, "pipeline"), check(&out_run, &legacy, "record::run"));
    eprintln!("the launched shell's CPU samples: pipeline {sp}, record::run {sr}");
    assert!(sp > 0 && sr > 0, "the launched shell's CPU samples: pipeline {sp}, record::run {sr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
