//! The sched_switch program (off-CPU stacks, on-CPU time per thread) and the `__cxa_throw`
//! counter: attaching them and reading their maps back.
use std::{collections::HashMap, path::Path};

use aya::{
    maps::{Array, HashMap as BpfHashMap, MapData},
    programs::{RawTracePoint, TracePoint},
};
use clrprobe_common::{SampleKey, ThreadCpu, names, switch_config};

use super::{BpfError, Loaded};

const FORMAT: &str = "events/sched/sched_switch/format";
const TRACEFS: &str = "/sys/kernel/tracing";
/// next_pid offsets the BPF program reads (the verifier needs constants).
const SUPPORTED_NEXT_PID_OFFSETS: [u64; 2] = [56, 52];

/// On-CPU time of one thread over the recording.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ThreadCpuTime {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub on_cpu_ns: u64,
}

/// The sched_switch format file, mounting tracefs first when it is not mounted (root only).
fn sched_switch_format() -> Result<String, BpfError> {
    for dir in [TRACEFS, "/sys/kernel/debug/tracing"] {
        if let Ok(s) = std::fs::read_to_string(Path::new(dir).join(FORMAT)) {
            return Ok(s);
        }
    }
    let src = c"nodev";
    let target = c"/sys/kernel/tracing";
    let fstype = c"tracefs";
    // SAFETY: mount(2) with NUL-terminated strings and no data.
    let rc = unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, std::ptr::null()) };
    if rc == 0
        && let Ok(s) = std::fs::read_to_string(Path::new(TRACEFS).join(FORMAT)) {
            return Ok(s);
        }
    Err(BpfError::Tracefs(format!(
        "cannot read {TRACEFS}/{FORMAT} ({}); fix: mount -t tracefs nodev {TRACEFS}",
        std::io::Error::last_os_error()
    )))
}

/// Offset of `next_pid` in the sched_switch record, from its format text.
pub fn next_pid_offset(format: &str) -> Option<u64> {
    format
        .lines()
        .find(|l| l.contains(" next_pid;"))?
        .split(';')
        .find_map(|f| f.trim().strip_prefix("offset:"))?
        .trim()
        .parse()
        .ok()
}

fn comm(c: &[u8; 16]) -> String {
    let end = c.iter().position(|&b| b == 0).unwrap_or(16);
    String::from_utf8_lossy(&c[..end]).into_owned()
}

impl Loaded {
    /// Attaches sched_switch: off-CPU stacks (intervals ≥ `min_offcpu_ns`) and/or on-CPU time.
    pub fn attach_sched_switch(&mut self, offcpu: bool, oncpu: bool, min_offcpu_ns: u64) -> Result<(), BpfError> {
        let format = sched_switch_format()?;
        let offset = next_pid_offset(&format).ok_or_else(|| BpfError::Tracefs("no next_pid in the sched_switch format".into()))?;
        if !SUPPORTED_NEXT_PID_OFFSETS.contains(&offset) {
            return Err(BpfError::Tracefs(format!(
                "sched_switch has next_pid at offset {offset}; this build knows {SUPPORTED_NEXT_PID_OFFSETS:?}"
            )));
        }
        // User stacks are taken at switch-out (a thread blocking again at the same place
        // reuses its copy). `CLRPROBE_DEFER_USER=1` takes them when the blocking syscall
        // returns instead, only for intervals long enough to record: that program first, then
        // the flag, then the tracepoint.
        let defer_user = offcpu && self.attach_syscall_exit();
        let name = names::SWITCH_CONFIG;
        {
            let map = self.ebpf.map_mut(name).ok_or(BpfError::NoMap { name })?;
            let mut cfg: Array<&mut MapData, u64> = Array::try_from(map).map_err(|source| BpfError::Map { name, source })?;
            let flags = if offcpu { switch_config::FLAG_OFFCPU } else { 0 } | if oncpu { switch_config::FLAG_ONCPU } else { 0 }
                | if defer_user { switch_config::FLAG_DEFER_USER } else { 0 };
            for (slot, v) in [
                (switch_config::NEXT_PID_OFFSET, offset),
                (switch_config::MIN_OFFCPU_NS, min_offcpu_ns),
                (switch_config::FLAGS, flags),
            ] {
                cfg.set(slot, v, 0).map_err(|source| BpfError::Map { name, source })?;
            }
        }
        let name = names::PROG_SCHED_SWITCH;
        let prog: &mut TracePoint = self.program(name)?;
        prog.load().map_err(|source| BpfError::Program { name, source })?;
        prog.attach("sched", "sched_switch").map_err(|source| BpfError::Program { name, source })?;
        Ok(())
    }

    /// Attaches `syscall_exit` to the raw tracepoint `sys_exit` when `CLRPROBE_DEFER_USER=1`;
    /// false when not asked for or it cannot be attached. Off by default: a `sys_exit` hook
    /// puts every thread of the host on the kernel's slow syscall-exit path — measured here
    /// +42 ns per syscall of every process (`dd bs=1`: +25 % CPU), targets or not — while it
    /// saved the targets little (`cargo xtask bench-stacks`: 5.8 % against 4.9 % for
    /// switch-out stacks at 56k switches/s).
    fn attach_syscall_exit(&mut self) -> bool {
        if !std::env::var("CLRPROBE_DEFER_USER").is_ok_and(|v| v == "1") {
            return false;
        }
        let Ok(prog) = self.program::<RawTracePoint>(names::PROG_SYSCALL_EXIT) else { return false };
        prog.load().is_ok() && prog.attach("sys_exit").is_ok()
    }

    /// Off-CPU nanoseconds by (pid, tid, stacks, comm), removed from the map as read.
    pub fn drain_offcpu(&mut self) -> Result<Vec<(SampleKey, u64)>, BpfError> {
        let name = names::OFFCPU_NS;
        self.drain_counts(name)
    }

    /// On-CPU time per thread accounted so far.
    pub fn thread_cpu(&self) -> Result<Vec<ThreadCpuTime>, BpfError> {
        let name = names::ONCPU_NS;
        let map = self.ebpf.map(name).ok_or(BpfError::NoMap { name })?;
        let m: BpfHashMap<&MapData, u32, ThreadCpu> =
            BpfHashMap::try_from(map).map_err(|source| BpfError::Map { name, source })?;
        Ok(m.iter()
            .filter_map(Result::ok)
            .map(|(tid, t)| ThreadCpuTime { pid: t.pid, tid, comm: comm(&t.comm), on_cpu_ns: t.on_cpu_ns })
            .collect())
    }

    /// Counts `__cxa_throw` calls of `pid` in `libstdcxx` (the path as this process sees it).
    pub fn attach_cxa_throw(&mut self, libstdcxx: &Path, pid: u32) -> Result<(), BpfError> {
        self.attach_uprobe_program(names::PROG_CXA_THROW, libstdcxx, "__cxa_throw", Some(pid))
    }

    /// `__cxa_throw` calls per pid.
    pub fn cxa_throws(&self) -> Result<HashMap<u32, u64>, BpfError> {
        self.pid_counts(names::CXA_THROWS)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_next_pid_offset() {
        let f = "\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n";
        assert_eq!(super::next_pid_offset(f), Some(56));
        assert_eq!(super::next_pid_offset("nothing"), None);
    }
}
