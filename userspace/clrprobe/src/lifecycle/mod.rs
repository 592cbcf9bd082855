//! What clrprobe switches on in targets, and getting it switched off again whatever happens:
//! - [`state`]: a state directory under /run recording each target's perf map switched on
//!   (over IPC, or by the environment of a launched program) and the files to remove, shared
//!   by every clrprobe process on the host (the map goes off when the last user leaves);
//! - [`guardian`]: a forked process that cleans up when clrprobe dies (SIGKILL, OOM, panic);
//! - [`startup`] and [`setup`]: no set-up before a runtime has finished starting, and one
//!   clrprobe at a time setting up a target;
//! - [`children`]: the descendants of followed processes (`-p PID` and launch mode follow them).
//!
//! `record` (also `--all` and launch mode) and `top` use it through
//! [`crate::record::PerfMapGuard`].
pub mod children;
pub mod exits;
pub mod guardian;
pub mod setup;
pub mod startup;
pub mod state;

use std::sync::OnceLock;

static DIR: OnceLock<Result<state::StateDir, String>> = OnceLock::new();

/// The state directory, checked and opened once per process; at the first call, entries left
/// by clrprobe processes that died are cleaned up, and the guardian is started.
pub fn state_dir() -> Result<&'static state::StateDir, &'static str> {
    DIR.get_or_init(|| {
        let dir = state::StateDir::open().map_err(|e| e.to_string())?;
        state::sweep(&dir);
        setup::sweep(&dir);
        guardian::start();
        Ok(dir)
    })
    .as_ref()
    .map_err(String::as_str)
}
