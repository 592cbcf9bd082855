//! The sched_switch program (off-CPU stacks, on-CPU time per thread) and the `__cxa_throw`
//! counter: attaching them and reading their maps back.
use std::{collections::HashMap, path::Path};

use aya::{
    maps::{Array, HashMap as BpfHashMap, MapData},
    programs::{RawTracePoint, TracePoint},
};
use clrprobe_common::{SampleKey, ThreadCpu, names, switch_config};

use super::{BpfError, Loaded};

/// `CLRPROBE_SWITCH_FLOOR=raw|tp` (for `cargo xtask bench-stacks`): attach a program that
/// does nothing to sched_switch instead of clrprobe's, as the raw tracepoint clrprobe uses
/// (`raw`) or as the classic tracepoint (`tp`, whose record the kernel fills before the
/// program runs): the cost of the hook alone.
const FLOOR_ENV: &str = "CLRPROBE_SWITCH_FLOOR";

/// On-CPU time of one thread over the recording.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ThreadCpuTime {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub on_cpu_ns: u64,
}

fn comm(c: &[u8; 16]) -> String {
    let end = c.iter().position(|&b| b == 0).unwrap_or(16);
    String::from_utf8_lossy(&c[..end]).into_owned()
}

impl Loaded {
    /// Attaches sched_switch: off-CPU stacks (intervals ≥ `min_offcpu_ns`) and/or on-CPU time.
    pub fn attach_sched_switch(&mut self, offcpu: bool, oncpu: bool, min_offcpu_ns: u64) -> Result<(), BpfError> {
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
                (switch_config::MIN_OFFCPU_NS, min_offcpu_ns),
                (switch_config::FLAGS, flags),
            ] {
                cfg.set(slot, v, 0).map_err(|source| BpfError::Map { name, source })?;
            }
        }
        match std::env::var(FLOOR_ENV).as_deref() {
            Ok("tp") => {
                let name = names::PROG_SCHED_SWITCH_FLOOR_TP;
                let prog: &mut TracePoint = self.program(name)?;
                prog.load().map_err(|source| BpfError::Program { name, source })?;
                prog.attach("sched", "sched_switch").map_err(|source| BpfError::Program { name, source })?;
                return Ok(());
            }
            Ok("raw") => return self.attach_raw_sched_switch(names::PROG_SCHED_SWITCH_FLOOR_RAW),
            _ => {}
        }
        self.attach_raw_sched_switch(names::PROG_SCHED_SWITCH)
    }

    /// Attaches `name` to the raw tracepoint `sched_switch`. It reads the tracepoint's fourth
    /// argument (`prev_state`, Linux 5.18 and later): older kernels refuse the attach.
    fn attach_raw_sched_switch(&mut self, name: &'static str) -> Result<(), BpfError> {
        let prog: &mut RawTracePoint = self.program(name)?;
        prog.load().map_err(|source| BpfError::Program { name, source })?;
        prog.attach("sched_switch").map_err(|source| BpfError::Program { name, source })?;
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
