//! Has a target's runtime finished starting? Its diagnostics server answers long before: it
//! starts early in the runtime's start-up, before the perf-map code is initialised (the
//! runtime's EEStartup). A command sent in that window can crash or hang the runtime: an
//! `EnablePerfMap` takes a lock that is not initialised yet (dotnet/runtime#122472; two .NET 8
//! processes hung for good here, main thread on a futex, after two clrprobes set them up at
//! start). So no set-up is sent before the runtime has started:
//! - a runtime that names its threads (.NET 6 and later: `.NET SynchManag` exists from its first
//!   milliseconds) has started once its `.NET Finalizer` thread exists (created near the end of
//!   EEStartup, after the perf map and the application domain are set up);
//! - an older runtime (unnamed threads; it has no `EnablePerfMap`) once System.Private.CoreLib
//!   is mapped.
//!
//! A runtime told to wait at start-up for a diagnostics client (`DOTNET_DefaultDiagnosticPortSuspend`)
//! never starts by itself: it is left as it is.
use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

/// The runtime's finalizer thread name (as /proc shows it, at most 15 bytes).
const FINALIZER: &str = ".NET Finalizer";

/// What the threads of a process say about its runtime's start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Startup {
    /// Finished starting: set-up commands are safe.
    Started,
    /// Still starting (or suspended at start-up).
    Starting,
    /// The process is gone.
    Gone,
}

/// Reads the state of `pid`'s runtime from its thread names (and its mappings for runtimes
/// that name no thread).
pub fn state(pid: u32) -> Startup {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Startup::Gone };
    let mut named = false;
    for t in tasks.flatten() {
        let Ok(comm) = std::fs::read_to_string(t.path().join("comm")) else { continue };
        let comm = comm.trim_end_matches('\n');
        if comm == FINALIZER {
            return Startup::Started;
        }
        named |= comm.starts_with(".NET ");
    }
    if named {
        return Startup::Starting;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
        Ok(maps) if maps.contains("/System.Private.CoreLib.dll") => Startup::Started,
        Ok(_) => Startup::Starting,
        Err(_) => Startup::Gone,
    }
}

/// Why a set-up was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotStarted {
    #[error("process {0} exited while its runtime was starting")]
    Gone(u32),
    #[error(
        "the runtime of {pid} had not finished starting after {} s (suspended at start-up by DOTNET_DefaultDiagnosticPortSuspend?): not set up, its JIT-compiled frames are not named",
        waited.as_secs()
    )]
    Timeout { pid: u32, waited: Duration },
    #[error("the runtime of {0} had not finished starting when the recording ended (suspended at start-up by DOTNET_DefaultDiagnosticPortSuspend?): not set up")]
    Ended(u32),
}

/// Waits (polling every 2 ms) until `pid`'s runtime has started, at most until `deadline` or
/// until `ended` is set.
pub fn wait_started(pid: u32, deadline: Instant, ended: &AtomicBool) -> Result<(), NotStarted> {
    let t0 = Instant::now();
    loop {
        if ended.load(Ordering::Relaxed) {
            return Err(NotStarted::Ended(pid));
        }
        match state(pid) {
            Startup::Started => return Ok(()),
            Startup::Gone => return Err(NotStarted::Gone(pid)),
            Startup::Starting if Instant::now() >= deadline => return Err(NotStarted::Timeout { pid, waited: t0.elapsed() }),
            Startup::Starting => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_without_a_runtime_is_starting_and_a_gone_one_gone() {
        // This test process: no .NET thread names, no CoreLib.
        assert_eq!(state(std::process::id()), Startup::Starting);
        assert_eq!(state(u32::MAX - 1), Startup::Gone);
        let e = wait_started(std::process::id(), Instant::now() + Duration::from_millis(20), &AtomicBool::new(false)).unwrap_err();
        assert!(matches!(e, NotStarted::Timeout { .. }), "{e}");
        let e = wait_started(std::process::id(), Instant::now() + Duration::from_secs(5), &AtomicBool::new(true)).unwrap_err();
        assert_eq!(e, NotStarted::Ended(std::process::id()));
    }
}
