//! Live: `record --all --parent PID` over .NET processes that exit while it records. Each exited
//! process is folded into the profile while recording (and forgotten): its samples stay in the
//! host and per-process profiles with named managed frames; a .NET process that does not
//! descend from PID gets no perf map; with `--http`, a process that served requests is folded
//! with them; with `--save-raw`, a folded process replays to the same profiles. Runs as root;
//! never skips.
use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use clrprobe::http::{HttpLine, read_jsonl};
use clrprobe_tests::{Runtime, Workload, outputs, require_root};
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
    let dir = clrprobe_tests::scratch_dir("retire");
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

/// `record --all --parent THIS ARGS -o PREFIX` on its own thread (RUST_LOG=info: the folds are
/// logged): its JSON summary and stderr.
fn record_all(args: &[&str], prefix: &Path) -> std::thread::JoinHandle<(Value, String)> {
    let me = std::process::id().to_string();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clrprobe"));
    cmd.args(["record", "--all", "--parent", &me, "--json", "--quiet", "--format", "pprof"]).args(args).arg("-o").arg(prefix).env("RUST_LOG", "info");
    std::thread::spawn(move || {
        let out = cmd.output().expect("run clrprobe");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "clrprobe failed: {stderr}");
        let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("JSON: {e}: {stderr}"));
        (json, stderr)
    })
}

/// `pid` was folded while the recording ran: logged, and its `PREFIX.PID.cpu.pb.gz` written
/// well before the host's files.
fn assert_folded_while_recording(pid: u32, prefix: &Path, stderr: &str, summary: &Value) {
    assert!(stderr.contains(&format!("fold: {pid} folded in")), "{pid} was not folded: {}", stderr.lines().filter(|l| l.contains("fold")).collect::<Vec<_>>().join("\n"));
    assert!(summary["folded_processes"].as_u64().is_some_and(|n| n >= 1), "folded: {}", summary["folded_processes"]);
    let modified = |p: String| std::fs::metadata(&p).and_then(|m| m.modified()).unwrap_or_else(|e| panic!("{p}: {e}"));
    let (per_at, host_at) = (modified(format!("{}.{pid}.cpu.pb.gz", prefix.display())), modified(format!("{}.cpu.pb.gz", prefix.display())));
    assert!(per_at + Duration::from_secs(5) < host_at, "{pid}: its file was written at the end ({per_at:?}, host {host_at:?})");
}

/// CPU samples of `pid` in `p`.
fn cpu_of(p: &clrprobe_profile::Profile, pid: u32) -> i64 {
    let col = p.sample_type_index("cpu").expect("cpu kind");
    p.samples().filter(|s| p.labels(s.labels).unwrap().pid == Some(pid)).map(|s| s.values[col]).sum()
}

#[test]
fn record_all_http_folds_a_process_that_served_requests_and_keeps_them() {
    require_root();
    const ROUNDS: u64 = 10;
    const SLOW_MS: u32 = 300;
    let dir = outputs::out_dir("retire", "http");
    let prefix = dir.join("host");
    let rec = record_all(&["--http", "--cpu", "--offcpu", "-d", "26"], &prefix);
    std::thread::sleep(Duration::from_millis(2000));
    // Serves and sends 10 rounds of /fast, /slow and /missing once its session is on, then
    // exits (6 s after ready at the earliest) while the recording goes on.
    let mut w = Workload::new("Http", Runtime::Net8).arg(6).arg(ROUNDS).arg(SLOW_MS).arg(30_000).arg("localhost").start().unwrap();
    w.wait_for_line("sent ", Duration::from_secs(40)).expect("the client finished its requests");
    w.wait(Duration::from_secs(20));
    let pid = w.pid;
    assert!(w.output().iter().any(|l| l == "session=on"), "the requests ran before the session was on: {:?}", w.output());
    let tally: BTreeMap<(String, i32), u64> = w
        .output()
        .iter()
        .filter_map(|l| l.strip_prefix("count "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            ((f[0].to_string(), f[1].parse().unwrap()), f[2].parse().unwrap())
        })
        .collect();
    let (summary, stderr) = rec.join().unwrap();
    assert_folded_while_recording(pid, &prefix, &stderr, &summary);
    // Its requests are in the final outputs, each of the client's tally, the slowest with
    // what their threads did meanwhile (placed among its samples when it was folded).
    let lines: Vec<HttpLine> = read_jsonl(&outputs::with_suffix(&prefix, "http.jsonl")).unwrap().into_iter().filter(|l| l.pid == pid).collect();
    let mut got: BTreeMap<(String, i32), u64> = BTreeMap::new();
    for l in &lines {
        *got.entry((l.path.clone(), l.status.unwrap_or(-1))).or_insert(0) += 1;
    }
    eprintln!("{pid}: {} requests {got:?}, client {tally:?}", lines.len());
    assert_eq!(got, tally, "the folded process's requests by (path, status) vs its client's own count");
    assert_eq!(lines.len() as u64, 3 * ROUNDS);
    let mut by_time: Vec<&HttpLine> = lines.iter().collect();
    by_time.sort_by(|a, b| b.duration_ms.total_cmp(&a.duration_ms));
    // Every /slow request took its server's delay; the slowest of all at least that (on a
    // loaded host the first /fast, with its connection set up and code JIT-compiled, can be
    // slower still: 874 ms at load 20).
    for l in lines.iter().filter(|l| l.path == "/slow") {
        assert!(l.duration_ms >= f64::from(SLOW_MS), "{l:?}");
    }
    assert!(by_time[0].duration_ms >= f64::from(SLOW_MS), "{:?}", by_time[0]);
    for l in &by_time[..5] {
        let m = l.meanwhile.as_ref().unwrap_or_else(|| panic!("the slowest say what their threads did: {l:?}"));
        assert!(m.offcpu_ms.is_some_and(|o| o > 0.0) && !m.offcpu_top.is_empty(), "{m:?}");
    }
    let report = summary["http"].as_array().unwrap().iter().find(|r| r["pid"] == pid).cloned().expect("its HTTP report in the summary");
    let count: u64 = report["by_host_path"].as_array().unwrap().iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert_eq!(count, 3 * ROUNDS, "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn record_all_save_raw_replays_a_folded_process_to_the_same_profiles() {
    require_root();
    let dir = outputs::out_dir("retire", "raw");
    let (prefix, raw) = (dir.join("host"), dir.join("raw"));
    let rec = record_all(&["-d", "18", "-F", "499", "--save-raw", raw.to_str().unwrap()], &prefix);
    std::thread::sleep(Duration::from_millis(2000));
    // Spins, allocates, throws and contends for 5 s, then exits while the recording goes on.
    let mut w = Workload::new("Mixed", Runtime::Net8).arg(5.0).start().unwrap();
    w.wait(Duration::from_secs(30));
    let pid = w.pid;
    let (summary, stderr) = rec.join().unwrap();
    assert_folded_while_recording(pid, &prefix, &stderr, &summary);
    assert!(stderr.contains("saved the raw inputs"), "{stderr}");
    // Twice: the same bytes.
    let mut replays = Vec::new();
    for n in ["one", "two"] {
        let out = outputs::run(Command::new(env!("CARGO_BIN_EXE_clrprobe")).args(["report", "--replay"]).arg(&raw).arg("-o").arg(dir.join(n)));
        eprintln!("{out}");
        replays.push(outputs::files(&dir.join(n)));
    }
    assert!(replays[0].contains_key("cpu.pb.gz") && replays[0].contains_key("events.json"), "{:?}", replays[0].keys().collect::<Vec<_>>());
    assert_eq!(replays[0].keys().collect::<Vec<_>>(), replays[1].keys().collect::<Vec<_>>());
    for (file, bytes) in &replays[0] {
        assert!(bytes == &replays[1][file], "{file}: the two replays differ");
    }
    // The folded process's samples are in the replay, its code named, as many as live.
    let (live, replay) = (read(&prefix), read(&dir.join("one")));
    let (l, r) = (cpu_of(&live, pid), cpu_of(&replay, pid));
    let spin = samples_with(&replay, "Mixed::Spin");
    eprintln!("{pid}: CPU samples live {l}, replay {r}; Mixed::Spin in the replay {spin}");
    assert!(l > 0 && r == l, "{pid}: CPU samples live {l}, replay {r}");
    assert!(spin > 0, "the folded process's code named in the replay");
    // Its event report the same: the exceptions it threw, its lock's waits.
    let report = |p: &Path| -> Value {
        let v = outputs::events_json(p);
        v["reports"].as_array().unwrap().iter().find(|r| r[0] == pid).map(|r| r[1].clone()).unwrap_or_else(|| panic!("no report of {pid} in {}: {v}", p.display()))
    };
    let (lr, rr) = (report(&prefix), report(&dir.join("one")));
    assert!(lr["exceptions_by_type"].as_array().is_some_and(|a| !a.is_empty()), "{lr}");
    assert_eq!(lr["exceptions_by_type"], rr["exceptions_by_type"]);
    assert_eq!(lr["contention"]["waits"], rr["contention"]["waits"]);
    let _ = std::fs::remove_dir_all(&dir);
}
