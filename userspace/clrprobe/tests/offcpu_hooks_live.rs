//! Live: off-CPU recording places no host-wide syscall hook unless asked to. A `sys_exit`
//! raw tracepoint taxes every syscall of every process on the host (the kernel's slow exit
//! path for all threads); off-CPU stacks are taken at switch-out instead.
use std::{
    collections::BTreeSet,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use clrprobe_tests::{Runtime, Workload, require_root};

/// BPF program types (uapi `enum bpf_prog_type`).
const TRACEPOINT: u32 = 5;
const RAW_TRACEPOINT: u32 = 17;

/// The types of the BPF programs `pid` holds open, from its fdinfo.
fn prog_types(pid: u32) -> BTreeSet<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else { return BTreeSet::new() };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|info| info.lines().find_map(|l| l.strip_prefix("prog_type:")).and_then(|t| t.trim().parse().ok()))
        .collect()
}

/// The program types clrprobe held while recording off-CPU time of a workload for 3 s.
fn types_while_recording(defer: Option<&str>) -> BTreeSet<u32> {
    require_root();
    let w = Workload::new("Switches", Runtime::Net8).arg(20).arg(30).start().unwrap();
    let out = std::env::temp_dir().join(format!("clrprobe-hooks-{}-{}", std::process::id(), defer.unwrap_or("default")));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clrprobe"));
    cmd.args(["record", "--offcpu", "--quiet", "--format", "pprof", "-d", "3", "-p", &w.pid.to_string(), "-o", out.to_str().unwrap()]);
    cmd.env_remove("CLRPROBE_DEFER_USER");
    if let Some(v) = defer {
        cmd.env("CLRPROBE_DEFER_USER", v);
    }
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let mut seen = BTreeSet::new();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(30) {
        seen.extend(prog_types(child.id()));
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "clrprobe record --offcpu failed: {status}");
    let _ = std::fs::remove_file(out.with_extension("offcpu.pb.gz"));
    seen
}

#[test]
fn off_cpu_recording_places_no_syscall_exit_hook_by_default() {
    let types = types_while_recording(None);
    assert!(types.contains(&TRACEPOINT), "sched_switch was not attached: {types:?}");
    assert!(!types.contains(&RAW_TRACEPOINT), "a raw tracepoint (sys_exit) was placed by default: {types:?}");
}

#[test]
fn syscall_exit_stacks_are_placed_only_when_asked_for() {
    let types = types_while_recording(Some("1"));
    assert!(types.contains(&TRACEPOINT) && types.contains(&RAW_TRACEPOINT), "CLRPROBE_DEFER_USER=1 placed no sys_exit hook: {types:?}");
}
