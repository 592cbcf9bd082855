//! Live: `record --all --parent PID` over .NET processes that exit while it records. Each exited
//! process is folded into the profile while recording (and forgotten): its samples stay in the
//! host and per-process profiles with named managed frames; a .NET process that does not
//! descend from PID gets no perf map. Runs as root; never skips.
use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use clrprobe_tests::{Runtime, Workload, require_root};
use serde_json::Value;

mod common;
use common::{read, samples_with};


/// Starts `w` through a shell that exits at once: the workload is re-parented (not ours).
fn start_orphan(w: &Workload) -> u32 {
    let inner = w.command().unwrap();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", r#""$@" >/dev/null 2>&1 & echo $!"#, "sh"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .current_dir(inner.get_current_dir().unwrap())
        .stdout(Stdio::piped());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    child.wait().unwrap();
    line.trim().parse().unwrap()
}

#[test]
fn record_all_folds_exited_processes_and_leaves_others_alone() {
    require_root();
    let dir = std::env::temp_dir().join(format!("clrprobe-retire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("host");
    let prefix_s = prefix.to_str().unwrap().to_string();
    let me = std::process::id().to_string();
    // Not a descendant of this test: --parent leaves it alone.
    let other = start_orphan(&Workload::new("Cpu", Runtime::Net8).arg(20));
    let rec = std::thread::spawn(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
            .args(["record", "--all", "--parent", &me, "-d", "28", "--json", "--quiet", "--format", "pprof", "-o", &prefix_s])
            .output()
            .expect("run clrprobe");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "clrprobe failed: {stderr}");
        let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("JSON: {e}: {stderr}"));
        (json, stderr)
    });
    std::thread::sleep(Duration::from_millis(2000));
    // Three short-lived processes, exited well before the recording ends.
    let mut short: Vec<_> = (0..3).map(|_| Workload::new("Cpu", Runtime::Net8).arg(10).start().unwrap()).collect();
    let pids: Vec<u32> = short.iter().map(|w| w.pid).collect();
    for w in &mut short {
        w.wait(Duration::from_secs(30));
    }
    assert!(!Path::new(&format!("/tmp/perf-{other}.map")).exists(), "--parent: the other process got no perf map");
    let (summary, stderr) = rec.join().unwrap();
    eprintln!("{stderr}");
    // SAFETY: kill(2) of the workload this test started.
    unsafe { libc::kill(other as i32, libc::SIGKILL) };

    assert!(summary["folded_processes"].as_u64().unwrap() >= 3, "folded: {}", summary["folded_processes"]);
    let maps = summary["perf_maps"].as_array().unwrap();
    assert!(!maps.iter().any(|m| m[0] == other), "--parent: {other} was set up: {maps:?}");
    let host = read(&prefix);
    for &pid in &pids {
        assert!(maps.iter().any(|m| m[0] == pid && m[1] == "enabled-by-clrprobe"), "perf map of {pid}: {maps:?}");
        let per = read(&PathBuf::from(format!("{}.{pid}", prefix.display())));
        let spin = samples_with(&per, "Cpu::Spin");
        let hot = samples_with(&per, "Cpu::HotA") + samples_with(&per, "Cpu::HotB");
        // Named after folding (three busy processes share a loaded machine: few samples each).
        assert!(spin >= 5 && hot >= 5, "{pid}: Cpu::Spin in {spin} samples, HotA/HotB in {hot}");
        let in_host: i64 = host.samples().filter(|s| host.labels(s.labels).unwrap().pid == Some(pid)).map(|s| s.values[0]).sum();
        let per_total: i64 = per.samples().map(|s| s.values[0]).sum();
        assert_eq!(in_host, per_total, "{pid}: host and per-process profiles agree");
        // Its files were written when it was folded (it exited at ~12 s of 28), not at the end.
        let modified = |p: String| std::fs::metadata(&p).and_then(|m| m.modified()).unwrap_or_else(|e| panic!("{p}: {e}"));
        let (per_at, host_at) = (modified(format!("{}.{pid}.cpu.pb.gz", prefix.display())), modified(format!("{}.cpu.pb.gz", prefix.display())));
        assert!(per_at + Duration::from_secs(5) < host_at, "{pid}: its file was written at the end ({per_at:?}, host {host_at:?})");
        assert!(!Path::new(&format!("/tmp/perf-{pid}.map")).exists(), "{pid}: perf map removed");
    }
    // Their runtimes' events were read and kept (on a loaded machine a session may start only
    // after a 10-s process has gone: at least two of three).
    let with_events = pids.iter().filter(|&&pid| summary["eventpipe"].as_array().unwrap().iter().any(|e| e[0] == pid && e[1].as_u64().unwrap() > 0)).count();
    assert!(with_events >= 2, "events of {with_events} of {pids:?}: {}", summary["eventpipe"]);
    // Folded frames carry no per-process address: each function is one frame in the profile.
    let spins: Vec<_> = host.frames().iter().filter(|f| &*f.name == "Cpu::Spin").collect();
    let variants: std::collections::HashSet<_> = spins.iter().map(|f| f.attrs.clone()).collect();
    assert!(spins.iter().all(|f| f.address == 0), "folded frames without address: {spins:?}");
    assert_eq!(spins.len(), variants.len(), "Cpu::Spin interned once (per tier) across the folded processes: {spins:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
