//! Live: `clrprobe heap` on a workload holding a known graph (HeapGraph.cs) — a linked list of N
//! nodes under a static field, M arrays in a static dictionary, garbage allocated all along —
//! on .NET 8 and .NET Core 3.1; `heap diff` of a list grown by K; a heap of a million objects.
use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    time::Duration,
};

use clrprobe_tests::{Running, Runtime, Workload, require_root};
use serde_json::Value;

/// HeapListNode: object header + method table + long + reference, on 64-bit.
const NODE_SIZE: u64 = 32;

fn dir(name: &str) -> PathBuf {
        clrprobe_tests::scratch_dir(&format!("heap-{name}"))
}

fn clrprobe(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_clrprobe")).args(args).output().expect("run clrprobe");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Takes a snapshot of `w` with `--json`; returns the summary printed and the prefix.
fn snapshot(w: &Running, dir: &Path, name: &str) -> (Value, PathBuf) {
    let prefix = dir.join(name);
    let out = clrprobe(&["heap", "-p", &w.pid.to_string(), "--json", "--timeout", "50", "-o", prefix.to_str().unwrap()]);
    assert!(out.status.success(), "clrprobe heap failed: {}", String::from_utf8_lossy(&out.stderr));
    (serde_json::from_slice(&out.stdout).expect("JSON summary"), prefix)
}

fn type_named<'a>(s: &'a Value, name: &str) -> Option<&'a Value> {
    s["types"].as_array().unwrap().iter().find(|t| t["name"] == name)
}

fn known_graph(runtime: Runtime) {
    require_root();
    let (nodes, arrays) = (5000u64, 300u64);
    let w = Workload::new("HeapGraph", runtime).arg(60).arg(nodes).arg(arrays).arg(0).start().unwrap();
    let d = dir(runtime.cache_name());
    let (s, prefix) = snapshot(&w, &d, "s");
    let node = type_named(&s, "HeapListNode").expect("HeapListNode in the snapshot");
    eprintln!("HeapListNode: {node}");
    // Counts exact; shallow bytes = N × node size; retained ≥ that.
    assert_eq!(node["count"].as_u64(), Some(nodes), "{node}");
    assert_eq!(node["bytes"].as_u64(), Some(nodes * NODE_SIZE), "{node}");
    assert!(node["retained_bytes"].as_u64().unwrap() >= nodes * NODE_SIZE, "{node}");
    // Exactly: the list and the ConditionalWeakTable value its last node keeps alive (24 B).
    assert_eq!(node["retained_bytes"].as_u64(), Some(nodes * NODE_SIZE + 24), "{node}");
    // The root path starts at the static field.
    let path: Vec<&str> = node["root_path"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert_eq!(path.first().copied(), Some("[static Head]"), "{path:?}");
    let arr = type_named(&s, "HeapPayload[]").expect("HeapPayload[] in the snapshot");
    eprintln!("HeapPayload[]: {arr}");
    assert_eq!(arr["count"].as_u64(), Some(arrays), "{arr}");
    let payload = type_named(&s, "HeapPayload").expect("HeapPayload");
    assert_eq!(payload["count"].as_u64(), Some(arrays), "{payload}");
    // Each array retains itself and its one HeapPayload.
    assert_eq!(arr["retained_bytes"].as_u64(), Some(arr["bytes"].as_u64().unwrap() + payload["bytes"].as_u64().unwrap()));
    let arr_path = arr["root_path"].to_string();
    assert!(arr_path.contains("[static Arrays]"), "{arr_path}");
    // Garbage allocated meanwhile is not in the snapshot (at most what the churning thread's
    // frame holds at the GC).
    let garbage = type_named(&s, "HeapGarbage").map(|g| g["count"].as_u64().unwrap()).unwrap_or(0);
    eprintln!("HeapGarbage alive: {garbage}");
    assert!(garbage <= 2, "garbage counted: {garbage}");
    // A ConditionalWeakTable value lives through its key (a dependent handle): reached from
    // the list's last node.
    let cwt = type_named(&s, "HeapCwtValue").expect("HeapCwtValue");
    eprintln!("HeapCwtValue: {cwt}");
    assert_eq!(cwt["count"].as_u64(), Some(1));
    let cwt_path: Vec<&str> = cwt["root_path"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert_eq!(cwt_path, ["[static Head]", &format!("HeapListNode ×{nodes}"), "HeapCwtValue"]);
    // Static roots are listed with what they retain.
    let statics = s["roots"]["statics"].as_array().unwrap();
    let head = statics.iter().find(|r| r["field"] == "[static Head]").expect("static Head");
    assert_eq!(head["type"], "HeapListNode");
    assert!(head["retained_bytes"].as_u64().unwrap() >= nodes * NODE_SIZE);
    // The pprof file: objects and bytes by root path, readable by go tool pprof.
    let pb = format!("{}.heap.pb.gz", prefix.display());
    let p = clrprobe_profile::pprof::read_file(&pb).unwrap();
    let objects: i64 = p.samples().map(|s| s.values[0]).sum();
    assert_eq!(objects as u64, s["objects"].as_u64().unwrap());
    let node_samples: i64 = p
        .samples()
        .filter(|x| {
            let st = p.stack(x.stack).unwrap();
            p.frame(st[0]).unwrap().name.as_str() == "[static Head]"
                && p.frame(*st.last().unwrap()).unwrap().name.as_str() == "HeapListNode"
        })
        .map(|x| x.values[0])
        .sum();
    assert_eq!(node_samples as u64, nodes);
    let go = Command::new("go").args(["tool", "pprof", "-top", "-sample_index=inuse_space", &pb]).output().expect("go tool pprof");
    let top = String::from_utf8_lossy(&go.stdout);
    assert!(go.status.success() && top.contains("HeapListNode"), "{top}\n{}", String::from_utf8_lossy(&go.stderr));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn known_graph_net8() {
    known_graph(Runtime::Net8);
}

#[test]
fn known_graph_netcore31() {
    known_graph(Runtime::Core31);
}

#[test]
fn diff_shows_list_growth() {
    require_root();
    let grow = 777u64;
    let d = dir("diff");
    let trigger = d.join("grow");
    let w = Workload::new("HeapGraph", Runtime::Net8).arg(60).arg(1000).arg(10).arg(0).arg(grow).arg(trigger.display()).start().unwrap();
    let (a, pa) = snapshot(&w, &d, "a");
    std::fs::write(&trigger, b"").unwrap();
    let line = w.wait_for_line("grown", Duration::from_secs(10)).expect("the workload grew its list");
    eprintln!("{line}");
    let (b, pb) = snapshot(&w, &d, "b");
    // Garbage was allocated all along (millions of objects) but is not in the snapshots.
    let allocated: u64 = line.rsplit("garbage=").next().unwrap().trim().parse().unwrap();
    assert!(allocated >= 10_000, "{line}");
    for s in [&a, &b] {
        let alive = type_named(s, "HeapGarbage").map(|g| g["count"].as_u64().unwrap()).unwrap_or(0);
        assert!(alive <= 2, "{alive} of {allocated} garbage objects counted");
    }
    assert_eq!(type_named(&a, "HeapListNode").unwrap()["count"].as_u64(), Some(1000));
    assert_eq!(type_named(&b, "HeapListNode").unwrap()["count"].as_u64(), Some(1000 + grow));
    let out = clrprobe(&["heap", "diff", &format!("{}.heap.json", pa.display()), &format!("{}.heap.json", pb.display()), "--json"]);
    assert!(out.status.success());
    let diff: Value = serde_json::from_slice(&out.stdout).unwrap();
    let node = diff["grown"].as_array().unwrap().iter().find(|t| t["name"] == "HeapListNode").expect("HeapListNode grew");
    let delta = node["count_after"].as_u64().unwrap() - node["count_before"].as_u64().unwrap();
    assert_eq!(delta, grow, "{node}");
    assert_eq!(node["bytes_after"].as_u64().unwrap() - node["bytes_before"].as_u64().unwrap(), grow * NODE_SIZE);
    assert_eq!(node["root_path"][0], "[static Head]");
    // The text form names it with its growth.
    let text = clrprobe(&["heap", "diff", &format!("{}.heap.json", pa.display()), &format!("{}.heap.json", pb.display())]);
    let text = String::from_utf8_lossy(&text.stdout);
    eprintln!("{text}");
    assert!(text.lines().any(|l| l.contains(&format!("+{grow}")) && l.contains("HeapListNode")), "{text}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn million_object_heap() {
    require_root();
    let leaves = 1_000_000u64;
    let w = Workload::new("HeapGraph", Runtime::Net8).arg(120).arg(1000).arg(10).arg(leaves).start().unwrap();
    let d = dir("million");
    let prefix = d.join("m");
    let started = std::time::Instant::now();
    let out = clrprobe(&["heap", "-p", &w.pid.to_string(), "--timeout", "55", "-o", prefix.to_str().unwrap()]);
    let secs = started.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s: Value = serde_json::from_slice(&std::fs::read(format!("{}.heap.json", prefix.display())).unwrap()).unwrap();
    let objects = s["objects"].as_u64().unwrap();
    let leaf = type_named(&s, "HeapLeaf").unwrap();
    assert_eq!(leaf["count"].as_u64(), Some(leaves));
    assert!(objects > leaves);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rss = stderr.lines().find(|l| l.contains("peak RSS")).unwrap_or("").to_string();
    eprintln!(
        "million: {objects} objects in {secs:.1} s (clrprobe wall time); target pause {:.1} ms; {rss}",
        s["walk"]["pause_ms"].as_f64().unwrap()
    );
    assert!(s["walk"]["pause_ms"].as_f64().unwrap() > 0.0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn series_then_diff_of_first_and_last() {
    require_root();
    let w = Workload::new("HeapGraph", Runtime::Net8).arg(60).arg(1000).arg(10).arg(0).start().unwrap();
    let d = dir("series");
    let prefix = d.join("s");
    let out = clrprobe(&["heap", "-p", &w.pid.to_string(), "--every", "1s", "--count", "3", "--quiet", "-o", prefix.to_str().unwrap()]);
    assert!(out.status.success());
    for i in 1..=3 {
        let json = format!("{}.{i}.heap.json", prefix.display());
        let pb = format!("{}.{i}.heap.pb.gz", prefix.display());
        assert!(Path::new(&json).is_file() && Path::new(&pb).is_file(), "{json}");
        // Every snapshot names its types (the runtime names a type once per session change).
        let s: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(type_named(&s, "HeapListNode").map(|t| t["count"].as_u64()), Some(Some(1000)), "snapshot {i}");
        assert!(!s["types"].as_array().unwrap().iter().any(|t| t["name"].as_str().unwrap().starts_with("[type ")), "snapshot {i}");
    }
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("== snapshot 1 → 3") && text.contains("heap diff: objects"), "{text}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Ctrl-C while the runtime walks a large heap: the command says the walk was interrupted,
/// fails, and writes no file; the target keeps running and a later snapshot works.
#[test]
fn interrupted_walk_writes_nothing() {
    use std::io::Read;
    require_root();
    let w = Workload::new("HeapGraph", Runtime::Net8).arg(90).arg(1000).arg(10).arg(3_000_000).start().unwrap();
    let d = dir("interrupt");
    let prefix = d.join("x");
    let mut child = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args(["heap", "-p", &w.pid.to_string(), "-o", prefix.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    // Wait until objects arrive, then interrupt.
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let started = std::time::Instant::now();
    loop {
        let n = stderr.read(&mut buf).unwrap();
        assert!(n > 0, "clrprobe ended before the walk: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&seen);
        if text.contains("walking: ") && !text.contains("walking: 0 objects") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{text}");
    }
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    stderr.read_to_end(&mut seen).unwrap();
    let status = child.wait().unwrap();
    let text = String::from_utf8_lossy(&seen);
    eprintln!("{text}");
    assert!(!status.success());
    assert!(text.contains("interrupted while the runtime walked its heap") && text.contains("nothing was written"), "{text}");
    let files: Vec<_> = std::fs::read_dir(&d).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(files.is_empty(), "files left: {files:?}");
    // The target is fine and can be snapshotted again.
    let (s, _) = snapshot(&w, &d, "again");
    assert_eq!(type_named(&s, "HeapLeaf").unwrap()["count"].as_u64(), Some(3_000_000));
    let _ = std::fs::remove_dir_all(&d);
}
