//! Live end-to-end: the real BPF programs (perf_event sampler + uprobe with aya-log) attached to
//! real CoreCLR processes, checked per pid. Runs as root; never skips.
use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Duration,
};

use clrprobe_tests::{Runtime, Workload, require_root};
use serde_json::Value;

const FREQ: u64 = 99;
const SECONDS: f64 = 2.0;

/// utime+stime of a process in seconds, from /proc/PID/stat.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("target alive");
    let after_comm = &stat[stat.rfind(')').expect("stat has comm") + 2..];
    let f: Vec<&str> = after_comm.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the comm.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

/// Waits for clrprobe's "attached" line on stderr (the rest of stderr is then discarded).
fn wait_attached(child: &mut std::process::Child) {
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr piped"));
    let mut line = String::new();
    loop {
        line.clear();
        if stderr.read_line(&mut line).unwrap() == 0 {
            panic!("clrprobe exited before attaching");
        }
        if line.contains("attached") {
            break;
        }
    }
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
}

fn counts(v: &Value, key: &str) -> BTreeMap<u32, u64> {
    v[key]
        .as_object()
        .unwrap_or_else(|| panic!("no {key} in {v}"))
        .iter()
        .map(|(k, n)| (k.parse().unwrap(), n.as_u64().unwrap()))
        .collect()
}

fn probe_two_processes(runtime: Runtime) {
    require_root();
    // Two CPU-bound processes of the same runtime; only the first is the target.
    let target = Workload::new("Cpu", runtime).arg(8).start().expect("start target");
    let other = Workload::new("Cpu", runtime).arg(8).start().expect("start other");
    let mut child = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args(["probe", "--json", "--uprobe", "libc:write", "--freq", &FREQ.to_string()])
        .args(["--duration", &SECONDS.to_string(), "-p", &target.pid.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run clrprobe");
    wait_attached(&mut child);
    // The target's CPU time over the recording window only (loading BPF takes a while).
    let cpu_before = cpu_seconds(target.pid);
    let out = child.wait_with_output().expect("clrprobe finishes");
    let cpu_used = cpu_seconds(target.pid) - cpu_before;
    assert!(out.status.success(), "clrprobe probe failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("probe prints JSON");
    let samples = counts(&v, "samples");
    let hits = counts(&v, "uprobe_hits");
    eprintln!("{runtime:?}: target {} other {} -> {v}", target.pid, other.pid);

    // The perf_event program saw the target and nothing else, though the other process was
    // just as busy on the same CPUs.
    let n = samples.get(&target.pid).copied().unwrap_or(0);
    assert!(n > 0, "no samples for the target: {v}");
    assert_eq!(samples.get(&other.pid), None, "samples leaked from a non-target: {v}");
    assert_eq!(samples.len(), 1, "only the target is sampled: {v}");
    // Samples agree with the CPU time the kernel accounted to the target over the window
    // (cpu-clock at FREQ Hz fires once per 1/FREQ s of on-CPU time).
    let expected = cpu_used * FREQ as f64;
    let ratio = n as f64 / expected;
    eprintln!("{runtime:?}: {n} samples for {cpu_used:.2} s of CPU (expected {expected:.0}, ratio {ratio:.2})");
    assert!((0.75..=1.25).contains(&ratio), "samples {n} vs {expected:.0} expected from /proc CPU time");
    assert_eq!(v["dropped_map_full"], 0, "{v}");

    // The uprobe on libc write(2) fired in the target (it prints a tick line every 100 ms),
    // not in the other process, which writes just as often.
    let h = hits.get(&target.pid).copied().unwrap_or(0);
    assert!(h >= 5, "expected ≥ 5 write(2) hits in {SECONDS} s of ticks, got {h}: {v}");
    assert_eq!(hits.get(&other.pid), None, "uprobe hits leaked from a non-target: {v}");

    // aya-log output travelled from the BPF program to userspace.
    let logs: Vec<&str> = v["bpf_logs"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let want = format!("uprobe first hit pid={}", target.pid);
    assert!(logs.iter().any(|l| l.starts_with(&want)), "missing BPF log {want:?} in {logs:?}");
}

#[test]
fn bpf_sampler_and_uprobe_on_net8() {
    probe_two_processes(Runtime::Net8);
}

#[test]
fn bpf_sampler_and_uprobe_on_core31() {
    probe_two_processes(Runtime::Core31);
}

#[test]
fn uprobe_on_libcoreclr_entry_point_counts_one_call_per_process() {
    require_root();
    // libcoreclr exports only its hosting API (coreclr_initialize, coreclr_execute_assembly,
    // ...), each called once per process at start-up. So attach first, for every process
    // (-p 0), then start a runtime: its pid must show exactly one call.
    let lib = Runtime::Net8.libcoreclr().unwrap();
    let mut probe = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args(["probe", "--json", "--duration", "6", "-p", "0"])
        .arg("--uprobe")
        .arg(format!("{}:coreclr_execute_assembly", lib.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run clrprobe");
    wait_attached(&mut probe);
    let mut w = Workload::new("EarlyExit", Runtime::Net8).arg(200).start().expect("start");
    w.wait(Duration::from_secs(10));
    let out = probe.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let hits = counts(&v, "uprobe_hits");
    assert_eq!(hits.get(&w.pid).copied(), Some(1), "coreclr_execute_assembly runs once: {v}");
    let logs: Vec<&str> = v["bpf_logs"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let want = format!("uprobe first hit pid={}", w.pid);
    assert!(logs.iter().any(|l| l.starts_with(&want)), "missing BPF log {want:?} in {logs:?}");
}

#[test]
fn probe_of_a_missing_process_names_the_cause() {
    let out = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args(["probe", "-p", "999999999", "--duration", "0.1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("999999999") && err.contains("does not exist"), "{err}");
}

#[test]
fn probe_survives_the_target_exiting() {
    require_root();
    // The app works for 2.5 s after `ready` and exits with 3 while the probe records for 6 s.
    let mut w = Workload::new("EarlyExit", Runtime::Net8).arg(2500).start().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args(["probe", "--json", "--duration", "6", "-p", &w.pid.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_attached(&mut child);
    assert!(w.is_alive(), "the app must still run when the probe attaches");
    let status = w.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(3), "EarlyExit exits with 3");
    assert!(child.try_wait().unwrap().is_none(), "the probe is still recording after the exit");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Samples taken before it exited are kept.
    assert!(counts(&v, "samples").get(&w.pid).copied().unwrap_or(0) > 0, "{v}");
}
