//! A streaming EventPipe session: the connection that carries NetTrace bytes, and a guard that
//! always stops the session.
//!
//! # Stopping
//! A session is stopped by StopTracing on a *new* connection. The runtime then flushes the
//! remaining events (and rundown, if requested) into the stream, writes the end tag and closes
//! it. Ways to stop, all idempotent (only the first one sends StopTracing):
//! - [`StopHandle::stop`] from another thread while a reader consumes the stream;
//! - [`Session::finish`] from the reading thread: sends StopTracing, copies the rest of the stream
//!   to a sink, then reads the reply (no deadlock on a full socket buffer);
//! - dropping the [`Session`]: best effort — sends StopTracing, drains the stream for at most
//!   [`Session::DROP_DRAIN_LIMIT`], reads the reply if it came, and closes. Errors are ignored.
//!   If the runtime has already gone, nothing happens.
//! - [`StopHandle::abort`]: gives up on a runtime that does not answer (stopped with SIGSTOP,
//!   or a fake server): shuts the stream down, so a read blocked on it returns end of stream
//!   at once, and nothing more is sent.
use std::{
    io::{self, Read, Write},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use super::{
    client::Client,
    collect::CollectTracingVersion,
    error::IpcError,
    header::{CommandId, command_set},
    reply::read_reply,
    transport::Connection,
};

const STOP_TRACING: CommandId = CommandId::new(command_set::EVENTPIPE, 0x01);

/// A running session. Read it to get the NetTrace stream; it ends (EOF) after the session stops.
#[derive(Debug)]
pub struct Session {
    id: u64,
    version: CollectTracingVersion,
    stream: Connection,
    stop: StopHandle,
}

/// Stops a session from any thread. Cloneable; only the first stop sends StopTracing.
#[derive(Debug, Clone)]
pub struct StopHandle {
    client: Client,
    id: u64,
    stopped: Arc<AtomicBool>,
    aborted: Arc<AtomicBool>,
    /// A second handle on the session stream, to shut it down from any thread.
    stream: Option<Arc<Connection>>,
}

impl StopHandle {
    pub fn session_id(&self) -> u64 {
        self.id
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Sends StopTracing and waits for the reply (at most the client's timeout). The session
    /// stream must be read meanwhile.
    pub fn stop(&self) -> Result<(), IpcError> {
        self.stop_within(self.client.timeout())
    }

    /// Sends StopTracing and waits at most `timeout` for the connection, the write and the reply.
    pub fn stop_within(&self, timeout: Duration) -> Result<(), IpcError> {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let result = self.client.clone().with_timeout(timeout).stop_tracing(self.id).map(|_| ());
        if result.is_err() && !self.is_aborted() {
            // Let the guard's Drop try again (best effort).
            self.stopped.store(false, Ordering::SeqCst);
        }
        result
    }

    /// Gives up on the session: shuts its stream down (a reader blocked on it sees end of
    /// stream at once) and sends nothing more, not even from the guard's Drop.
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
        self.stopped.store(true, Ordering::SeqCst);
        if let Some(s) = &self.stream {
            let _ = s.shutdown();
        }
    }

    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }
}

impl Session {
    /// How long dropping a session keeps draining the stream after StopTracing (and waits
    /// for the reply).
    pub const DROP_DRAIN_LIMIT: Duration = Duration::from_secs(1);

    pub(crate) fn new(client: Client, id: u64, version: CollectTracingVersion, stream: Connection) -> Self {
        let clone = stream.try_clone().ok().map(Arc::new);
        let stop = StopHandle {
            client,
            id,
            stopped: Arc::new(AtomicBool::new(false)),
            aborted: Arc::new(AtomicBool::new(false)),
            stream: clone,
        };
        Self { id, version, stream, stop }
    }

    /// The runtime's session id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The CollectTracing version the runtime accepted.
    pub fn version(&self) -> CollectTracingVersion {
        self.version
    }

    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// Stops the session (unless already stopped) and copies the rest of the stream into `sink`
    /// until the runtime closes it. Returns the number of bytes copied.
    pub fn finish(mut self, sink: &mut impl Write) -> Result<u64, IpcError> {
        let pending = if self.stop.stopped.swap(true, Ordering::SeqCst) {
            None
        } else {
            Some(self.stop.client.send(STOP_TRACING, &self.id.to_le_bytes())?)
        };
        let copied = io::copy(&mut self.stream, sink)?;
        if let Some(mut conn) = pending {
            read_reply(&mut conn)?.session_id()?;
        }
        Ok(copied)
    }

    fn stop_on_drop(&mut self) {
        if self.stop.stopped.swap(true, Ordering::SeqCst) || self.stop.is_aborted() {
            return;
        }
        let client = self.stop.client.clone().with_timeout(Self::DROP_DRAIN_LIMIT);
        let Ok(mut conn) = client.send(STOP_TRACING, &self.id.to_le_bytes()) else { return };
        let deadline = Instant::now() + Self::DROP_DRAIN_LIMIT;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.stream.set_read_timeout(Some(left)).is_err() {
                break;
            }
            match self.stream.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = read_reply(&mut conn);
    }
}

/// How long a read of the session stream that had to wait for data waits again for the rest
/// of the runtime's burst (see `Connection::read_gathering`).
#[cfg(unix)]
const GATHER: Duration = Duration::from_millis(1);

impl Read for Session {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        #[cfg(unix)]
        {
            self.stream.read_gathering(buf, GATHER)
        }
        #[cfg(not(unix))]
        {
            self.stream.read(buf)
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop_on_drop();
    }
}
