//! Pricing a uprobe before placing one: the kernel traps and single-steps at every hit, which
//! costs tens of microseconds on some VMs. The self-test attaches the counting uprobe to a
//! function of this process, calls it `calls` times with and without the probe, and returns the
//! difference per call.
use std::{
    hint::black_box,
    num::NonZeroU32,
    path::PathBuf,
    time::{Duration, Instant},
};

use aya::programs::{UProbe, uprobe::UProbeScope};
use clrprobe_common::names;

use super::{BpfError, Loaded};

/// The probed function of the self-test (never inlined, so it has an address to probe).
#[inline(never)]
extern "C" fn uprobe_calibration_target(x: u64) -> u64 {
    black_box(x).wrapping_mul(3) ^ 1
}

/// The file and file offset of the executable mapping holding `addr` in this process.
fn file_offset_of(addr: u64) -> Option<(PathBuf, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let (range, perms, offset) = (f.next()?, f.next()?, f.next()?);
        let path = f.nth(2)?;
        let (start, end) = range.split_once('-')?;
        let (start, end) = (u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?);
        let offset = u64::from_str_radix(offset, 16).ok()?;
        (perms.contains('x') && (start..end).contains(&addr) && path.starts_with('/')).then(|| (PathBuf::from(path), addr - start + offset))
    })
}

/// Batches of the self-test (the fastest counts).
const BATCHES: u32 = 4;

fn time_calls(f: extern "C" fn(u64) -> u64, calls: u32) -> Duration {
    let t = Instant::now();
    for i in 0..calls {
        black_box(f(black_box(i as u64)));
    }
    t.elapsed()
}

impl Loaded {
    /// Cost of one uprobe hit in this kernel: `calls` calls of a probed function against as
    /// many unprobed ones, in batches (the probe's program returns at once: this process is
    /// no target). The probed instruction is not one the kernel emulates, so each hit traps
    /// and single-steps (the probed function starts with a `mov` to the stack).
    pub fn uprobe_cost_per_hit(&mut self, calls: u32) -> Result<Duration, BpfError> {
        let f: extern "C" fn(u64) -> u64 = black_box(uprobe_calibration_target);
        let (exe, offset) = file_offset_of(f as usize as u64)
            .ok_or_else(|| BpfError::Tracefs("the uprobe self-test found no executable mapping of its own code".into()))?;
        let name = names::PROG_UPROBE_COUNT;
        let prog: &mut UProbe = self.program(name)?;
        if prog.fd().is_err() {
            prog.load().map_err(|source| BpfError::Program { name, source })?;
        }
        let pid = NonZeroU32::new(std::process::id()).ok_or(BpfError::NoProgram { name })?;
        // The fastest of a few batches: being scheduled out only ever adds time.
        let batch = (calls / BATCHES).max(1);
        let fastest = |f| (0..BATCHES).map(|_| time_calls(f, batch)).min().unwrap_or_default();
        let bare = fastest(f);
        let link = prog.attach(offset, &exe, UProbeScope::OneProcess(pid)).map_err(|source| BpfError::Program { name, source })?;
        let probed = fastest(f);
        prog.detach(link).map_err(|source| BpfError::Program { name, source })?;
        Ok(probed.saturating_sub(bare) / batch)
    }
}
