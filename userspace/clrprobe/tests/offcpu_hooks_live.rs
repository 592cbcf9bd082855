//! Live: off-CPU recording places no host-wide syscall hook unless asked to. A `sys_exit`
//! raw tracepoint taxes every syscall of every process on the host (the kernel's slow exit
//! path for all threads); off-CPU stacks are taken at switch-out instead. sched_switch itself
//! is hooked as a raw tracepoint (no classic tracepoint record filled on every switch).
use std::{
    collections::BTreeSet,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use clrprobe_tests::{Runtime, Workload, require_root};

/// BPF program types (uapi `enum bpf_prog_type`).
const TRACEPOINT: u32 = 5;

/// What `pid` holds open, from its fdinfo: `prog_type:N` of its BPF programs and `tp:NAME`
/// of its raw tracepoint links.
fn hooks(pid: u32) -> BTreeSet<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else { return BTreeSet::new() };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .flat_map(|info| {
            info.lines()
                .filter_map(|l| {
                    l.strip_prefix("prog_type:")
                        .map(|t| format!("prog_type:{}", t.trim()))
                        .or_else(|| l.strip_prefix("tp_name:").map(|t| format!("tp:{}", t.trim())))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// What clrprobe held while recording off-CPU time of a workload for 3 s (see `hooks`).
fn types_while_recording(defer: Option<&str>) -> BTreeSet<String> {
    require_root();
    let w = Workload::new("Switches", Runtime::Net8).arg(20).arg(30).start().unwrap();
    let out = clrprobe_tests::scratch_file("hooks", defer.unwrap_or("default"));
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
        seen.extend(hooks(child.id()));
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
    assert!(types.contains("tp:sched_switch"), "sched_switch was not attached as a raw tracepoint: {types:?}");
    assert!(!types.contains(&format!("prog_type:{TRACEPOINT}")), "a classic tracepoint was attached: {types:?}");
    assert!(!types.contains("tp:sys_exit"), "a raw tracepoint on sys_exit was placed by default: {types:?}");
}

#[test]
fn syscall_exit_stacks_are_placed_only_when_asked_for() {
    let types = types_while_recording(Some("1"));
    assert!(types.contains("tp:sched_switch") && types.contains("tp:sys_exit"), "CLRPROBE_DEFER_USER=1 placed no sys_exit hook: {types:?}");
}
