//! Transports: a Unix domain socket (Linux/macOS) or a named pipe (Windows). Each connection
//! carries one command; a session's connection then carries the NetTrace stream.
use std::{
    io::{self, Read, Write},
    path::PathBuf,
    time::Duration,
};

use super::error::IpcError;

/// Where a runtime's diagnostics server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `…/dotnet-diagnostic-{pid}-{key}-socket`.
    #[cfg(unix)]
    UnixSocket(PathBuf),
    /// `\\.\pipe\dotnet-diagnostic-{pid}`.
    #[cfg(windows)]
    NamedPipe(PathBuf),
}

impl Endpoint {
    pub fn path(&self) -> &std::path::Path {
        match self {
            #[cfg(unix)]
            Endpoint::UnixSocket(p) => p,
            #[cfg(windows)]
            Endpoint::NamedPipe(p) => p,
        }
    }

    /// Opens a new connection.
    pub fn connect(&self) -> Result<Connection, IpcError> {
        let path = self.path().to_path_buf();
        let map = |source: io::Error| match source.kind() {
            io::ErrorKind::PermissionDenied => IpcError::PermissionDenied { path: path.clone(), source },
            _ => IpcError::Connect { path: path.clone(), source },
        };
        match self {
            #[cfg(unix)]
            Endpoint::UnixSocket(p) => unix_connect::connect(p, CONNECT_DEADLINE).map(|s| Connection { inner: s }).map_err(map),
            #[cfg(windows)]
            Endpoint::NamedPipe(p) => windows_pipe::open(p).map(|f| Connection { inner: f }).map_err(map),
        }
    }
}

/// How long connecting may wait for a diagnostics server that does not accept (its listen
/// backlog full: a stopped or hostile process).
#[cfg(unix)]
pub const CONNECT_DEADLINE: Duration = Duration::from_secs(1);

/// Connecting without following links and without blocking: the socket file is opened with
/// O_PATH|O_NOFOLLOW and checked through that fd (a socket, owned by its process's user or
/// root), then connected through `/proc/self/fd/N` — the very inode checked, whatever is
/// renamed or linked over the path meanwhile. The connect is non-blocking: a full backlog
/// (EAGAIN) is retried until the deadline, then refused.
#[cfg(unix)]
mod unix_connect {
    use std::{
        ffi::CString,
        io,
        os::fd::{AsRawFd, FromRawFd, OwnedFd},
        os::unix::{ffi::OsStrExt, fs::MetadataExt, net::UnixStream},
        path::Path,
        time::{Duration, Instant},
    };

    fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
        if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
    }

    /// The uids (real, effective) of the process whose socket `path` is: the pid of
    /// `/proc/PID/root/…`, else the pid in the socket's name when that process's start time is
    /// the name's key (None when unknown: the discovery checked the owner already).
    fn owner_of(path: &Path) -> Option<(u32, u32)> {
        let mut comps = path.components().map(|c| c.as_os_str().to_string_lossy().into_owned());
        let pid = match (comps.next().as_deref(), comps.next().as_deref(), comps.next()) {
            (Some("/"), Some("proc"), Some(pid)) if pid.parse::<u32>().is_ok() => pid.parse().ok(),
            _ => super::super::discovery::socket_owner_pid(path.file_name()?),
        }?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        super::super::discovery::status_uids(&status)
    }

    pub fn connect(path: &Path, deadline: Duration) -> io::Result<UnixStream> {
        let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the socket path"))?;
        // SAFETY: open(2) with a NUL-terminated path; the fd returned is owned below.
        let fd = cvt(unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) })?;
        // SAFETY: a fresh fd nobody else owns.
        let target = unsafe { OwnedFd::from_raw_fd(fd) };
        let meta = std::fs::File::from(target.try_clone()?).metadata()?;
        use std::os::unix::fs::FileTypeExt;
        if meta.file_type().is_symlink() || !meta.file_type().is_socket() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a socket (refused)"));
        }
        let uid = meta.uid();
        if uid != 0 && owner_of(path).is_some_and(|(r, e)| uid != r && uid != e) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("the socket belongs to uid {uid}, not to its process's user or root (refused)")));
        }
        let via = format!("/proc/self/fd/{}", target.as_raw_fd());
        // SAFETY: socket(2) with constant arguments; the fd is owned below.
        let sock = cvt(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: a fresh fd nobody else owns.
        let sock = unsafe { OwnedFd::from_raw_fd(sock) };
        // SAFETY: sockaddr_un is plain data; zeroed is a valid value.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr.sun_path.iter_mut().zip(via.as_bytes()) {
            *d = *s as libc::c_char;
        }
        let len = (std::mem::size_of::<libc::sa_family_t>() + via.len() + 1) as libc::socklen_t;
        let end = Instant::now() + deadline;
        loop {
            // SAFETY: connect(2) with a valid sockaddr_un of `len` bytes.
            let r = unsafe { libc::connect(sock.as_raw_fd(), (&raw const addr).cast(), len) };
            if r == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) if Instant::now() < end => std::thread::sleep(Duration::from_millis(10)),
                Some(libc::EAGAIN) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the diagnostics server did not accept a connection within {:.1} s (its backlog is full: is the process stopped?)", deadline.as_secs_f64()),
                    ));
                }
                Some(libc::EINTR) => {}
                _ => return Err(e),
            }
        }
        // Blocking again: reads and writes carry their own timeouts.
        // SAFETY: fcntl(2) on an fd we own.
        let flags = cvt(unsafe { libc::fcntl(sock.as_raw_fd(), libc::F_GETFL) })?;
        // SAFETY: as above.
        cvt(unsafe { libc::fcntl(sock.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) })?;
        Ok(UnixStream::from(sock))
    }
}

#[cfg(unix)]
type Inner = std::os::unix::net::UnixStream;
#[cfg(windows)]
type Inner = std::fs::File;

/// One open connection to the diagnostics server.
#[derive(Debug)]
pub struct Connection {
    inner: Inner,
}

impl Connection {
    /// A second handle on the same connection (to [`shutdown`](Self::shutdown) it from another thread).
    pub fn try_clone(&self) -> io::Result<Connection> {
        Ok(Connection { inner: self.inner.try_clone()? })
    }

    /// Shuts the connection down both ways: a read blocked on it in another thread returns
    /// end of stream at once. No-op on Windows pipes.
    pub fn shutdown(&self) -> io::Result<()> {
        #[cfg(unix)]
        {
            self.inner.shutdown(std::net::Shutdown::Both)
        }
        #[cfg(windows)]
        {
            Ok(())
        }
    }

    /// Bounds how long a read may block (`None` = forever). No-op on Windows pipes, which
    /// std opens synchronously without timeouts.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        #[cfg(unix)]
        {
            self.inner.set_read_timeout(timeout)
        }
        #[cfg(windows)]
        {
            let _ = timeout;
            Ok(())
        }
    }

    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        #[cfg(unix)]
        {
            self.inner.set_write_timeout(timeout)
        }
        #[cfg(windows)]
        {
            let _ = timeout;
            Ok(())
        }
    }
}

/// A read that woke with fewer bytes than this waits for the rest of the burst
/// ([`Connection::read_gathering`]): an object's first writes (tag and type header) are 1 to
/// 30 bytes; a block with its header, more.
#[cfg(unix)]
pub const GATHER_BELOW: usize = 64;

#[cfg(unix)]
impl Connection {
    /// What has arrived, without waiting: `None` if nothing has.
    fn recv_now(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        use std::os::fd::AsRawFd;
        loop {
            // SAFETY: recv(2) writes at most `buf.len()` bytes into `buf`.
            let r = unsafe { libc::recv(self.inner.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if r >= 0 {
                return Ok(Some(r as usize));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock => return Ok(None),
                _ => return Err(e),
            }
        }
    }

    /// A read that gathers a burst of the peer's writes: what has arrived is returned at once;
    /// when nothing has, the read waits for data (as a plain read: the read timeout and a
    /// [`shutdown`](Self::shutdown) end it), then, if that brought fewer than
    /// [`GATHER_BELOW`] bytes and `buf` has room for more, waits `gather` more and takes what
    /// arrived meanwhile. A runtime writes each NetTrace object as several small writes (tag,
    /// type header, size, body, end tag): a reader woken by the first of them found each of
    /// the others a moment later (or waited, and was woken again). A reader that found more
    /// than a few bytes on waking (the burst was written before it ran) does not wait.
    pub fn read_gathering(&mut self, buf: &mut [u8], gather: Duration) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if let Some(n) = self.recv_now(buf)? {
            return Ok(n);
        }
        let n = self.inner.read(buf)?;
        if n == 0 || n == buf.len() || n >= GATHER_BELOW {
            return Ok(n);
        }
        std::thread::sleep(gather);
        // An error now comes back from the next read: the bytes read are not lost.
        Ok(n + self.recv_now(&mut buf[n..]).ok().flatten().unwrap_or(0))
    }
}

impl Read for Connection {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            // A Windows pipe whose server closed reports BrokenPipe: that is end of stream.
            Err(e) if cfg!(windows) && e.kind() == io::ErrorKind::BrokenPipe => Ok(0),
            other => other,
        }
    }
}

impl Write for Connection {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(windows)]
mod windows_pipe {
    use std::{fs::File, io, path::Path, time::Duration};

    /// ERROR_PIPE_BUSY: every instance of the pipe is in use; the server creates a new one soon.
    const ERROR_PIPE_BUSY: i32 = 231;

    pub fn open(path: &Path) -> io::Result<File> {
        let mut last = None;
        for _ in 0..50 {
            match std::fs::OpenOptions::new().read(true).write(true).open(path) {
                Ok(f) => return Ok(f),
                Err(e) if e.raw_os_error() == Some(ERROR_PIPE_BUSY) => {
                    last = Some(e);
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("pipe busy")))
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::{
        io::Write,
        os::unix::net::UnixStream,
        time::{Duration, Instant},
    };

    use super::*;
    use crate::nettrace::{NetTraceReader, StreamStatus};

    fn pair() -> (Connection, UnixStream) {
        let (a, b) = UnixStream::pair().expect("socket pair");
        (Connection { inner: a }, b)
    }

    #[test]
    fn what_has_arrived_comes_at_once_and_a_first_small_write_waits_for_the_rest() {
        let (mut c, mut peer) = pair();
        let mut buf = [0u8; 256];
        peer.write_all(&[7; 100]).unwrap();
        assert_eq!(c.read_gathering(&mut buf, Duration::from_secs(5)).unwrap(), 100);
        // One byte, then the rest of the object soon after: one read takes both.
        let w = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            peer.write_all(&[5]).unwrap();
            std::thread::sleep(Duration::from_millis(5));
            peer.write_all(&[1; 20]).unwrap();
            peer
        });
        assert_eq!(c.read_gathering(&mut buf, Duration::from_millis(200)).unwrap(), 21);
        drop(w.join().unwrap());
        assert_eq!(c.read_gathering(&mut buf, Duration::from_millis(200)).unwrap(), 0, "end of stream");
    }

    #[test]
    fn a_stream_stalled_mid_block_ends_when_shut_down() {
        let bytes = clrprobe_tests::corpus::read("perfview__eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace");
        let (c, mut peer) = pair();
        let stop = c.try_clone().unwrap();
        let cut = bytes.len() / 2;
        let w = std::thread::spawn(move || {
            // The first half, then nothing (the peer keeps the socket open).
            let _ = peer.write_all(&bytes[..cut]);
            std::thread::sleep(Duration::from_secs(10));
        });
        let reader = std::thread::spawn(move || {
            let mut r = NetTraceReader::new(GatheringConn(c)).expect("header");
            let mut n = 0;
            while let Ok(Some(_)) = r.next_event() {
                n += 1;
            }
            (n, r.status(), Instant::now())
        });
        std::thread::sleep(Duration::from_millis(300));
        let shut = Instant::now();
        stop.shutdown().unwrap();
        let (n, status, ended) = reader.join().unwrap();
        assert!(ended.saturating_duration_since(shut) < Duration::from_secs(2), "{:?}", ended - shut);
        assert!(n > 0);
        assert_eq!(status, StreamStatus::Truncated);
        drop(w);
    }

    struct GatheringConn(Connection);

    impl Read for GatheringConn {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.0.read_gathering(buf, Duration::from_millis(1))
        }
    }
}
