//! The guardian: a small process forked when clrprobe starts switching things on in targets.
//! It holds the read end of a pipe whose write end only clrprobe holds; when clrprobe ends —
//! normally, by a panic, SIGKILL or the OOM killer — the kernel closes that end and the
//! guardian reads end of file. It then [`sweep`](super::state::sweep)s the state directory:
//! every target no live clrprobe uses any more gets its perf map switched off and its files
//! removed. It ignores Ctrl-C (it is in its own session) and exits after the sweep (retrying
//! for up to a minute the targets that did not answer, e.g. stopped ones).
use std::{
    os::fd::{FromRawFd, OwnedFd},
    sync::OnceLock,
};

use super::state::{self, StateDir};

/// How long the guardian keeps retrying targets that do not answer.
const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// The write end, kept open for the life of this process.
static GUARDIAN: OnceLock<Option<Guardian>> = OnceLock::new();

pub struct Guardian {
    _write_end: OwnedFd,
    pub pid: i32,
}

/// Starts the guardian once per process (later calls return the first one). None when it
/// cannot be forked; clrprobe then cleans up only when it ends normally.
pub fn start() -> Option<&'static Guardian> {
    GUARDIAN.get_or_init(fork_guardian).as_ref()
}

fn fork_guardian() -> Option<Guardian> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 with a valid two-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: fork; the child only uses the pipe, files, sockets and the allocator (glibc
    // keeps malloc usable in a forked child) and never returns into the caller's code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        // SAFETY: closing the fds pipe2 just returned.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        return None;
    }
    if pid == 0 {
        guard(fds[0], fds[1]);
    }
    // SAFETY: closing the read end, which only the child uses; the write end is owned from here.
    unsafe { libc::close(fds[0]) };
    Some(Guardian { _write_end: unsafe { OwnedFd::from_raw_fd(fds[1]) }, pid })
}

/// The guardian's whole life.
fn guard(read_end: i32, write_end: i32) -> ! {
    // SAFETY: plain syscalls on our own fds and signal dispositions.
    unsafe {
        libc::close(write_end);
        libc::setsid();
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_IGN);
        }
        libc::prctl(libc::PR_SET_NAME, c"clrprobe-guard".as_ptr() as libc::c_ulong, 0, 0, 0);
        // Let go of the parent's terminal and pipes (a caller waiting for EOF on them).
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
        // Every other inherited fd (sockets, BPF objects, locks) belongs to the parent.
        let keep = read_end.max(3);
        if read_end > 3 {
            libc::syscall(libc::SYS_close_range, 3u32, (read_end - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32);
        let mut b = [0u8; 64];
        loop {
            let n = libc::read(read_end, b.as_mut_ptr().cast(), b.len());
            if n == 0 || (n < 0 && *libc::__errno_location() != libc::EINTR) {
                break;
            }
        }
    }
    if let Ok(dir) = StateDir::open() {
        // A target that does not answer (stopped) is retried each second for a while; after
        // that, the next clrprobe start does it.
        let until = std::time::Instant::now() + RETRY_FOR;
        while state::sweep(&dir) > 0 && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    // SAFETY: ends the forked child without running the parent's atexit handlers.
    unsafe { libc::_exit(0) }
}
