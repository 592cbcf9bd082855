//! Waiting on the aggregator's answer from a plain thread: parked until the answer comes or
//! the deadline passes (a `try_recv` every 5 ms woke the recording's main thread four times
//! for each progress query the aggregator answers within its 20 ms idle poll).
use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, Wake, Waker},
    thread::Thread,
    time::Instant,
};

use tokio::sync::oneshot;

/// Unparks the waiting thread when the answer is sent (or its sender dropped).
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// The answer on `rx`, or None once `deadline` passed or its sender went without answering.
pub fn wait<T>(mut rx: oneshot::Receiver<T>, deadline: Instant) -> Option<T> {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        match Pin::new(&mut rx).poll(&mut cx) {
            Poll::Ready(r) => return r.ok(),
            Poll::Pending => {
                let now = Instant::now();
                if now >= deadline {
                    return None;
                }
                // Woken by the answer, by a stray unpark (polled again), or at the deadline.
                std::thread::park_timeout(deadline - now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_answer_wakes_the_wait_at_once_and_none_comes_at_the_deadline() {
        let (tx, rx) = oneshot::channel();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            tx.send(7u32).ok();
        });
        let start = Instant::now();
        assert_eq!(wait(rx, start + Duration::from_secs(10)), Some(7));
        assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
        t.join().unwrap();
        // No answer: None at the deadline, not before.
        let (_tx, rx) = oneshot::channel::<u32>();
        let start = Instant::now();
        assert_eq!(wait(rx, start + Duration::from_millis(100)), None);
        assert!(start.elapsed() >= Duration::from_millis(100));
        // The sender gone without an answer: None at once.
        let (tx, rx) = oneshot::channel::<u32>();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(tx);
        });
        let start = Instant::now();
        assert_eq!(wait(rx, start + Duration::from_secs(10)), None);
        assert!(start.elapsed() < Duration::from_secs(5));
        t.join().unwrap();
    }
}
