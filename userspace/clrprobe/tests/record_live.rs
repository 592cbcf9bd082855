//! Live end-to-end: `clrprobe record -p PID` on real .NET processes, checked against what the
//! workloads do by construction. Runs as root; never skips.
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Command,
};

use clrprobe_tests::{Runtime, Workload, require_root};
use serde_json::Value;

struct Recording {
    summary: Value,
    prefix: PathBuf,
    stderr: String,
}

fn out_dir(name: &str) -> PathBuf {
        clrprobe_tests::scratch_dir(&format!("record-{name}"))
}

fn record(pid: u32, name: &str, extra: &[&str]) -> Recording {
    let prefix = out_dir(name).join("profile");
    let out = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args(["record", "--json", "--quiet", "-p", &pid.to_string(), "-o"])
        .arg(&prefix)
        .args(extra)
        .output()
        .expect("run clrprobe record");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "record failed: {stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("summary JSON: {e}: {stderr}"));
    Recording { summary, prefix, stderr }
}

impl Recording {
    fn file(&self, suffix: &str) -> PathBuf {
        PathBuf::from(format!("{}{suffix}", self.prefix.display()))
    }

    /// Folded stacks of the cpu kind: (frames root→leaf, count).
    fn folded(&self) -> Vec<(Vec<String>, u64)> {
        let text = std::fs::read_to_string(self.file(".cpu.folded")).expect("folded file written");
        text.lines()
            .map(|l| {
                let (stack, n) = l.rsplit_once(' ').expect("`stack count` lines");
                (stack.split(';').map(str::to_string).collect(), n.parse().unwrap())
            })
            .collect()
    }

    /// Samples whose stack contains a frame named exactly `name`.
    fn inclusive(&self, name: &str) -> u64 {
        self.folded().iter().filter(|(s, _)| s.iter().any(|f| f == name)).map(|(_, n)| n).sum()
    }
}

fn perf_map_exists(pid: u32) -> bool {
    Path::new(&format!("/tmp/perf-{pid}.map")).exists()
}

#[test]
fn net8_cpu_profile_has_the_constructed_split_and_named_managed_frames() {
    cpu_split_on_net8("bpf");
}

#[test]
fn net8_cpu_profile_with_the_perf_event_fallback_sampler() {
    cpu_split_on_net8("perf");
}

fn cpu_split_on_net8(sampler: &str) {
    require_root();
    let w = Workload::new("Cpu", Runtime::Net8).arg(12).start().unwrap();
    // Let tiering settle (HotA/HotB reach Tier1 after ~30 calls and the 100 ms delay).
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(!perf_map_exists(w.pid), "the test starts with perf maps off (W^X on, as by default)");
    let r = record(w.pid, &format!("net8-{sampler}"), &["-d", "4", "-F", "999", "--sampler", sampler]);
    let s = &r.summary;
    eprintln!("{}", r.stderr);
    eprintln!("{s}");

    // HotA does 3 units of work for each unit of HotB.
    let (a, b) = (r.inclusive("Cpu::HotA"), r.inclusive("Cpu::HotB"));
    let share_a = a as f64 / (a + b) as f64;
    eprintln!("HotA {a} HotB {b}: HotA share {:.1}%", share_a * 100.0);
    assert!(a + b >= 200, "too few samples in HotA/HotB: {a} + {b}");
    assert!((0.70..=0.80).contains(&share_a), "HotA share {share_a:.3} not within 75% ± 5 points");

    // ≥ 95 % of samples with a managed leaf have every managed frame named.
    let managed = s["managed_samples"].as_u64().unwrap();
    let named = s["managed_named_samples"].as_u64().unwrap();
    assert!(managed > 0 && named as f64 >= 0.95 * managed as f64, "named {named} of {managed} managed samples");

    // clrprobe switched the perf map on, and off again with its files removed.
    assert_eq!(s["perf_maps"][0][1], "enabled-by-clrprobe", "{s}");
    assert!(!perf_map_exists(w.pid), "perf map file left behind");
    assert_eq!(s["sampler"], if sampler == "bpf" { "bpf" } else { "perf-event" });
    // Off-CPU time comes from BPF's sched_switch program: the perf_event sampler has none, and
    // then no (empty) off-CPU profile is written and the summary says so.
    assert_eq!(s["offcpu"], sampler == "bpf", "{s}");
    assert_eq!(r.file(".offcpu.pb.gz").exists(), sampler == "bpf", "{}", r.file(".offcpu.pb.gz").display());
    // Neither sampler loses samples: the perf_event fallback's per-thread rings (4 KiB of
    // stack per sample) are emptied by a reader thread, also while a drain symbolizes.
    let lost = s["sampler_stats"]["lost_samples"].as_u64().unwrap();
    assert_eq!(lost, 0, "{sampler}: {lost} samples lost of {}", s["samples"]);

    // Every output was written, and the pprof reads back with the same total.
    for suffix in [".cpu.pb.gz", ".events.json", ".cpu.folded", ".cpu.svg", ".cpu.firefox.json"] {
        assert!(r.file(suffix).metadata().map(|m| m.len() > 0).unwrap_or(false), "{suffix} missing");
    }
    let p = clrprobe::report::load(std::slice::from_ref(&r.prefix)).unwrap();
    let total = p.total(p.sample_type_index("cpu").unwrap());
    assert_eq!(total as u64, s["samples"].as_u64().unwrap());
    let names: Vec<&str> = p.frames().iter().map(|f| f.name.as_str()).collect();
    assert!(names.contains(&"Cpu::HotA") && names.contains(&"Cpu::Spin"), "{names:?}");

    // With either sampler, the busy thread's samples sit at their times across the 4 s.
    let ff: Value = serde_json::from_slice(&std::fs::read(r.file(".cpu.firefox.json")).unwrap()).unwrap();
    let busiest = ff["threads"].as_array().unwrap().iter().max_by_key(|t| t["samples"]["timeDeltas"].as_array().map_or(0, Vec::len)).unwrap();
    let mut at = 0.0;
    let times: Vec<f64> = busiest["samples"]["timeDeltas"].as_array().unwrap().iter().map(|d| { at += d.as_f64().unwrap(); at }).collect();
    let distinct = times.windows(2).filter(|w| w[1] > w[0]).count();
    let (first, last) = (times[0], times[times.len() - 1]);
    eprintln!("{sampler}: busiest thread {} samples at {first:.1}..{last:.1} ms, {distinct} distinct times", times.len());
    assert!(first < 1000.0 && last > 3000.0 && last <= 4100.0, "{sampler}: samples at {first:.0}..{last:.0} ms of 4000");
    assert!(distinct as f64 > times.len() as f64 * 0.9, "{sampler}: {distinct} distinct times of {}", times.len());
}

#[test]
fn core31_cpu_profile_names_managed_frames_from_eventpipe() {
    require_root();
    let w = Workload::new("Cpu", Runtime::Core31).arg(10).start().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let r = record(w.pid, "core31", &["-d", "3"]);
    let s = &r.summary;
    eprintln!("{s}");
    // .NET Core 3.1 has no EnablePerfMap: JIT code is named from MethodLoadVerbose + rundown.
    assert_eq!(s["perf_maps"][0][1], "unsupported", "{s}");
    assert!(s["eventpipe"][0][3].as_u64().unwrap() > 0, "rundown named no methods: {s}");
    let (a, b) = (r.inclusive("Cpu::HotA"), r.inclusive("Cpu::HotB"));
    assert!(a > 0 && b > 0, "HotA {a} HotB {b}");
    let managed = s["managed_samples"].as_u64().unwrap();
    let named = s["managed_named_samples"].as_u64().unwrap();
    assert!(managed > 0 && named as f64 >= 0.95 * managed as f64, "named {named} of {managed} managed samples");
}

#[test]
fn readytorun_corelib_code_is_named() {
    require_root();
    // Call counting delayed: CoreLib's precompiled code is not re-jitted during the test.
    let w = Workload::new("R2R", Runtime::Net8).arg(10).env("DOTNET_TC_CallCountingDelayMs", "600000").start().unwrap();
    let r = record(w.pid, "r2r", &["-d", "3"]);
    let p = clrprobe::report::load(std::slice::from_ref(&r.prefix)).unwrap();
    let r2r: HashMap<&str, &str> = p
        .frames()
        .iter()
        .filter(|f| f.kind == clrprobe_profile::FrameKind::ReadyToRun)
        .map(|f| (f.name.as_str(), f.module.as_str()))
        .collect();
    eprintln!("R2R frames: {r2r:?}");
    assert!(
        r2r.keys().any(|n| n.starts_with("System.Convert::")),
        "no named ReadyToRun frame from System.Convert: {r2r:?}"
    );
    assert!(r2r.values().all(|m| m.contains("System.Private.CoreLib")), "{r2r:?}");
    assert!(r.inclusive("System.Convert::ToBase64String") > 0);
}

#[test]
fn go_tool_pprof_reads_the_profile() {
    require_root();
    let w = Workload::new("Cpu", Runtime::Net8).arg(6).start().unwrap();
    let r = record(w.pid, "gopprof", &["-d", "2", "--format", "pprof"]);
    let out = Command::new("go")
        .args(["tool", "pprof", "-top", "-symbolize=none"])
        .arg(r.file(".cpu.pb.gz"))
        .env("HOME", clrprobe_tests::scratch_dir("go-home"))
        .output()
        .expect("go (Debian golang-go, installed by cargo xtask test) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "go tool pprof failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("Cpu::Spin"), "pprof -top lacks the hot method:\n{text}");
}

#[test]
fn record_of_a_missing_process_names_the_cause() {
    let out = Command::new(env!("CARGO_BIN_EXE_clrprobe")).args(["record", "-p", "999999998", "-d", "1"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("999999998") && err.contains("does not exist"), "{err}");
    // Said once: not also "is not a .NET process" before it.
    assert_eq!(err.matches("999999998").count(), 1, "{err}");
}

#[test]
fn ctrl_c_writes_the_profile_and_leaves_nothing_switched_on() {
    require_root();
    let w = Workload::new("Cpu", Runtime::Net8).arg(15).start().unwrap();
    let sockets_before = w.socket_count();
    let prefix = out_dir("sigint").join("profile");
    let child = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args(["record", "--json", "--quiet", "-p", &w.pid.to_string(), "-o"])
        .arg(&prefix)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(perf_map_exists(w.pid), "perf map switched on while recording");
    assert!(w.socket_count() > sockets_before, "the EventPipe session holds a connection while recording");
    // SAFETY: kill(2) on our child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(s["samples"].as_u64().unwrap() > 0, "{s}");
    // Every kind, but no __cxa_throw uprobe (a trap per throw) while EventPipe delivers exceptions.
    assert_eq!(s["cxa_throw_probed"], serde_json::json!([]), "uprobe placed without --cxa-throw");
    assert!(s["uprobe_cost_ns"].is_null(), "{}", s["uprobe_cost_ns"]);
    assert!(Path::new(&format!("{}.cpu.pb.gz", prefix.display())).exists());
    assert!(!perf_map_exists(w.pid), "perf map left switched on after Ctrl-C");
    // The EventPipe session is gone: the runtime closed its connection, and still answers.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(w.socket_count(), sockets_before, "a diagnostics connection is left open in the target");
    let client = clrprobe_eventpipe::ipc::Client::for_pid(w.pid).unwrap();
    let info = client.process_info().unwrap();
    assert_eq!(info.pid as u32, w.pid);
}
