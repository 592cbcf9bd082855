//! Live: `record --pipeline` (record as a front end of the streaming pipeline: host source →
//! aggregator → files sink) on real .NET 8 processes: the runtime's exceptions counted
//! exactly in PREFIX.events.json and in the exceptions profile, and, beside a `record -p` on
//! `record::run` (`CLRPROBE_RECORD_PATH=run`) of the same process at the same time, the same
//! kinds of files with the managed frames named.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use clrprobe_tests::{Runtime, Workload, require_root};
use serde_json::Value;

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("clrprobe-pipeline-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn clrprobe() -> Command {
    Command::new(env!("CARGO_BIN_EXE_clrprobe"))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run clrprobe");
    let (o, e) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "{cmd:?} failed: {o}{e}");
    o + &e
}

/// Top self frames of `kind` (None: the file's first) as `report --json` lists them: (name,
/// self value).
fn top(file: &Path, kind: Option<&str>) -> Vec<(String, i64)> {
    let json = run(clrprobe().args(["report", "--json", "--top", "10"]).arg(file));
    let json = &json[..json.rfind('}').unwrap() + 1];
    let v: Value = serde_json::from_str(json).unwrap();
    let kinds = v["kinds"].as_array().unwrap();
    let k = kinds.iter().find(|k| kind.is_none_or(|n| k["kind"] == n)).unwrap_or_else(|| panic!("no {kind:?} kind in {}: {v}", file.display()));
    k["top_self"].as_array().unwrap().iter().map(|t| (t[0].as_str().unwrap().to_owned(), t[2].as_i64().unwrap())).collect()
}

fn kinds_written(prefix: &Path) -> Vec<String> {
    let stem = format!("{}.", prefix.file_name().unwrap().to_string_lossy());
    let mut k: Vec<String> = std::fs::read_dir(prefix.parent().unwrap())
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().strip_prefix(&stem).map(str::to_string))
        .collect();
    k.sort();
    k
}

#[test]
fn record_on_the_pipeline_counts_the_runtimes_exceptions_exactly() {
    require_root();
    // 300 + 120 exceptions thrown 2 s after "ready", while the recording runs.
    let mut w = Workload::new("Exceptions", Runtime::Net8).arg(8).arg(300).arg(120).arg(2000).start().unwrap();
    let dir = out_dir("exc");
    let prefix = dir.join("pipe");
    let out = run(clrprobe().args(["record", "--pipeline", "--quiet", "-p", &w.pid.to_string(), "-d", "5s", "--format", "pprof", "-o"]).arg(&prefix));
    eprintln!("{out}");
    let line = w.wait_for_line("thrown", Duration::from_secs(10)).expect("the workload threw");
    assert_eq!(line, "thrown InvalidOperationException=300 ArgumentException=120 FormatException=0");
    let v: Value = serde_json::from_slice(&std::fs::read(format!("{}.events.json", prefix.display())).unwrap()).unwrap();
    let report = &v["reports"][0][1];
    assert_eq!(
        report["exceptions_by_type"],
        serde_json::json!([["System.InvalidOperationException", 300], ["System.ArgumentException", 120]]),
        "{report}"
    );
    // The exceptions profile: every exception at its throw site, the managed frames named.
    let exc = top(&PathBuf::from(format!("{}.exceptions.pb.gz", prefix.display())), Some("exceptions"));
    assert_eq!(exc.iter().map(|t| t.1).sum::<i64>(), 420, "{exc:?}");
    assert!(exc.iter().any(|(n, _)| n.contains("System.InvalidOperationException")), "{exc:?}");
    let _ = w.wait(Duration::from_secs(10));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn record_on_the_pipeline_writes_the_kinds_record_writes_with_the_managed_frames_named() {
    require_root();
    let mut w = Workload::new("Mixed", Runtime::Net8).arg(20.0).start().unwrap();
    let dir = out_dir("mixed");
    let (legacy, pipe) = (dir.join("legacy"), dir.join("pipe"));
    let pid = w.pid.to_string();
    // Both at once, on the same process.
    // `record::run` (plain `record` takes the pipeline for this recording otherwise).
    let mut a = clrprobe().env("CLRPROBE_RECORD_PATH", "run").args(["record", "--quiet", "-p", &pid, "-d", "4s", "--format", "pprof", "-o"]).arg(&legacy).spawn().unwrap();
    let out = run(clrprobe().args(["record", "--pipeline", "--quiet", "-p", &pid, "-d", "4s", "--format", "pprof", "-o"]).arg(&pipe));
    assert!(a.wait().unwrap().success());
    eprintln!("{out}");
    assert!(w.is_alive(), "the workload outlives the recordings");
    let (lk, pk) = (kinds_written(&legacy), kinds_written(&pipe));
    eprintln!("legacy {lk:?}\npipeline {pk:?}");
    for k in ["cpu.pb.gz", "alloc.pb.gz", "exceptions.pb.gz", "contention.pb.gz", "offcpu.pb.gz", "events.json"] {
        assert!(lk.contains(&k.to_string()), "record wrote {k}: {lk:?}");
        assert!(pk.contains(&k.to_string()), "record --pipeline wrote {k}: {pk:?}");
    }
    let cpu = top(&PathBuf::from(format!("{}.cpu.pb.gz", pipe.display())), Some("cpu"));
    assert!(cpu.iter().any(|(n, _)| n.contains("Mixed::Spin")), "managed frames named: {cpu:?}");
    let alloc = top(&PathBuf::from(format!("{}.alloc.pb.gz", pipe.display())), None);
    assert!(!alloc.is_empty(), "allocation sites: {alloc:?}");
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
    let dir = out_dir("child");
    let prefix = dir.join("pipe");
    let out = run(clrprobe().args(["record", "--pipeline", "--quiet", "-p", &shell.id().to_string(), "-d", "8s", "--format", "pprof", "-o"]).arg(&prefix));
    eprintln!("{out}");
    let status = shell.wait().unwrap();
    let mut printed = String::new();
    std::io::Read::read_to_string(shell.stdout.as_mut().unwrap(), &mut printed).unwrap();
    assert!(status.success(), "{printed}");
    assert!(printed.contains("thrown InvalidOperationException=200 ArgumentException=80"), "{printed}");
    let v: Value = serde_json::from_slice(&std::fs::read(format!("{}.events.json", prefix.display())).unwrap()).unwrap();
    let reports = v["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 1, "one .NET process followed: {v}");
    assert_eq!(
        reports[0][1]["exceptions_by_type"],
        serde_json::json!([["System.InvalidOperationException", 200], ["System.ArgumentException", 80]]),
        "{v}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
