//! Ctrl-C / SIGTERM end a recording cleanly (outputs written, sessions stopped, perf maps off,
//! all bounded to about a second); a second one exits at once (the guardian switches off what
//! was left on, see [`crate::lifecycle`]).
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
/// A signal (not the end of a duration or of the targets) asked for the stop.
static SIGNALLED: AtomicBool = AtomicBool::new(false);

/// A pipe a signal writes a byte to (-1: none), so a loop polling its read end wakes at once
/// instead of looking at the flag every 100 ms. Never read: once written, it stays readable.
static WAKE_READ: AtomicI32 = AtomicI32::new(-1);
static WAKE_WRITE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(true, Ordering::SeqCst);
    if STOP.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(128 + sig) };
    }
    let fd = WAKE_WRITE.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: write(2) and errno are async-signal-safe; one byte from a live local to a
        // non-blocking pipe (full: the reader is awake already). errno is put back for the
        // code the signal interrupted.
        unsafe {
            let errno = *libc::__errno_location();
            let b = 1u8;
            let _ = libc::write(fd, (&b as *const u8).cast(), 1);
            *libc::__errno_location() = errno;
        }
    }
}

/// The read end of the pipe a stop signal writes to (None: it could not be made), readable
/// once Ctrl-C or SIGTERM has come: poll it with what else a loop waits for.
pub fn wake_fd() -> Option<i32> {
    let fd = WAKE_READ.load(Ordering::SeqCst);
    (fd >= 0).then_some(fd)
}

/// Has Ctrl-C or SIGTERM been received (the stop must then end within its bound)?
pub fn signalled() -> bool {
    SIGNALLED.load(Ordering::SeqCst)
}

/// Is `flag` the one the handlers set (so [`wake_fd`] tells when it is)?
pub fn is_stop_flag(flag: &AtomicBool) -> bool {
    std::ptr::eq(flag, &STOP)
}

/// Installs the handlers and returns the flag they set.
pub fn stop_flag() -> &'static AtomicBool {
    if WAKE_READ.load(Ordering::SeqCst) < 0 {
        let mut fds = [-1; 2];
        // SAFETY: pipe2 fills a two-element array; the descriptors live for the process.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } == 0 {
            WAKE_WRITE.store(fds[1], Ordering::SeqCst);
            WAKE_READ.store(fds[0], Ordering::SeqCst);
        }
    }
    // SAFETY: the handler only stores to atomics and writes to a pipe (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    &STOP
}
