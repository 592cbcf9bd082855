//! Ctrl-C / SIGTERM end a recording cleanly (outputs written, sessions stopped, perf maps off,
//! all bounded to about a second); a second one exits at once (the guardian switches off what
//! was left on, see [`crate::lifecycle`]).
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
/// A signal (not the end of a duration or of the targets) asked for the stop.
static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(true, Ordering::SeqCst);
    if STOP.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(128 + sig) };
    }
}

/// Has Ctrl-C or SIGTERM been received (the stop must then end within its bound)?
pub fn signalled() -> bool {
    SIGNALLED.load(Ordering::SeqCst)
}

/// Installs the handlers and returns the flag they set.
pub fn stop_flag() -> &'static AtomicBool {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    &STOP
}
