//! A .NET process in its own mount namespace with a private /tmp: its perf map exists only
//! under /proc/PID/root, and must still be found and read.
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use clrprobe_symbolizer::{FrameKind, ProcessSymbolizer};
use clrprobe_tests::{Runtime, Workload};

#[test]
fn perf_map_behind_a_private_tmp() {
    clrprobe_tests::require_root();
    let inner = Workload::new("Cpu", Runtime::Net8).arg(20).env("DOTNET_PerfMapEnabled", "1").command().unwrap_or_else(|e| panic!("{e}"));
    // unshare and sh exec in place: the pid we get is the runtime's.
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", "mount -t tmpfs clrprobe-private-tmp /tmp && exec \"$0\" \"$@\""])
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    if let Some(dir) = inner.get_current_dir() {
        cmd.current_dir(dir);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("unshare (util-linux) runs");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut ticks = 0;
    while ticks < 3 {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(l) if l.starts_with("tick") => ticks += 1,
            Ok(_) => {}
            Err(e) => {
                let _ = child.kill();
                panic!("workload in a private mount namespace printed no ticks: {e}");
            }
        }
    }
    let host_view = std::path::PathBuf::from(format!("/tmp/perf-{pid}.map"));
    let result = std::panic::catch_unwind(|| {
        assert!(!host_view.exists(), "the perf map leaked to the host /tmp: the test sets up nothing");
        let mut s = ProcessSymbolizer::new(pid).unwrap_or_else(|e| panic!("{e}"));
        assert!(s.perf_map().len() > 100, "perf map not read through /proc/{pid}/root: {} records", s.perf_map().len());
        let hot = s.perf_map().iter().find(|r| r.name.contains("Cpu::HotA")).map(|r| r.start).expect("HotA in the map");
        let f = &s.symbolize(&[hot])[0];
        assert_eq!((f.name.as_str(), f.kind), ("Cpu::HotA", FrameKind::Jit), "{f:?}");
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
