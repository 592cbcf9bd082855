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
            Endpoint::UnixSocket(p) => {
                std::os::unix::net::UnixStream::connect(p).map(|s| Connection { inner: s }).map_err(map)
            }
            #[cfg(windows)]
            Endpoint::NamedPipe(p) => windows_pipe::open(p).map(|f| Connection { inner: f }).map_err(map),
        }
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
