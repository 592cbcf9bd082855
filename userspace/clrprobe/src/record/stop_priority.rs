//! The stop of a recording at a higher CPU priority. After Ctrl-C the user waits for the files:
//! building and writing them takes a fraction of a second of CPU, but a clrprobe started with
//! `nice` on a host its targets keep busy (20 busy .NET processes on 2 cores) got 3 % of a CPU
//! and took 19 s to exit. Once the recording has ended, every thread of clrprobe gets at least
//! [`STOP_NICE`] (threads started later inherit it from the thread starting them); the
//! targets are no longer measured, and what is left is bounded (≤ 2 s after Ctrl-C).
/// The nice value of clrprobe's threads once recording has ended (when lower than theirs).
pub const STOP_NICE: i32 = -10;

/// The nice value to raise to: [`STOP_NICE`], or `CLRPROBE_STOP_NICE` (a number, or `off` to
/// keep the priority clrprobe was started with).
pub fn stop_nice() -> Option<i32> {
    match std::env::var("CLRPROBE_STOP_NICE") {
        Ok(v) if v == "off" => None,
        Ok(v) => Some(v.trim().parse().unwrap_or(STOP_NICE).clamp(-20, 19)),
        Err(_) => Some(STOP_NICE),
    }
}

/// Raises every thread of this process to `nice`; returns how many were raised (0: not
/// allowed, as without CAP_SYS_NICE, or already there).
pub fn raise(nice: i32) -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    let mut raised = 0;
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<libc::id_t>().ok()) else { continue };
        // SAFETY: getpriority/setpriority read and set a scheduling value of one of our own
        // threads (PRIO_PROCESS with a tid is per thread on Linux); errno is cleared first as
        // getpriority may return -1 as a value.
        unsafe {
            *libc::__errno_location() = 0;
            let now = libc::getpriority(libc::PRIO_PROCESS, tid);
            if *libc::__errno_location() != 0 || now <= nice {
                continue;
            }
            if libc::setpriority(libc::PRIO_PROCESS, tid, nice) == 0 {
                raised += 1;
            }
        }
    }
    raised
}

/// CPU seconds this process has used (user + system, every thread).
pub fn cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

#[cfg(test)]
mod tests {
    #[test]
    fn raises_own_threads_when_allowed() {
        let t = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(200)));
        let raised = super::raise(super::STOP_NICE);
        // SAFETY: reads this thread's nice value.
        let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        // SAFETY: geteuid has no effects.
        if unsafe { libc::geteuid() } == 0 {
            assert!(raised >= 2, "raised {raised}");
            assert_eq!(nice, super::STOP_NICE);
        } else {
            assert_eq!(raised, 0);
        }
        t.join().unwrap();
    }
}
