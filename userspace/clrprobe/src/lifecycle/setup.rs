//! One set-up at a time per target, across every clrprobe process on the host: the IPC that
//! switches a target's perf map on and starts its EventPipe session is sent by one clrprobe
//! while it holds an exclusive flock on `s-PID-START` in the state directory
//! ([`super::state::STATE_DIR`]); another clrprobe setting up the same target waits for it (at
//! most until a deadline, then leaves the target alone). Two diagnostics clients setting up one
//! runtime at the same moment are what preceded the start-up hangs this guards against (with
//! [`super::startup`]).
//!
//! The holder removes the file before it lets go; a waiter that then gets the lock on the
//! removed file opens it afresh. The kernel drops the lock of a clrprobe that dies; files left
//! by one are removed at the next start ([`sweep`]).
use std::{
    fs::File,
    time::{Duration, Instant},
};

use super::state::{self, StateDir, StateError};

/// How long a set-up waits for another clrprobe's set-up of the same target (each is bounded:
/// EnablePerfMap 2 s, a session start a few seconds).
pub const SETUP_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("process {0} is gone")]
    Gone(u32),
    #[error("another clrprobe was still setting up process {pid} after {} s: left alone", SETUP_WAIT.as_secs())]
    Busy { pid: u32 },
    #[error(transparent)]
    State(#[from] StateError),
}

/// How long a set-up waits for the target's runtime to finish starting.
pub const START_WAIT: Duration = Duration::from_secs(20);

/// Why a target got no set-up.
#[derive(Debug, thiserror::Error)]
pub enum NotSetUp {
    #[error(transparent)]
    Starting(#[from] super::startup::NotStarted),
    #[error(transparent)]
    Lock(#[from] SetupError),
}

impl NotSetUp {
    /// The process exited before it could be set up (nothing to say about it).
    pub fn gone(&self) -> bool {
        matches!(self, Self::Starting(super::startup::NotStarted::Gone(_)) | Self::Lock(SetupError::Gone(_)))
    }
}

/// Before the set-up of `pid` (its IPC): waits until its runtime has finished starting (at
/// most [`START_WAIT`]) and until no other clrprobe is setting it up (at most [`SETUP_WAIT`]).
/// Hold the returned lock across the set-up. `ended`: the front end has stopped (no set-up
/// any more).
pub fn prepare(pid: u32, ended: &std::sync::atomic::AtomicBool) -> Result<Option<SetupLock>, NotSetUp> {
    super::startup::wait_started(pid, Instant::now() + START_WAIT, ended)?;
    Ok(lock(pid, Instant::now() + SETUP_WAIT)?)
}

/// Held while this clrprobe sets a target up; dropping it lets the next one in.
pub struct SetupLock {
    file: Option<File>,
    name: String,
    dir: &'static StateDir,
}

fn name(pid: u32, start: u64) -> String {
    format!("s-{pid}-{start}")
}

/// Takes the set-up lock of `pid`, waiting at most until `deadline`. `Ok(None)` without a
/// state directory (not root): there is no shared place to serialise through.
pub fn lock(pid: u32, deadline: Instant) -> Result<Option<SetupLock>, SetupError> {
    let Ok(dir) = super::state_dir() else { return Ok(None) };
    lock_in(dir, pid, deadline).map(Some)
}

fn lock_in(dir: &'static StateDir, pid: u32, deadline: Instant) -> Result<SetupLock, SetupError> {
    let start = state::start_time(pid).ok_or(SetupError::Gone(pid))?;
    let name = name(pid, start);
    loop {
        let file = dir.open_file(&name, true)?.expect("created");
        if state::try_flock(&file, libc::LOCK_EX) {
            // Removed by the holder before we got it: take the file that replaces it.
            if state::fstat(&file).map(|s| s.st_nlink > 0).unwrap_or(false) {
                return Ok(SetupLock { file: Some(file), name, dir });
            }
            continue;
        }
        if state::start_time(pid) != Some(start) {
            return Err(SetupError::Gone(pid));
        }
        if Instant::now() >= deadline {
            return Err(SetupError::Busy { pid });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl Drop for SetupLock {
    fn drop(&mut self) {
        // Removed while still held, then unlocked by closing.
        self.dir.unlink(&self.name);
        drop(self.file.take());
    }
}

/// Removes the set-up lock files nobody holds (left by a clrprobe that died mid set-up).
pub fn sweep(dir: &StateDir) {
    for n in dir.names_with("s-") {
        if let Ok(Some(f)) = dir.open_file(&n, false)
            && state::try_flock(&f, libc::LOCK_EX)
        {
            dir.unlink(&n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_dir() -> &'static StateDir {
        let path = clrprobe_tests::scratch_file("setup-test", "state");
        Box::leak(Box::new(StateDir::open_at(path.to_str().unwrap()).unwrap()))
    }

    #[test]
    fn one_set_up_at_a_time_and_no_file_left() {
        let dir = test_dir();
        let me = std::process::id();
        let first = lock_in(dir, me, Instant::now()).unwrap();
        // A second set-up of the same target waits, then gives up at its deadline.
        let t0 = Instant::now();
        let busy = lock_in(dir, me, Instant::now() + Duration::from_millis(50));
        assert!(matches!(busy, Err(SetupError::Busy { .. })), "second lock taken while the first is held");
        assert!(t0.elapsed() >= Duration::from_millis(50));
        // It gets the lock once the first lets go (from another thread, while it waits).
        let waiter = std::thread::spawn(move || lock_in(dir, me, Instant::now() + Duration::from_secs(5)).map(|_| ()));
        std::thread::sleep(Duration::from_millis(30));
        drop(first);
        waiter.join().unwrap().unwrap();
        assert!(dir.names_with("s-").is_empty(), "lock files left: {:?}", dir.names_with("s-"));
        // A file left by a dead holder is swept.
        let n = name(me, 1);
        drop(dir.open_file(&n, true).unwrap());
        sweep(dir);
        assert!(dir.names_with("s-").is_empty());
        let _ = std::fs::remove_dir_all(&dir.path);
    }
}
