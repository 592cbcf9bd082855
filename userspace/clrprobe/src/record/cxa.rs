//! Counting C++ throws in a .NET process: on .NET ≤ 8 on Linux a managed throw goes through
//! libstdc++'s `__cxa_throw`, so its count in the kernel is a check on ExceptionThrown events.
use std::{path::PathBuf, time::Duration};

use crate::bpf::{BpfError, Loaded};

/// The libstdc++ the process has mapped, as a path this process can open.
pub fn libstdcxx_of(pid: u32) -> Option<PathBuf> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let path = maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find(|p| p.contains("libstdc++.so"))?;
    Some(PathBuf::from(format!("/proc/{pid}/root{path}")))
}

pub fn attach(bpf: &mut Loaded, pid: u32) -> Result<(), BpfError> {
    let lib = libstdcxx_of(pid).ok_or_else(|| BpfError::Tracefs(format!("process {pid} has no libstdc++ mapped")))?;
    bpf.attach_cxa_throw(&lib, pid)
}

/// Calls of the uprobe self-test (about 7 ms where a hit costs 33 µs).
const PRICE_CALLS: u32 = 200;

/// What one uprobe hit costs in this kernel, measured on this process before any is placed.
pub fn price(bpf: &mut Loaded) -> Result<Duration, BpfError> {
    bpf.uprobe_cost_per_hit(PRICE_CALLS)
}
