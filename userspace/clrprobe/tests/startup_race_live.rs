//! Live: no set-up is sent to a .NET runtime before it has finished starting, and two clrprobes
//! never set up one target at the same time. A command in that window crashes or hangs the
//! runtime (dotnet/runtime#122472: EnablePerfMap before the perf-map code is initialised; a
//! .NET 8 runtime suspended at start-up got SIGSEGV from `record -p`, and two .NET 8 processes
//! hung for good after two `record --all` set them up while they started). Runs as root;
//! never skips.
use std::{
    path::Path,
    process::{Child, Command, ExitStatus, Output, Stdio},
    time::{Duration, Instant},
};

use clrprobe_tests::{Runtime, Workload, require_root};
use serde_json::Value;

fn record(args: &[&str], prefix: &Path) -> std::thread::JoinHandle<Output> {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let prefix = prefix.to_path_buf();
    std::thread::spawn(move || {
        Command::new(env!("CARGO_BIN_EXE_clrprobe"))
            .arg("record")
            .args(&args)
            .args(["--json", "--quiet", "--format", "pprof", "-o"])
            .arg(&prefix)
            .output()
            .expect("run clrprobe")
    })
}

fn summary(out: &Output) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "clrprobe failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("JSON: {e}: {stderr}"))
}

/// Starts `w` without waiting for it to be ready (its runtime is still starting on return).
fn spawn(w: &Workload) -> Child {
    w.command().unwrap().stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
}

/// Waits until `deadline` for `c` to end by itself.
fn wait_until(c: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        if let Ok(Some(s)) = c.try_wait() {
            return Some(s);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Has `pid` made its diagnostics socket (not an earlier process's with the same pid)?
fn socket_of(pid: u32) -> bool {
    clrprobe_tests::diagnostics_socket(pid).is_some_and(|p| p.exists())
}

#[test]
fn a_runtime_suspended_at_start_up_is_left_alone_then_runs() {
    require_root();
    let dir = clrprobe_tests::scratch_dir("suspended");
    // Waits at start-up for a diagnostics client to resume it (its server answers meanwhile).
    let mut w = spawn(&Workload::new("Sleeper", Runtime::Net8).arg(3).arg(100).env("DOTNET_DefaultDiagnosticPortSuspend", "1"));
    let t0 = Instant::now();
    while !socket_of(w.id()) && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(socket_of(w.id()), "no diagnostics socket: {}", clrprobe_tests::thread_states(w.id()));
    let me = std::process::id().to_string();
    let pid = w.id().to_string();
    // Named, and host-wide at the same time (both would set it up).
    let one = record(&["-p", &pid, "-d", "3"], &dir.join("one"));
    let all = record(&["--all", "--parent", &me, "-d", "3"], &dir.join("all"));
    let (one, all) = (summary(&one.join().unwrap()), summary(&all.join().unwrap()));
    if let Ok(Some(s)) = w.try_wait() {
        panic!("the suspended runtime died while clrprobe recorded it: {s:?}");
    }
    // The named target is said to be still starting (with --all, a loaded machine may not
    // have found it before the end).
    let warned = one["warnings"].as_array().unwrap().iter().any(|m| m.as_str().unwrap().contains("had not finished starting"));
    assert!(warned, "no word about the runtime still starting: {}", one["warnings"]);
    for s in [&one, &all] {
        assert!(!s["perf_maps"].as_array().unwrap().iter().any(|m| m[0] == w.id()), "set up while starting: {}", s["perf_maps"]);
    }
    assert!(!Path::new(&format!("/tmp/perf-{}.map", w.id())).exists(), "perf map switched on while starting");
    // Left as it was: resumed, it runs to its end.
    clrprobe_eventpipe::ipc::Client::for_pid(w.id()).unwrap().resume_runtime().unwrap();
    let status = wait_until(&mut w, Instant::now() + Duration::from_secs(30));
    let _ = w.kill();
    assert!(status.is_some_and(|s| s.success()), "after resuming: {status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_all_recordings_over_starting_processes_hang_none() {
    require_root();
    let dir = clrprobe_tests::scratch_dir("race");
    let me = std::process::id().to_string();
    let a = record(&["--all", "--parent", &me, "-d", "20"], &dir.join("a"));
    let b = record(&["--all", "--parent", &me, "-d", "20"], &dir.join("b"));
    std::thread::sleep(Duration::from_millis(1500));
    // A .NET 8 process every 0.5 s, each ~3 s long: both clrprobes find each while it starts.
    let sleeper = Workload::new("Sleeper", Runtime::Net8).arg(10).arg(1500);
    let mut started: Vec<(Child, Instant)> = Vec::new();
    for _ in 0..16 {
        started.push((spawn(&sleeper), Instant::now()));
        std::thread::sleep(Duration::from_millis(500));
    }
    let (mut hung, mut failed) = (Vec::new(), Vec::new());
    for (w, at) in &mut started {
        match wait_until(w, *at + Duration::from_secs(40)) {
            Some(s) if s.success() => {}
            Some(s) => failed.push(format!("{}: {s:?}", w.id())),
            None => {
                hung.push(format!("{} ({})", w.id(), clrprobe_tests::thread_states(w.id())));
                let _ = w.kill();
                let _ = w.wait();
            }
        }
    }
    let (a, b) = (summary(&a.join().unwrap()), summary(&b.join().unwrap()));
    assert!(hung.is_empty(), "processes hung after being set up by two clrprobes: {hung:?}");
    assert!(failed.is_empty(), "processes failed after being set up by two clrprobes: {failed:?}");
    // Set up by one clrprobe or both (a short process may end before the second).
    let pids: Vec<u32> = started.iter().map(|(w, _)| w.id()).collect();
    let set_up = |s: &Value, pid: u32| s["perf_maps"].as_array().unwrap().iter().any(|m| m[0] == pid && m[1] == "enabled-by-clrprobe");
    let by_one = pids.iter().filter(|&&p| set_up(&a, p) || set_up(&b, p)).count();
    let by_both = pids.iter().filter(|&&p| set_up(&a, p) && set_up(&b, p)).count();
    eprintln!("set up by at least one clrprobe: {by_one} of {}; by both: {by_both}", pids.len());
    assert!(by_one >= pids.len() / 2, "set up: {by_one} of {pids:?}: {} / {}", a["perf_maps"], b["perf_maps"]);
    for p in &pids {
        assert!(!Path::new(&format!("/tmp/perf-{p}.map")).exists(), "{p}: perf map left");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
