//! A thread that empties the stack-copy ring as records arrive.
//!
//! The ring is mapped twice (wrap-around), so every byte of it counts twice in clrprobe's
//! resident set, whether written or not. Read only from the recording loop (every 100 ms, up
//! to 500 ms when a drain symbolizes), it had to hold half a second of samples: 2 MiB at
//! 99 Hz on 2 CPUs, 4.3 MB resident. This thread waits on the ring's fd (epoll, level
//! triggered) and moves the records into a bounded channel every [`WAIT`], or as soon as the
//! BPF side, finding a quarter of the ring taken, wakes it (not for each record: a wake-up per
//! copy was most of the thread's CPU), so the ring only has to cover that interval; the
//! records' bytes (only the stack bytes that were copied) wait on the heap, and only while the
//! loop is busy. When the channel is full the thread stops reading: the ring fills and the
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

/// How long the thread waits for records before it looks at its stop flag (the longest a drop
/// of the reader waits for the thread) and empties the ring: the BPF side wakes it only when a
/// quarter of the ring is taken, so this is how long a copy may wait in the ring.
const WAIT: Duration = Duration::from_millis(50);
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
    thread: Option<JoinHandle<()>>,
}

impl RingReader {
    /// Starts a thread reading `ring`; at most `capacity` records wait for [`RingReader::drain`].
    pub fn spawn(ring: RingBuf<MapData>, capacity: usize) -> io::Result<Self> {
        let epoll = epoll_on(ring.as_raw_fd())?;
        let (tx, rx) = bounded(capacity.max(1));
        let ring = Arc::new(Mutex::new(Ring { ring, held: None }));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, flag) = (ring.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("ustack-ring".into())
            .spawn(move || read_loop(&r, &epoll, &tx, &flag))?;
        Ok(Self { rx, ring, stop, thread: Some(thread) })
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
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An epoll instance watching `fd` for input.
fn epoll_on(fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscalls; the returned fd is owned from here on, `ev` outlives the call.
    unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        if ep < 0 {
            return Err(io::Error::last_os_error());
        }
        let ep = OwnedFd::from_raw_fd(ep);
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: 0 };
        if libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ep)
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
