//! `clrprobe ps`: the .NET processes on this host, as a table or JSON.
use std::fmt::Write;

use crate::discover::{DotnetProcess, describe, dotnet_pids};

/// Every .NET process found now, described.
pub fn list() -> Vec<DotnetProcess> {
    dotnet_pids().into_iter().filter_map(describe).collect()
}

/// A fixed-width table: PID, NSPID, VERSION, CONTAINER, PERFMAP, COMMAND.
pub fn table(procs: &[DotnetProcess]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:>8} {:>7} {:<10} {:<9} {:<7} COMMAND", "PID", "NSPID", "VERSION", "CONTAINER", "PERFMAP");
    for p in procs {
        let _ = writeln!(
            out,
            "{:>8} {:>7} {:<10} {:<9} {:<7} {}",
            p.pid,
            p.ns_pid,
            p.runtime_version.as_deref().unwrap_or("?"),
            if p.container { "yes" } else { "no" },
            if p.perf_map { "on" } else { "off" },
            if p.cmdline.is_empty() { &p.comm } else { &p.cmdline },
        );
    }
    if procs.is_empty() {
        out.push_str("no .NET processes found (none maps libcoreclr.so)\n");
    }
    out
}
