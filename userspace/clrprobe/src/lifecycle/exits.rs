//! Knowing when named targets have exited without reading /proc at every look: a pidfd per
//! target (pidfd_open(2), Linux 5.3+) turns readable when its process exits, so the recording's
//! loop asks the kernel with one poll(2) instead of opening and formatting
//! /proc/PID/stat for each target 50 times a second (~4 % of a recording's CPU with three
//! targets). Where a pidfd cannot be had, that target is looked at in /proc as before.
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The targets watched; a pid whose pidfd could not be opened is checked through /proc.
pub struct Exits {
    fds: Vec<(u32, Option<OwnedFd>)>,
}

impl Exits {
    /// Watches `pids` (their pidfds are opened now; a pid already gone counts as exited).
    pub fn watch(pids: &[u32]) -> Self {
        Exits { fds: pids.iter().map(|&p| (p, pidfd(p))).collect() }
    }

    /// True once every watched process has exited (a zombie has).
    pub fn all_exited(&self) -> bool {
        self.fds.iter().all(|(pid, fd)| match fd {
            Some(fd) => exited(fd),
            None => !crate::record::alive(*pid),
        })
    }
}

impl Exits {
    /// Sleeps up to `timeout`, waking early when a watched process that had not exited does
    /// (one poll(2) on their pidfds; with a target that has no pidfd, at most 20 ms, as its
    /// exit is only seen in /proc).
    pub fn wait(&self, timeout: std::time::Duration) {
        self.wait_or(None, timeout)
    }

    /// As [`Exits::wait`], waking early too when `also` turns readable.
    pub fn wait_or(&self, also: Option<i32>, timeout: std::time::Duration) {
        let mut fds: Vec<libc::pollfd> = also.map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).into_iter().collect();
        let mut unwatchable = false;
        for (pid, fd) in &self.fds {
            match fd {
                Some(fd) if !exited(fd) => fds.push(libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }),
                Some(_) => {}
                None => unwatchable |= crate::record::alive(*pid),
            }
        }
        let timeout = if unwatchable { timeout.min(std::time::Duration::from_millis(20)) } else { timeout };
        if fds.is_empty() {
            std::thread::sleep(timeout);
            return;
        }
        // SAFETY: `fds` is a valid array of pollfds for the call; the descriptors stay open.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout.as_millis().min(i32::MAX as u128) as i32) };
    }
}

fn pidfd(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    // SAFETY: a non-negative return is a descriptor this process now owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A pidfd polls readable once its process has exited.
fn exited(fd: &OwnedFd) -> bool {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, no wait.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_seen_to_exit_and_a_running_one_is_not() {
        let mut running = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let mut quick = std::process::Command::new("true").spawn().unwrap();
        let w = Exits::watch(&[running.id()]);
        assert!(!w.all_exited());
        let q = Exits::watch(&[quick.id()]);
        let t = std::time::Instant::now();
        while !q.all_exited() {
            assert!(t.elapsed() < std::time::Duration::from_secs(10), "the exit of `true` was not seen");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Exited but not reaped (a zombie) counts as exited, as crate::record::alive has it.
        assert!(!crate::record::alive(quick.id()));
        quick.wait().unwrap();
        running.kill().unwrap();
        running.wait().unwrap();
        assert!(w.all_exited());
        assert!(Exits::watch(&[]).all_exited());
    }

    #[test]
    fn wait_wakes_at_an_exit_and_sleeps_out_its_time_otherwise() {
        use std::time::{Duration, Instant};
        let mut running = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let mut soon = std::process::Command::new("sleep").arg("0.3").spawn().unwrap();
        let w = Exits::watch(&[running.id(), soon.id()]);
        let t = Instant::now();
        w.wait(Duration::from_secs(20));
        let woke = t.elapsed();
        assert!(woke >= Duration::from_millis(250) && woke < Duration::from_secs(10), "woke after {woke:?}");
        // The exited one (a zombie, still readable) no longer wakes it: the full time passes.
        let t = Instant::now();
        w.wait(Duration::from_millis(300));
        assert!(t.elapsed() >= Duration::from_millis(290), "woke after {:?}", t.elapsed());
        assert!(!w.all_exited());
        soon.wait().unwrap();
        running.kill().unwrap();
        running.wait().unwrap();
        let t = Instant::now();
        Exits::watch(&[]).wait(Duration::from_millis(50));
        assert!(t.elapsed() >= Duration::from_millis(45));
    }
}
