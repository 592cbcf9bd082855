//! A thread that empties the stack-copy ring as records arrive.
//!
//! The ring is mapped twice (wrap-around), so every byte of it counts twice in clrprobe's
//! resident set, whether written or not. Read only from the recording loop (every 100 ms, up
//! to 500 ms when a drain symbolizes), it had to hold half a second of samples: 2 MiB at
//! 99 Hz on 2 CPUs, 4.3 MB resident. This thread waits on the ring's fd (epoll, level
//! triggered) and moves the records into a bounded channel every [`WAIT`], or as soon as the
//! BPF side, finding a quarter of the ring taken, wakes it (not for each record: a wake-up per
//! copy was most of the thread's CPU; the recording loop also empties the ring), so the ring
//! only has to cover that interval; the records' bytes (only the stack bytes that were
//! copied) wait on the heap, and only while the loop is busy. When the channel is full the thread stops reading: the ring fills and the
//! BPF side keeps the frame-pointer stack of further samples (`ring_full`), as before.
//! [`RingReader::drain`] also empties the ring itself (the thread is kept out meanwhile): a
//! record submitted before the drain began is in what it returns, as when the loop read the
//! ring (off-CPU counts rely on it: a count's copy was sent before the count was added).
use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use aya::maps::{MapData, RingBuf};
use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};

use super::CopiedStack;

/// How long the thread waits for records before it empties the ring all the same: the BPF side
/// wakes it when a quarter of the ring is taken, and the recording loop empties the ring at
/// least every 100 ms ([`RingReader::drain`]), so this only bounds how long a copy waits in the ring when
/// neither happens. At 50 ms its 20 wake-ups a second were ~1 ms of CPU a second with three
/// busy processes (most of the thread's; the loop had emptied the ring already). A drop wakes
/// the thread at once (an eventfd in its epoll set).
const WAIT: Duration = Duration::from_millis(250);
/// How long the thread sleeps when the channel is full (the loop is busy).
const FULL_WAIT: Duration = Duration::from_millis(10);

/// The ring, and a record read from it that found the channel full.
struct Ring {
    ring: RingBuf<MapData>,
    held: Option<CopiedStack>,
}

/// The ring and the thread reading it; dropping it stops the thread (within [`WAIT`]).
pub struct RingReader {
    rx: Receiver<CopiedStack>,
    ring: Arc<Mutex<Ring>>,
    stop: Arc<AtomicBool>,
    /// Written at drop: wakes the thread from its wait.
    wake: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

impl RingReader {
    /// Starts a thread reading `ring`; at most `capacity` records wait for [`RingReader::drain`].
    pub fn spawn(ring: RingBuf<MapData>, capacity: usize) -> io::Result<Self> {
        let wake = eventfd()?;
        let epoll = epoll_on(&[ring.as_raw_fd(), wake.as_raw_fd()])?;
        let (tx, rx) = bounded(capacity.max(1));
        let ring = Arc::new(Mutex::new(Ring { ring, held: None }));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, flag) = (ring.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("ustack-ring".into())
            .spawn(move || read_loop(&r, &epoll, &tx, &flag))?;
        Ok(Self { rx, ring, stop, wake, thread: Some(thread) })
    }

    /// Every record submitted so far, oldest first: those the thread moved, then the rest of
    /// the ring.
    pub fn drain(&self) -> Vec<CopiedStack> {
        let mut g = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<CopiedStack> = self.rx.try_iter().collect();
        out.extend(g.held.take());
        while let Some(item) = g.ring.next() {
            out.extend(CopiedStack::parse(&item));
        }
        out
    }
}

impl Drop for RingReader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to the eventfd this reader owns (a failed
        // write leaves the thread to see the flag within WAIT).
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An epoll instance watching `fds` for input.
fn epoll_on(fds: &[i32]) -> io::Result<OwnedFd> {
    // SAFETY: plain syscalls; the returned fd is owned from here on, `ev` outlives each call.
    unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        if ep < 0 {
            return Err(io::Error::last_os_error());
        }
        let ep = OwnedFd::from_raw_fd(ep);
        for &fd in fds {
            let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: 0 };
            if libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(ep)
    }
}

/// A non-blocking eventfd: the drop's wake-up (never read: once it is written the thread ends).
fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd(2) takes an initial count and flags; a non-negative return is a new
    // descriptor owned from here on.
    unsafe {
        let fd = libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Moves records from the ring to the channel while there is room; false when the channel
/// is full (or gone).
fn move_records(ring: &Mutex<Ring>, tx: &Sender<CopiedStack>) -> bool {
    let mut g = ring.lock().unwrap_or_else(|e| e.into_inner());
    let Ring { ring, held } = &mut *g;
    loop {
        let r = match held.take() {
            Some(r) => r,
            None => {
                let Some(item) = ring.next() else { return true };
                match CopiedStack::parse(&item) {
                    Some(r) => r,
                    None => continue,
                }
            }
        };
        match tx.try_send(r) {
            Ok(()) => {}
            Err(TrySendError::Full(r)) => {
                *held = Some(r);
                return false;
            }
            Err(TrySendError::Disconnected(_)) => return false,
        }
    }
}

fn read_loop(ring: &Mutex<Ring>, epoll: &OwnedFd, tx: &Sender<CopiedStack>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        if !move_records(ring, tx) {
            std::thread::sleep(FULL_WAIT);
            continue;
        }
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: `ev` is valid for one event; the epoll fd is open for the thread's life.
        let n = unsafe { libc::epoll_wait(epoll.as_raw_fd(), &mut ev, 1, WAIT.as_millis() as i32) };
        if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            // Not expected on a valid epoll fd: poll at the wait's pace instead.
            std::thread::sleep(WAIT);
        }
    }
}
