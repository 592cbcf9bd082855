//! Live lifecycle tests, as root: clrprobe ends within 2 s of Ctrl-C whatever the target does
//! (SIGSTOPped, with and without `--all`; a fake diagnostics socket that never answers), a
//! SIGKILLed clrprobe gets its perf map switched off by the guardian, two recordings of one
//! process share its perf map, and `-p PARENT` / launch mode follow forked .NET children.
use std::{
    io::Read,
    os::unix::net::UnixListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use clrprobe_profile::Profile;
use clrprobe_tests::{Runtime, Workload, require_root};
use serde_json::Value;

fn out_dir(name: &str) -> PathBuf {
        clrprobe_tests::scratch_dir(&format!("life-{name}"))
}

/// A clrprobe run in the background, its output gathered.
struct Probe {
    child: Child,
    out: Arc<Mutex<Vec<u8>>>,
    err: Arc<Mutex<Vec<u8>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

fn spawn(args: &[&str]) -> Probe {
    let mut child = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run clrprobe");
    let (out, err) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
    let mut threads = Vec::new();
    for (stream, buf) in [
        (Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>, Arc::clone(&out)),
        (Box::new(child.stderr.take().unwrap()) as Box<dyn Read + Send>, Arc::clone(&err)),
    ] {
        threads.push(std::thread::spawn(move || {
            let mut stream = stream;
            let mut b = [0u8; 4096];
            while let Ok(n) = stream.read(&mut b) {
                if n == 0 {
                    break;
                }
                buf.lock().unwrap().extend_from_slice(&b[..n]);
            }
        }));
    }
    Probe { child, out, err, threads }
}

impl Probe {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().unwrap()).into_owned()
    }

    /// Waits until the live status line shows CPU samples (the recording is under way).
    fn wait_samples(&self, timeout: Duration) -> bool {
        wait_until(timeout, || {
            self.stderr().split("clrprobe: ").any(|status| {
                status.split_whitespace().collect::<Vec<_>>().windows(2).any(|w| w[1] == "samples" && w[0].parse::<u64>().is_ok_and(|n| n > 0))
            })
        })
        .is_some()
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Waits for the exit (at most `timeout`, then kills it); returns how long it took and
    /// whether it succeeded.
    fn wait(mut self, timeout: Duration) -> (Duration, bool, String, String) {
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break Some(s);
            }
            if t0.elapsed() > timeout {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let took = t0.elapsed();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let out = String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned();
        (took, status.is_some_and(|s| s.success()), out, self.stderr())
    }
}

/// Every kind's pprof of a recording's prefix, as one profile.
fn read(prefix: &Path) -> Profile {
    clrprobe::report::load(&[prefix.to_path_buf()]).unwrap_or_else(|e| panic!("{}: {e}", prefix.display()))
}

/// CPU samples of `pid` whose stack has a frame named `name`.
fn samples_with(p: &Profile, name: &str) -> i64 {
    let col = p.sample_type_index("cpu").expect("cpu kind");
    p.samples()
        .filter(|s| p.stack(s.stack).unwrap().iter().any(|&f| &*p.frame(f).unwrap().name == name))
        .map(|s| s.values[col])
        .sum()
}

/// Is the target's perf map on? The runtime holds the file open while it is.
fn perf_map_open(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten().any(|e| {
        std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().contains(&format!("/tmp/perf-{pid}.map")))
    })
}

fn perf_map_files_exist(pid: u32) -> bool {
    Path::new(&format!("/tmp/perf-{pid}.map")).exists() || Path::new(&format!("/tmp/perfinfo-{pid}.map")).exists()
}

fn state_entries(pid: u32) -> Vec<String> {
    std::fs::read_dir("/run/clrprobe")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!("t-{pid}-")))
        .collect()
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if f() {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn kill(pid: u32, sig: i32) {
    // SAFETY: kill(2) of a process this test started.
    unsafe { libc::kill(pid as i32, sig) };
}

/// Ctrl-C with the target stopped: ends within 2 s, writes the profile, says why.
fn sigstopped(all: bool) {
    require_root();
    let target = Workload::new("Cpu", Runtime::Net8).arg(60).start().unwrap();
    let dir = out_dir(if all { "stop-all" } else { "stop-p" });
    let prefix = dir.join("p");
    let pid = target.pid.to_string();
    let me = std::process::id().to_string();
    let mut args = vec!["record", "--format", "pprof", "-o", prefix.to_str().unwrap()];
    if all {
        // CPU samples (and the EventPipe session every .NET process gets) of the whole host;
        // off-CPU stacks of every thread on a busy host make the unoptimized test build slow.
        // --parent: other tests' .NET processes are not set up (nor stopped under).
        args.extend(["--all", "--parent", &me, "--cpu", "-F", "49"]);
    } else {
        args.extend(["-p", &pid]);
    }
    let probe = spawn(&args);
    assert!(
        wait_until(Duration::from_secs(20), || perf_map_open(target.pid)).is_some(),
        "the perf map of the target was not switched on: {}",
        probe.stderr()
    );
    assert!(probe.wait_samples(Duration::from_secs(20)), "no samples: {}", probe.stderr());
    std::thread::sleep(Duration::from_secs(1));
    kill(target.pid, libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(500));
    probe.signal(libc::SIGINT);
    let (took, ok, _, stderr) = probe.wait(Duration::from_secs(15));
    kill(target.pid, libc::SIGCONT);
    eprintln!("clrprobe ended {took:?} after SIGINT");
    if std::env::var_os("RUST_LOG").is_some() {
        eprintln!("{}", stderr.lines().filter(|l| l.contains("stop:")).collect::<Vec<_>>().join("\n"));
    }
    assert!(took <= Duration::from_secs(2), "clrprobe took {took:?} to end after SIGINT: {stderr}");
    assert!(ok, "clrprobe failed: {stderr}");
    let profile = read(&prefix);
    assert!(samples_with(&profile, "Cpu::Spin") > 0, "the samples before the stop are kept and named: {stderr}");
    assert!(
        stderr.contains(&format!("the runtime of pid {pid} did not finish its EventPipe session")),
        "the reason is printed: {stderr}"
    );
}

#[test]
fn sigstopped_target_record_p_ends_within_2s_of_sigint() {
    sigstopped(false);
}

#[test]
fn sigstopped_target_record_all_ends_within_2s_of_sigint() {
    sigstopped(true);
}

/// A diagnostics server that answers CollectTracing (every version) with a session id and then nothing
/// (no stream, no reply to StopTracing, EnablePerfMap or anything else).
fn fake_server(path: &Path) -> Arc<Mutex<Vec<std::os::unix::net::UnixStream>>> {
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path).unwrap();
    let held = Arc::new(Mutex::new(Vec::new()));
    let h = Arc::clone(&held);
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { break };
            let mut head = [0u8; 20];
            if c.read_exact(&mut head).is_ok() && head[16] == 0x02 && head[17] >= 0x02 {
                use std::io::Write;
                let mut reply = b"DOTNET_IPC_V1\0".to_vec();
                reply.extend_from_slice(&28u16.to_le_bytes());
                reply.extend_from_slice(&[0xFF, 0x00, 0, 0]);
                reply.extend_from_slice(&1u64.to_le_bytes());
                let _ = c.write_all(&reply);
            }
            h.lock().unwrap().push(c);
        }
    });
    held
}

#[test]
fn fake_socket_that_never_answers_stoptracing_ends_within_2s_of_sigint() {
    require_root();
    // A real runtime without its diagnostics server; the fake one takes its place.
    let target = Workload::new("Cpu", Runtime::Net8).arg(60).env("DOTNET_EnableDiagnostics", "0").start().unwrap();
    let start = std::fs::read_to_string(format!("/proc/{}/stat", target.pid)).unwrap();
    let start: u64 = start[start.rfind(')').unwrap() + 1..].split_whitespace().nth(19).unwrap().parse().unwrap();
    let sock = PathBuf::from(format!("/tmp/dotnet-diagnostic-{}-{start}-socket", target.pid));
    let held = fake_server(&sock);
    let dir = out_dir("fake");
    let prefix = dir.join("p");
    let pid = target.pid.to_string();
    let probe = spawn(&["record", "-p", &pid, "--format", "pprof", "-o", prefix.to_str().unwrap()]);
    // Set-up: EnablePerfMap is never answered (2 s bound), CollectTracing is.
    assert!(
        wait_until(Duration::from_secs(15), || held.lock().unwrap().len() >= 2).is_some(),
        "clrprobe connected to the fake server twice: {}",
        probe.stderr()
    );
    std::thread::sleep(Duration::from_secs(1));
    probe.signal(libc::SIGINT);
    let (took, ok, _, stderr) = probe.wait(Duration::from_secs(15));
    let _ = std::fs::remove_file(&sock);
    eprintln!("clrprobe ended {took:?} after SIGINT");
    if std::env::var_os("RUST_LOG").is_some() {
        eprintln!("{}", stderr.lines().filter(|l| l.contains("stop:")).collect::<Vec<_>>().join("\n"));
    }
    assert!(took <= Duration::from_secs(2), "clrprobe took {took:?} to end after SIGINT: {stderr}");
    assert!(ok, "clrprobe failed: {stderr}");
    assert!(PathBuf::from(format!("{}.cpu.pb.gz", prefix.display())).exists(), "the profile is written: {stderr}");
    assert!(stderr.contains("did not finish its EventPipe session"), "the reason is printed: {stderr}");
}

#[test]
fn sigkill_of_clrprobe_mid_record_switches_the_map_off_within_2s() {
    require_root();
    let target = Workload::new("Cpu", Runtime::Net8).arg(60).start().unwrap();
    let dir = out_dir("kill9");
    let pid = target.pid.to_string();
    let probe = spawn(&["record", "-p", &pid, "--format", "pprof", "-o", dir.join("p").to_str().unwrap()]);
    assert!(wait_until(Duration::from_secs(20), || perf_map_open(target.pid)).is_some(), "map on: {}", probe.stderr());
    assert!(probe.wait_samples(Duration::from_secs(20)), "no samples: {}", probe.stderr());
    assert_eq!(state_entries(target.pid).len(), 1, "its state is recorded");
    std::thread::sleep(Duration::from_secs(1));
    probe.signal(libc::SIGKILL);
    let t0 = Instant::now();
    let off = wait_until(Duration::from_secs(10), || !perf_map_open(target.pid) && !perf_map_files_exist(target.pid));
    let (_, _, _, stderr) = probe.wait(Duration::from_secs(5));
    let off = off.unwrap_or_else(|| panic!("the map is still on {:?} after SIGKILL: {stderr}", t0.elapsed()));
    assert!(off <= Duration::from_secs(2), "the guardian switched the map off in {off:?}");
    assert!(wait_until(Duration::from_secs(2), || state_entries(target.pid).is_empty()).is_some(), "state entry removed");
    eprintln!("map off {off:?} after SIGKILL");
}

#[test]
fn two_overlapping_recordings_share_the_map_and_it_goes_off_after_both() {
    require_root();
    let target = Workload::new("Cpu", Runtime::Net8).arg(60).start().unwrap();
    let dir = out_dir("two");
    let (pa, pb) = (dir.join("a"), dir.join("b"));
    let pid = target.pid.to_string();
    let a = spawn(&["record", "-p", &pid, "-d", "8", "--cpu", "--format", "pprof", "--json", "-o", pa.to_str().unwrap()]);
    assert!(wait_until(Duration::from_secs(20), || perf_map_open(target.pid)).is_some(), "map on: {}", a.stderr());
    assert!(a.wait_samples(Duration::from_secs(20)), "no samples: {}", a.stderr());
    let b = spawn(&["record", "-p", &pid, "-d", "2", "--cpu", "--format", "pprof", "--json", "-o", pb.to_str().unwrap()]);
    let (_, ok_b, out_b, err_b) = b.wait(Duration::from_secs(30));
    assert!(ok_b, "second recording: {err_b}");
    assert!(perf_map_open(target.pid) && perf_map_files_exist(target.pid), "the first recording still has its map: {err_b}");
    let (_, ok_a, out_a, err_a) = a.wait(Duration::from_secs(30));
    assert!(ok_a, "first recording: {err_a}");
    assert!(
        wait_until(Duration::from_secs(2), || !perf_map_open(target.pid) && !perf_map_files_exist(target.pid)).is_some(),
        "the map is off after both"
    );
    assert!(state_entries(target.pid).is_empty());
    for (out, err, prefix) in [(out_a, err_a, &pa), (out_b, err_b, &pb)] {
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("JSON {e}: {err}"));
        let managed = v["managed_samples"].as_u64().unwrap();
        let named = v["managed_named_samples"].as_u64().unwrap();
        assert!(managed > 0 && named as f64 >= 0.95 * managed as f64, "{named} of {managed} managed samples named: {err}");
        assert_eq!(v["perf_maps"][0][1], "enabled-by-clrprobe", "{err}");
        assert!(samples_with(&read(prefix), "Cpu::Spin") > 0);
    }
}

/// `sh -c 'sleep 1; dotnet Cpu.dll 4'`: the .NET work runs in a forked child.
fn forking_parent() -> Command {
    let inner = Workload::new("Cpu", Runtime::Net8).arg(4).command().unwrap();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", r#"sleep 1; "$@"; true"#, "sh"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .current_dir(inner.get_current_dir().unwrap())
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd
}

/// The .NET processes a recording followed as children (not named or launched).
fn dotnet_children(summary: &Value) -> Vec<u32> {
    summary["recorded"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["dotnet"] == true && r["parent"].as_u64().is_some())
        .filter_map(|r| r["pid"].as_u64().map(|p| p as u32))
        .collect()
}

#[test]
fn record_p_parent_records_its_forked_dotnet_child_and_says_so() {
    require_root();
    let mut parent = forking_parent().spawn().unwrap();
    let dir = out_dir("child");
    let prefix = dir.join("p");
    let pid = parent.id().to_string();
    let probe = spawn(&["record", "-p", &pid, "--cpu", "--format", "pprof", "-o", prefix.to_str().unwrap()]);
    let (took, ok, out, stderr) = probe.wait(Duration::from_secs(40));
    let _ = parent.wait();
    assert!(ok, "record failed ({took:?}): {stderr}");
    assert!(out.contains("pids recorded:") && out.contains(&format!("child of {pid}")), "summary names the child: {out}");
    let profile = read(&prefix);
    assert!(samples_with(&profile, "Cpu::Spin") > 0, "the child's managed frames are recorded and named: {out}");
}

#[test]
fn launch_mode_through_sh_follows_the_child_and_removes_its_files() {
    require_root();
    let dir = out_dir("launch");
    let prefix = dir.join("p");
    let inner = Workload::new("Cpu", Runtime::Net8).arg(3).command().unwrap();
    let program = inner.get_program().to_str().unwrap().to_string();
    let dll: Vec<String> = inner.get_args().map(|a| a.to_str().unwrap().to_string()).collect();
    let script = format!("cd {}; DOTNET_ROOT={} DOTNET_SYSTEM_GLOBALIZATION_INVARIANT=1 {} {} >/dev/null; true",
        inner.get_current_dir().unwrap().display(),
        Path::new(&program).parent().unwrap().display(),
        program,
        dll.join(" "));
    let probe = spawn(&["record", "--cpu", "--json", "--format", "pprof", "-o", prefix.to_str().unwrap(), "--", "sh", "-c", &script]);
    let (took, ok, out, stderr) = probe.wait(Duration::from_secs(40));
    assert!(ok, "launch failed ({took:?}): {stderr}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("JSON {e}: {stderr}"));
    let kids = dotnet_children(&v);
    assert_eq!(kids.len(), 1, "the dotnet child of sh is followed: {}", v["recorded"]);
    let child = kids[0];
    // Removed by the last clrprobe on the child (this one, or a host-wide one that also
    // follows it and retires it within a second of its exit).
    let files = [format!("/tmp/perf-{child}.map"), format!("/tmp/perfinfo-{child}.map"), format!("/tmp/jit-{child}.dump")];
    let gone = wait_until(Duration::from_secs(3), || files.iter().all(|f| !Path::new(f).exists()) && state_entries(child).is_empty());
    assert!(gone.is_some(), "{files:?} are removed after the launched tree ended");
    assert!(samples_with(&read(&prefix), "Cpu::Spin") > 0, "{stderr}");
}

#[test]
fn a_second_ctrl_c_exits_at_once_and_the_guardian_switches_the_map_off() {
    require_root();
    let target = Workload::new("Cpu", Runtime::Net8).arg(60).start().unwrap();
    let dir = out_dir("twice");
    let pid = target.pid.to_string();
    let probe = spawn(&["record", "-p", &pid, "--format", "pprof", "-o", dir.join("p").to_str().unwrap()]);
    assert!(wait_until(Duration::from_secs(20), || perf_map_open(target.pid)).is_some(), "map on: {}", probe.stderr());
    assert!(probe.wait_samples(Duration::from_secs(20)), "no samples: {}", probe.stderr());
    // Stopped, the target makes the first Ctrl-C's clean-up wait for it; the second ends it now.
    kill(target.pid, libc::SIGSTOP);
    probe.signal(libc::SIGINT);
    std::thread::sleep(Duration::from_millis(50));
    probe.signal(libc::SIGINT);
    let (took, ok, _, stderr) = probe.wait(Duration::from_secs(15));
    kill(target.pid, libc::SIGCONT);
    assert!(!ok, "the second Ctrl-C exits with 128+SIGINT: {stderr}");
    assert!(took <= Duration::from_millis(500), "exited {took:?} after the second Ctrl-C: {stderr}");
    let off = wait_until(Duration::from_secs(10), || !perf_map_open(target.pid) && !perf_map_files_exist(target.pid));
    assert!(off.is_some_and(|t| t <= Duration::from_secs(2)), "map off within 2 s of the resume: {off:?}");
}
