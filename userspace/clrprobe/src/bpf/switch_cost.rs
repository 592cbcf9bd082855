//! The sched_switch program's own cost, per path, without a scheduler in the way: the
//! program is run by `BPF_PROG_TEST_RUN` with made-up tracepoint arguments, as the calling
//! thread (which plays the thread switching out and, with `next` = `prev`, the one switching
//! back in). Timed in batches, the fastest kept: preemption and VM stalls only ever add time.
//! For `benches/switch_cost.rs`.
use std::{
    os::fd::{AsFd, AsRawFd},
    time::{Duration, Instant},
};

use aya::{
    maps::{Array, MapData},
    programs::RawTracePoint,
};
use clrprobe_common::{names, switch_config};

use super::{BpfError, Loaded};

/// `BPF_PROG_TEST_RUN`.
const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// The `test` member of `union bpf_attr` (uapi), as far as a raw tracepoint run uses it.
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

/// One test run of a loaded program with raw tracepoint arguments `args`.
fn test_run(prog_fd: i32, args: &[u64; 4]) -> std::io::Result<()> {
    let mut attr = TestRunAttr {
        prog_fd: prog_fd as u32,
        ctx_size_in: size_of_val(args) as u32,
        ctx_in: args.as_ptr() as u64,
        ..Default::default()
    };
    // SAFETY: bpf(2) with an attr of the size given; `args` outlives the call.
    let rc = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_PROG_TEST_RUN, &mut attr as *mut TestRunAttr, size_of::<TestRunAttr>() as u32)
    };
    if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// Calls `f` at a stack depth of `depth` frames (a different stack pointer per depth).
#[inline(never)]
fn at_depth(depth: u32, f: &mut dyn FnMut() -> std::io::Result<()>) -> std::io::Result<()> {
    if depth == 0 {
        return f();
    }
    let pad = std::hint::black_box([depth as u8; 64]);
    let r = at_depth(depth - 1, f);
    std::hint::black_box(pad);
    r
}

impl Loaded {
    /// Writes the sched_switch settings without attaching anything.
    pub fn set_switch_config(&mut self, flags: u64, min_offcpu_ns: u64) -> Result<(), BpfError> {
        let name = names::SWITCH_CONFIG;
        let map = self.ebpf.map_mut(name).ok_or(BpfError::NoMap { name })?;
        let mut cfg: Array<&mut MapData, u64> = Array::try_from(map).map_err(|source| BpfError::Map { name, source })?;
        for (slot, v) in [(switch_config::MIN_OFFCPU_NS, min_offcpu_ns), (switch_config::FLAGS, flags)] {
            cfg.set(slot, v, 0).map_err(|source| BpfError::Map { name, source })?;
        }
        Ok(())
    }

    /// Time per test run of the raw tracepoint program `name` (loaded here if it is not),
    /// called with `args` (preempt, prev, next, prev_state): the fastest of `batches` batches
    /// of `calls` runs. Successive runs come from `places` stack depths in turn (a different
    /// stack pointer each): 2 alternate between the two places a thread's entry keeps, 3 or
    /// more never "block again at a known place" (every run walks and copies).
    pub fn switch_test_run(&mut self, name: &'static str, args: [u64; 4], calls: u32, batches: u32, places: u32) -> Result<Duration, BpfError> {
        let prog: &mut RawTracePoint = self.program(name)?;
        if prog.fd().is_err() {
            prog.load().map_err(|source| BpfError::Program { name, source })?;
        }
        let fd = prog.fd().map_err(|source| BpfError::Program { name, source })?.as_fd().as_raw_fd();
        let err = |e: std::io::Error| BpfError::Tracefs(format!("BPF_PROG_TEST_RUN of {name}: {e}"));
        let mut best = Duration::MAX;
        for _ in 0..batches {
            let t = Instant::now();
            for i in 0..calls {
                let depth = 1 + i % places.max(1);
                at_depth(depth, &mut || test_run(fd, &args)).map_err(err)?;
            }
            best = best.min(t.elapsed() / calls);
        }
        Ok(best)
    }
}
