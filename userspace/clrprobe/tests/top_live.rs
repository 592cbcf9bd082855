//! Live: `clrprobe top -p PID` in a real terminal (tmux), on a workload that burns CPU,
//! allocates and throws; a captured screen shows live, nonzero numbers, `q` quits, the
//! terminal is restored and the target's perf map is switched off again. Never skips.
use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use clrprobe_tests::{Runtime, Workload, require_root};

fn tmux(args: &[&str]) -> std::process::Output {
    Command::new("tmux").args(args).output().expect("tmux installed (cargo xtask test installs it)")
}

fn capture(session: &str) -> String {
    String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", session]).stdout).into_owned()
}

/// The per-second value of the row named `name` in the table titled `title`.
fn rate_of(screen: &str, title: &str, name: &str) -> Option<f64> {
    let table = screen.lines().skip_while(|l| !l.contains(title)).take_while(|l| !l.starts_with('└'));
    let line = table.into_iter().find(|l| l.split_whitespace().any(|w| w.trim_matches('│') == name))?;
    line.trim_start_matches('│').split_whitespace().next()?.parse().ok()
}

#[test]
fn top_under_tmux_shows_live_cpu_allocation_and_exception_rates_and_quits_on_q() {
    require_root();
    let w = Workload::new("AllocThrow", Runtime::Net8).arg(30).start().unwrap();
    let session = format!("clrprobe-top-{}", std::process::id());
    let bin = env!("CARGO_BIN_EXE_clrprobe");
    let obj = std::env::var("CLRPROBE_BPF_OBJ").unwrap_or_default();
    let cmd = format!("CLRPROBE_BPF_OBJ='{obj}' {bin} top -p {} -d 25; echo exited=$?; sleep 30", w.pid);
    let out = tmux(&["new-session", "-d", "-s", &session, "-x", "200", "-y", "50", &cmd]);
    assert!(out.status.success(), "tmux: {}", String::from_utf8_lossy(&out.stderr));
    // Wait for a screen where every table has a live rate.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut screen = String::new();
    let mut live = false;
    while Instant::now() < deadline && !live {
        std::thread::sleep(Duration::from_millis(500));
        screen = capture(&session);
        let cpu = screen.lines().find_map(|l| l.strip_prefix("clrprobe top").map(str::to_string));
        let samples = cpu.and_then(|l| l.split("samples/s ").nth(1)?.split_whitespace().next()?.parse::<f64>().ok());
        live = samples.is_some_and(|s| s > 10.0)
            && rate_of(&screen, "Allocations by type", "Node").is_some_and(|r| r > 0.0)
            && rate_of(&screen, "Exceptions by type", "System.InvalidOperationException").is_some_and(|r| r > 0.0)
            && screen.contains("AllocThrow::");
    }
    eprintln!("{screen}");
    assert!(live, "no live numbers on screen:\n{screen}");
    assert!(screen.contains("AllocThrow::"), "managed frames named on screen:\n{screen}");
    let perf_map = format!("/tmp/perf-{}.map", w.pid);
    assert!(Path::new(&perf_map).exists(), "top switched the perf map on");
    tmux(&["send-keys", "-t", &session, "q"]);
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline && !capture(&session).contains("exited=") {
        std::thread::sleep(Duration::from_millis(200));
    }
    let after = capture(&session);
    tmux(&["kill-session", "-t", &session]);
    assert!(after.contains("exited=0"), "top quit on q with status 0:\n{after}");
    assert!(!after.contains("clrprobe top"), "the alternate screen is gone (terminal restored):\n{after}");
    assert!(!Path::new(&perf_map).exists(), "the perf map is switched off and removed");
}
