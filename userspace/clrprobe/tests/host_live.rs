//! Live, host-wide: `record --all` over several .NET processes (one in its own mount + pid
//! namespace with a private /tmp, one started while recording), launch mode from the first
//! instruction, and `ps`. Runs as root; never skips.
use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use clrprobe_tests::{Runtime, Workload, require_root};
use serde_json::Value;

mod common;
use common::{read, samples_with};

fn out_dir(name: &str) -> PathBuf {
        clrprobe_tests::scratch_dir(&format!("host-{name}"))
}

/// A workload run by `unshare --mount --pid --fork` with a tmpfs on /tmp: its diagnostics
/// socket and perf map exist only inside its own mount namespace, and it is pid 1 there.
struct Contained {
    unshare: Child,
    /// The dotnet process as the host sees it.
    pid: u32,
}

impl Drop for Contained {
    fn drop(&mut self) {
        // SAFETY: kill(2) has no memory effects; the pid is our test's own workload.
        unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok()))
                == Some(pid)
        })
        .collect()
}

fn start_contained(w: &Workload) -> Contained {
    let inner = w.command().unwrap();
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--pid", "--fork", "--mount-proc", "sh", "-c", r#"mount -t tmpfs tmpfs /tmp && exec "$@""#, "sh"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .current_dir(inner.get_current_dir().unwrap())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let mut unshare = cmd.spawn().expect("unshare runs (util-linux)");
    let (tx, rx) = mpsc::channel();
    let stdout = unshare.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    while !lines.iter().any(|l| l == "ready") {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(l) => lines.push(l),
            Err(_) => panic!("contained workload not ready: {lines:?}"),
        }
    }
    assert!(lines.contains(&"pid=1".to_string()), "the workload is pid 1 in its namespace: {lines:?}");
    let pid = children(unshare.id()).into_iter().next().expect("unshare's child is the workload");
    Contained { unshare, pid }
}

fn run_clrprobe(args: &[&str]) -> (Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_clrprobe")).args(args).output().expect("run clrprobe");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "clrprobe {args:?} failed: {stderr}");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("JSON: {e}: {stderr}"));
    (json, stderr)
}


#[test]
fn record_all_names_managed_frames_of_four_processes_one_contained_one_started_midway() {
    require_root();
    let a = Workload::new("Cpu", Runtime::Net8).arg(15).start().unwrap();
    let b = Workload::new("Cpu", Runtime::Net8).arg(15).start().unwrap();
    let c = start_contained(&Workload::new("Cpu", Runtime::Net8).arg(15));
    let dir = out_dir("all");
    let prefix = dir.join("host");
    let prefix_s = prefix.to_str().unwrap().to_string();
    let me = std::process::id().to_string();
    let rec = std::thread::spawn(move || {
        // 499 Hz: the process started midway lives 2 s (18 Spin samples at 99 Hz, load 18).
        // --parent: the .NET processes of other tests running beside this one are left alone.
        run_clrprobe(&["record", "--all", "--parent", &me, "--cpu", "-F", "499", "-d", "6", "--json", "--quiet", "--format", "pprof", "-o", &prefix_s])
    });
    std::thread::sleep(Duration::from_millis(2500));
    // Started while recording, lives 2 s.
    let mut late = Workload::new("Cpu", Runtime::Net8).arg(2).start().unwrap();
    let late_pid = late.pid;
    late.wait(Duration::from_secs(20));
    let (summary, stderr) = rec.join().unwrap();
    eprintln!("{stderr}");

    let host = read(&prefix);
    for (what, pid) in [("first", a.pid), ("second", b.pid), ("contained", c.pid), ("started midway", late_pid)] {
        let per = read(&PathBuf::from(format!("{}.{pid}", prefix.display())));
        let spin = samples_with(&per, "Cpu::Spin");
        let hot = samples_with(&per, "Cpu::HotA") + samples_with(&per, "Cpu::HotB");
        assert!(spin >= 20 && hot >= 20, "{what} ({pid}): Cpu::Spin in {spin} samples, HotA/HotB in {hot}");
        // The host profile holds the same samples under the pid label, with the process name.
        let in_host: i64 = host
            .samples()
            .filter(|s| host.labels(s.labels).unwrap().pid == Some(pid))
            .map(|s| s.values[0])
            .sum();
        let per_total: i64 = per.samples().map(|s| s.values[0]).sum();
        assert_eq!(in_host, per_total, "{what}: host and per-process profiles agree");
        let named = per.samples().all(|s| per.labels(s.labels).unwrap().process_name.is_some());
        assert!(named, "{what}: every sample carries the process name");
    }
    // Everyone's perf map was switched on by clrprobe and is off again (the files are gone).
    let maps = summary["perf_maps"].as_array().unwrap();
    for pid in [a.pid, b.pid, c.pid] {
        assert!(
            maps.iter().any(|m| m[0] == pid && m[1] == "enabled-by-clrprobe"),
            "perf map of {pid} switched on: {maps:?}"
        );
        // (An exited process: its own /tmp is gone with it; the host's is checked.)
        let map = match clrprobe_ns_pid(pid) {
            Some(ns) => format!("/proc/{pid}/root/tmp/perf-{ns}.map"),
            None => format!("/tmp/perf-{pid}.map"),
        };
        assert!(!Path::new(&map).exists(), "{map} left");
    }
    // The short-lived one was set up too (once its diagnostics socket existed).
    assert!(maps.iter().any(|m| m[0] == late_pid && m[1] == "enabled-by-clrprobe"), "perf map of {late_pid}: {maps:?}");
    assert!(!Path::new(&format!("/tmp/perf-{late_pid}.map")).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The innermost pid of a running process (None once it has exited).
fn clrprobe_ns_pid(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
}

#[test]
fn launch_mode_profiles_the_first_second() {
    require_root();
    let w = Workload::new("FirstSecond", Runtime::Net8).arg(250);
    let cmd = w.command().unwrap();
    let dir = out_dir("launch");
    let prefix = dir.join("launch");
    let out = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args(["record", "--cpu", "--quiet", "--format", "pprof", "-o"])
        .arg(&prefix)
        .arg("--")
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .current_dir(cmd.get_current_dir().unwrap())
        .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .env("DOTNET_ROOT", w.runtime.dotnet_root().unwrap())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("first done"), "the program ran to its end: {stdout}");
    let p = read(&prefix);
    // FirstSecond and Rest do the same work, FirstSecond first thing in Main: attached late,
    // the profile would have fewer FirstSecond samples than Rest samples.
    let first = samples_with(&p, "FirstSecondApp::FirstSecond");
    let rest = samples_with(&p, "FirstSecondApp::Rest");
    eprintln!("FirstSecond {first}, Rest {rest} samples");
    assert!(rest >= 20, "Rest in {rest} samples: {stderr}");
    assert!(first as f64 >= 0.6 * rest as f64, "FirstSecond in {first} samples vs Rest {rest}: {stderr}");
    // The launch's own perf map is removed after the program ends.
    let pid = p.samples().find_map(|s| p.labels(s.labels).unwrap().pid).unwrap();
    assert!(!Path::new(&format!("/tmp/perf-{pid}.map")).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ps_lists_workloads_with_their_runtime_versions_and_containers() {
    require_root();
    let n8 = Workload::new("Sleeper", Runtime::Net8).arg(20).start().unwrap();
    let n3 = Workload::new("Sleeper", Runtime::Core31).arg(20).start().unwrap();
    let c = start_contained(&Workload::new("Sleeper", Runtime::Net8).arg(20));
    let (list, _) = run_clrprobe(&["ps", "--json"]);
    let list = list.as_array().unwrap();
    let find = |pid: u32| list.iter().find(|p| p["pid"] == pid).unwrap_or_else(|| panic!("{pid} not listed: {list:?}"));
    let p8 = find(n8.pid);
    assert_eq!(p8["runtime_version"], "8.0.4");
    assert_eq!(p8["version_source"], "process-info2");
    assert_eq!(p8["container"], false);
    assert_eq!(p8["perf_map"], false);
    assert!(p8["cmdline"].as_str().unwrap().contains("Sleeper.dll"));
    let p3 = find(n3.pid);
    assert_eq!(p3["runtime_version"], "3.1.23");
    assert_eq!(p3["version_source"], "library-path", "3.1 has no ProcessInfo2");
    let pc = find(c.pid);
    assert_eq!(pc["container"], true);
    assert_eq!(pc["ns_pid"], 1);
    assert_eq!(pc["runtime_version"], "8.0.4", "reached over its socket in its own /tmp");
    // The table names the same.
    let out = Command::new(env!("CARGO_BIN_EXE_clrprobe")).arg("ps").output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    let row = table.lines().find(|l| l.split_whitespace().next() == Some(&c.pid.to_string())).expect("row");
    assert!(row.contains("8.0.4") && row.contains("yes"), "{row}");
}
