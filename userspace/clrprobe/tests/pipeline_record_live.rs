//! Live: `record` (a front end of the streaming pipeline: host source → aggregator → files
//! sink) on real .NET 8 processes, checked against what the workloads are known to do: the
//! runtime's exceptions counted exactly in PREFIX.events.json and in the exceptions profile;
//! every kind written for the Mixed workload, each with the workload's own frames and types
//! (the spin loop sampled on CPU, its node type allocated, its exception type thrown, its lock
//! contended by the waiter, the holder off CPU); a .NET child of a named process followed.
use std::{process::Command, time::Duration};

use clrprobe_profile::Profile;
use clrprobe_tests::{
    Runtime, Workload,
    outputs::{events_json, kinds_written, out_dir, run, run_json, top, with_suffix},
    require_root,
};
use serde_json::Value;

const CLRPROBE: &str = env!("CARGO_BIN_EXE_clrprobe");

fn clrprobe() -> Command {
    Command::new(CLRPROBE)
}

/// The `kind` value of the samples whose stack has a frame whose name contains `needle`.
fn with_frame(p: &Profile, kind: &str, needle: &str) -> i64 {
    let col = p.sample_type_index(kind).unwrap_or_else(|| panic!("no {kind} kind"));
    p.samples()
        .filter(|s| p.stack(s.stack).unwrap().iter().any(|&f| p.frame(f).unwrap().name.contains(needle)))
        .map(|s| s.values[col])
        .sum()
}

#[test]
fn record_on_the_pipeline_counts_the_runtimes_exceptions_exactly() {
    require_root();
    // 300 + 120 exceptions thrown 2 s after "ready", while the recording runs.
    let mut w = Workload::new("Exceptions", Runtime::Net8).arg(8).arg(300).arg(120).arg(2000).start().unwrap();
    let dir = out_dir("pipeline", "exc");
    let prefix = dir.join("pipe");
    let out = run(clrprobe().args(["record", "--quiet", "-p", &w.pid.to_string(), "-d", "5s", "--format", "pprof", "-o"]).arg(&prefix));
    eprintln!("{out}");
    let line = w.wait_for_line("thrown", Duration::from_secs(10)).expect("the workload threw");
    assert_eq!(line, "thrown InvalidOperationException=300 ArgumentException=120 FormatException=0");
    let v = events_json(&prefix);
    let report = &v["reports"][0][1];
    assert_eq!(
        report["exceptions_by_type"],
        serde_json::json!([["System.InvalidOperationException", 300], ["System.ArgumentException", 120]]),
        "{report}"
    );
    // The exceptions profile: every exception at its throw site, the managed frames named.
    let exc = top(CLRPROBE, &with_suffix(&prefix, "exceptions.pb.gz"), Some("exceptions"), 10);
    assert_eq!(exc.iter().map(|t| t.1).sum::<i64>(), 420, "{exc:?}");
    assert!(exc.iter().any(|(n, _)| n.contains("System.InvalidOperationException")), "{exc:?}");
    let _ = w.wait(Duration::from_secs(10));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn record_on_the_pipeline_writes_every_kind_with_the_workloads_own_frames_and_types() {
    require_root();
    // Mixed: the main thread spins in Mixed::Spin allocating MixedNode objects and throwing an
    // InvalidOperationException every 500th round; "Holder" holds a lock 20 ms at a time in
    // Thread.Sleep while "Waiter" contends for it.
    let mut w = Workload::new("Mixed", Runtime::Net8).arg(20.0).start().unwrap();
    let dir = out_dir("pipeline", "mixed");
    let pipe = dir.join("pipe");
    let (summary, _) = run_json(clrprobe().args(["record", "--quiet", "--json", "-p", &w.pid.to_string(), "-d", "4s", "--format", "pprof", "-o"]).arg(&pipe));
    assert!(w.is_alive(), "the workload outlives the recording");
    let written = kinds_written(&pipe);
    eprintln!("written {written:?}");
    for k in ["cpu.pb.gz", "alloc.pb.gz", "exceptions.pb.gz", "contention.pb.gz", "offcpu.pb.gz", "events.json"] {
        assert!(written.contains(&k.to_string()), "record wrote {k}: {written:?}");
    }
    // The summary: the one process, .NET, on the BPF sampler with off-CPU time.
    let recorded = summary["recorded"].as_array().unwrap();
    assert_eq!(recorded.len(), 1, "{}", summary["recorded"]);
    assert_eq!((recorded[0]["pid"].as_u64(), &recorded[0]["dotnet"]), (Some(u64::from(w.pid)), &Value::Bool(true)));
    assert!(summary["samples"].as_u64().is_some_and(|s| s > 0) && summary["offcpu"] == true, "{summary}");
    let cpu = top(CLRPROBE, &with_suffix(&pipe, "cpu.pb.gz"), Some("cpu"), 10);
    assert!(cpu.iter().any(|(n, _)| n.contains("Mixed::Spin")), "managed frames named: {cpu:?}");
    let alloc = top(CLRPROBE, &with_suffix(&pipe, "alloc.pb.gz"), Some("alloc-bytes"), 10);
    assert!(alloc.iter().any(|(n, _)| n.contains("MixedNode")), "the workload's type allocated: {alloc:?}");
    let exc = top(CLRPROBE, &with_suffix(&pipe, "exceptions.pb.gz"), Some("exceptions"), 10);
    assert!(!exc.is_empty() && exc.iter().all(|(n, _)| n.contains("System.InvalidOperationException")), "{exc:?}");
    // The lock site (the waiter's `lock (Gate)`) and the holder's sleep, by their frames.
    let p = clrprobe::report::load(std::slice::from_ref(&pipe)).unwrap();
    let (waits, slept) = (with_frame(&p, "contention-count", "Mixed::Wait"), with_frame(&p, "off-cpu", "Mixed::Hold"));
    eprintln!("contentions in Mixed::Wait {waits}, off-CPU ns in Mixed::Hold {slept}");
    assert!(waits > 0, "the waiter's contentions at its lock site");
    assert!(slept > 0, "the holder off CPU");
    let report = &events_json(&pipe)["reports"][0][1];
    let by_type = report["exceptions_by_type"].as_array().unwrap();
    assert!(by_type.len() == 1 && by_type[0][0] == "System.InvalidOperationException" && by_type[0][1].as_u64() > Some(0), "{report}");
    assert!(report["contention"]["waits"].as_u64().is_some_and(|n| n > 0), "{report}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn record_on_the_pipeline_follows_a_dotnet_child_of_the_named_process() {
    require_root();
    // A shell named with -p; the .NET workload is its child, started after the recording began
    // (found by the host source, then set up): 200 + 80 exceptions thrown 4 s after "ready".
    let w = Workload::new("Exceptions", Runtime::Net8).arg(9).arg(200).arg(80).arg(4000);
    let inner = w.command().unwrap();
    let mut sh = Command::new("sh");
    sh.arg("-c").arg("sleep 1; \"$0\" \"$@\"; true").arg(inner.get_program()).args(inner.get_args());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    if let Some(d) = inner.get_current_dir() {
        sh.current_dir(d);
    }
    let mut shell = sh.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let dir = out_dir("pipeline", "child");
    let prefix = dir.join("pipe");
    let out = run(clrprobe().args(["record", "--quiet", "-p", &shell.id().to_string(), "-d", "8s", "--format", "pprof", "-o"]).arg(&prefix));
    eprintln!("{out}");
    let status = shell.wait().unwrap();
    let mut printed = String::new();
    std::io::Read::read_to_string(shell.stdout.as_mut().unwrap(), &mut printed).unwrap();
    assert!(status.success(), "{printed}");
    assert!(printed.contains("thrown InvalidOperationException=200 ArgumentException=80"), "{printed}");
    let v = events_json(&prefix);
    let reports = v["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 1, "one .NET process followed: {v}");
    assert_eq!(
        reports[0][1]["exceptions_by_type"],
        serde_json::json!([["System.InvalidOperationException", 200], ["System.ArgumentException", 80]]),
        "{v}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn record_on_the_pipeline_shows_its_progress_each_second() {
    require_root();
    // The status line each second is the aggregator's answer to the recording's progress
    // query (waited for 200 ms at most): none printed when the answers do not come in time.
    // (A debug build's aggregator, naming the first samples' code, may miss the first ones.)
    let mut w = Workload::new("Cpu", Runtime::Net8).arg(20.0).start().unwrap();
    let dir = out_dir("pipeline", "progress");
    let prefix = dir.join("pipe");
    let out = clrprobe().args(["record", "-p", &w.pid.to_string(), "-d", "6s", "--format", "pprof", "-o"]).arg(&prefix).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // "\rclrprobe:   2.0 s  150 samples  0 lost  100.0% of managed frames named   "
    let samples: Vec<u64> = err
        .split('\r')
        .filter_map(|l| l.split("samples").next()?.strip_prefix("clrprobe: ")?.split_whitespace().nth(2)?.parse().ok())
        .collect();
    eprintln!("status samples {samples:?}");
    assert!(samples.len() >= 3, "a status line each second of 6: {err}");
    assert!(samples.windows(2).all(|p| p[0] <= p[1]) && samples.last() > Some(&0), "samples counted as they come: {samples:?}");
    let _ = w.kill();
    std::fs::remove_dir_all(&dir).unwrap();
}
