//! Connecting to a diagnostics socket never blocks without a deadline and never follows a
//! link: a real listening socket whose backlog is full (listen(1), never accepting) is refused
//! within about a second; a link to a socket and a regular file are refused; a normal listener
//! is connected to (through the fd of the very socket file checked).
use std::{
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use clrprobe_eventpipe::ipc::{Endpoint, IpcError};

fn dir(name: &str) -> PathBuf {
        clrprobe_tests::scratch_dir(&format!("connect-{name}"))
}

/// A listening socket at `path` with `backlog`, never accepting.
fn listen(path: &Path, backlog: i32) -> OwnedFd {
    // SAFETY: plain socket syscalls on a fresh fd; the sockaddr is zeroed then filled.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let p = path.as_os_str().as_encoded_bytes();
        for (d, s) in addr.sun_path.iter_mut().zip(p) {
            *d = *s as libc::c_char;
        }
        let len = (std::mem::size_of::<libc::sa_family_t>() + p.len() + 1) as libc::socklen_t;
        assert_eq!(libc::bind(fd, (&raw const addr).cast(), len), 0, "bind {}", path.display());
        assert_eq!(libc::listen(fd, backlog), 0);
        OwnedFd::from_raw_fd(fd)
    }
}

#[test]
fn a_full_backlog_is_refused_within_two_seconds() {
    let d = dir("backlog");
    let path = d.join("dotnet-diagnostic-1-1-socket");
    let _server = listen(&path, 1);
    // Fill the backlog with non-blocking connections nobody accepts, until one is refused
    // at once (EAGAIN): the backlog is full.
    let mut held = Vec::new();
    let mut full = false;
    for _ in 0..256 {
        // SAFETY: a fresh socket, owned below.
        let sock = unsafe { OwnedFd::from_raw_fd(libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0)) };
        // SAFETY: sockaddr_un is plain data.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let p = path.as_os_str().as_encoded_bytes();
        for (d, s) in addr.sun_path.iter_mut().zip(p) {
            *d = *s as libc::c_char;
        }
        let len = (std::mem::size_of::<libc::sa_family_t>() + p.len() + 1) as libc::socklen_t;
        // SAFETY: connect(2) with a valid address.
        let r = unsafe { libc::connect(sock.as_raw_fd(), (&raw const addr).cast(), len) };
        if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
            full = true;
            break;
        }
        assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
        held.push(UnixStream::from(sock));
    }
    assert!(full, "the backlog filled up ({} connections held)", held.len());
    let t = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let ep = Endpoint::UnixSocket(path.clone());
    std::thread::spawn(move || {
        let _ = tx.send(ep.connect());
    });
    // A blocking connect would wait here for good: fail instead.
    let r = rx.recv_timeout(Duration::from_secs(5)).expect("connect to a full backlog returned within 5 s");
    let took = t.elapsed();
    let e = r.expect_err("a full backlog is refused");
    assert!(took < Duration::from_secs(2), "refused after {took:?}");
    assert!(matches!(e, IpcError::Connect { .. }), "{e}");
    assert!(e.to_string().contains(&path.display().to_string()), "names the socket: {e}");
    eprintln!("refused after {took:?}: {e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn links_and_files_are_refused_a_listener_is_connected() {
    let d = dir("links");
    let real = d.join("real-socket");
    let server = listen(&real, 16);
    let link = d.join("dotnet-diagnostic-2-2-socket");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let e = Endpoint::UnixSocket(link).connect().expect_err("a link is refused");
    assert!(e.to_string().contains("not a socket"), "{e}");
    let file = d.join("file");
    std::fs::write(&file, b"x").unwrap();
    let e = Endpoint::UnixSocket(file).connect().expect_err("a regular file is refused");
    assert!(e.to_string().contains("not a socket"), "{e}");
    let conn = Endpoint::UnixSocket(real).connect().expect("a listening socket is connected");
    // SAFETY: accept(2) on our listener; one connection is pending.
    let accepted = unsafe { libc::accept(server.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut()) };
    assert!(accepted >= 0, "the listener got the connection");
    // SAFETY: the accepted fd is ours.
    drop(unsafe { OwnedFd::from_raw_fd(accepted) });
    drop(conn);
    let _ = std::fs::remove_dir_all(&d);
}
