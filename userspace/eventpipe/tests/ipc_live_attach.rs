//! Live tests of attaching in harder settings: a runtime suspended at startup (ResumeRuntime) and
//! a runtime in its own pid + mount namespace with a private /tmp (container-style discovery).
use std::{
    io::{BufRead, BufReader, Read},
    process::{Child, Command, Stdio},
    sync::{Mutex, MutexGuard, mpsc},
    thread,
    time::{Duration, Instant},
};

use clrprobe_eventpipe::ipc::{Client, IpcError, SessionConfig, find_socket, parse_providers};
use clrprobe_tests::{Runtime, Workload};

/// Serialises workload start-up (see ipc_live.rs: the test bed rewrites runtimeconfig.json
/// non-atomically on every start). Held until the host has read it.
static STARTING: Mutex<()> = Mutex::new(());

fn starting() -> MutexGuard<'static, ()> {
    STARTING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Kills and reaps the child when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_lines(mut cmd: Command) -> (Reaped, mpsc::Receiver<String>) {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("spawn");
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (Reaped(child), rx)
}

fn wait_line(rx: &mpsc::Receiver<String>, prefix: &str, timeout: Duration) -> Option<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.starts_with(prefix) => return Some(l),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
}

fn wait_socket(pid: u32) -> Client {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match Client::for_pid(pid) {
            Ok(c) => return c,
            Err(IpcError::NoSocket { .. }) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("no diagnostics socket for {pid}: {e}"),
        }
    }
}

#[test]
fn resume_runtime_releases_a_suspended_net8_runtime() {
    let guard = starting();
    let cmd = Workload::new("Exceptions", Runtime::Net8)
        .arg(30)
        .arg(0)
        .arg(0)
        .env("DOTNET_DefaultDiagnosticPortSuspend", "1")
        .command()
        .expect("command");
    let (child, rx) = spawn_lines(cmd);
    let c = wait_socket(child.0.id());
    drop(guard);
    // Suspended before Main: the diagnostics server answers, managed code has not run.
    let info = c.process_info().expect("ProcessInfo while suspended");
    assert_eq!(info.pid, u64::from(child.0.id()));
    assert!(wait_line(&rx, "ready", Duration::from_millis(1500)).is_none(), "runtime ran without ResumeRuntime");
    let t = Instant::now();
    c.resume_runtime().expect("ResumeRuntime");
    assert!(wait_line(&rx, "ready", Duration::from_secs(20)).is_some(), "not ready after ResumeRuntime");
    eprintln!("ready {:?} after ResumeRuntime", t.elapsed());
    // A second resume is harmless.
    c.resume_runtime().expect("second ResumeRuntime");
}

#[test]
fn core31_resume_runtime_is_unknown_command() {
    let w = {
        let _g = starting();
        Workload::new("Exceptions", Runtime::Core31).arg(30).arg(0).arg(0).start().expect("start")
    };
    let err = Client::for_pid(w.pid).expect("socket").resume_runtime().expect_err("3.1 has no ResumeRuntime");
    assert!(err.is_unknown_command(), "{err:?}");
}

#[test]
fn finds_a_runtime_in_its_own_pid_and_mount_namespace() {
    // unshare: new pid + mount namespace, private tmpfs on /tmp, then exec the workload as pid 1.
    let guard = starting();
    let inner = Workload::new("Exceptions", Runtime::Net8).arg(30).arg(20).arg(0).arg(2500).command().expect("command");
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount", "--mount-proc", "--kill-child", "sh", "-c", "mount -t tmpfs tmpfs /tmp && exec \"$0\" \"$@\""]);
    cmd.arg(inner.get_program()).args(inner.get_args());
    if let Some(dir) = inner.get_current_dir() {
        cmd.current_dir(dir);
    }
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let (unshare, rx) = spawn_lines(cmd);
    let pid_line = wait_line(&rx, "pid=", Duration::from_secs(30)).expect("workload started in the namespace");
    drop(guard);
    assert_eq!(pid_line, "pid=1", "the workload should be pid 1 of its namespace");
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", unshare.0.id())).expect("children");
    let host_pid: u32 = children.split_whitespace().next().and_then(|p| p.parse().ok()).expect("unshare's child");

    let ep = find_socket(host_pid).expect("socket through /proc/PID/root/tmp");
    let path = ep.path().to_string_lossy().into_owned();
    assert!(path.starts_with(&format!("/proc/{host_pid}/root/tmp/dotnet-diagnostic-1-")), "{path}");
    let c = Client::new(ep);
    let info = c.process_info().expect("ProcessInfo across namespaces");
    assert_eq!(info.pid, 1, "the runtime reports its namespaced pid");
    // A session works across the namespace boundary too.
    let config = SessionConfig { request_rundown: false, ..SessionConfig::with_providers(parse_providers("exception:verbose").unwrap()) };
    let mut s = c.start_session(&config).expect("session");
    let mut head = [0u8; 8];
    s.read_exact(&mut head).expect("stream");
    assert_eq!(&head, b"Nettrace");
    assert!(wait_line(&rx, "thrown", Duration::from_secs(20)).is_some(), "workload did not throw");
    thread::sleep(Duration::from_millis(1000));
    let mut rest = Vec::new();
    s.finish(&mut rest).expect("finish");
    let boom: Vec<u8> = "boom".encode_utf16().flat_map(u16::to_le_bytes).collect();
    let n = rest.windows(boom.len()).filter(|w| *w == &boom[..]).count();
    assert!(n >= 20, "expected 20 \"boom\" exception messages, saw {n}");
    eprintln!("namespaced runtime: host pid {host_pid}, socket {path}, {} stream bytes, {n} exceptions", rest.len() + 8);
}
