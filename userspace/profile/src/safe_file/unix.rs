//! The Unix side of [`super`]: a directory walked with `openat`, files created and renamed
//! relative to its descriptor.
use std::collections::VecDeque;
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use super::SafeFileError;

/// Symbolic links followed at most while resolving one directory (the kernel's limit).
const MAX_LINKS: u32 = 40;

#[derive(Debug)]
pub(super) struct Dir {
    fd: OwnedFd,
}

/// (uid, gid) of the user who ran `sudo`, when we run as root under sudo.
pub(super) fn sudo_ids() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let id = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
    Some((id("SUDO_UID")?, id("SUDO_GID")?))
}

/// Owners whose files and links we accept: root, us, and the sudo user.
fn trusted(uid: u32) -> bool {
    // SAFETY: geteuid has no preconditions.
    uid == 0 || uid == unsafe { libc::geteuid() } || sudo_ids().is_some_and(|(u, _)| u == uid)
}

/// Hands a file or directory we created to the sudo user, through its descriptor.
pub(super) fn chown_to_sudo_user(f: &impl AsRawFd) -> io::Result<()> {
    let Some((uid, gid)) = sudo_ids() else { return Ok(()) };
    // SAFETY: fchown on a descriptor we own.
    if unsafe { libc::fchown(f.as_raw_fd(), uid, gid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte in a file name"))
}

fn stat_at(dir: RawFd, name: &CString, flags: i32) -> io::Result<libc::stat> {
    // SAFETY: zeroed stat is a valid out-parameter; name is NUL-terminated.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn open_at(dir: RawFd, name: &CString, flags: i32, mode: libc::mode_t) -> io::Result<OwnedFd> {
    // SAFETY: name is NUL-terminated; a returned descriptor is ours.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn is_type(st: &libc::stat, t: libc::mode_t) -> bool {
    st.st_mode & libc::S_IFMT == t
}

impl Dir {
    /// Walks `path` one component at a time without following links planted by others,
    /// creating missing directories, and checks the directory reached.
    pub(super) fn open(path: &Path) -> Result<Self, SafeFileError> {
        let io_err = |p: &Path| {
            let p = p.to_path_buf();
            move |source| SafeFileError::Io { path: p, source }
        };
        let root = cstr(OsStr::new("/")).map_err(io_err(path))?;
        let dot = cstr(OsStr::new(".")).map_err(io_err(path))?;
        let dir_flags = libc::O_PATH | libc::O_DIRECTORY;
        let mut fd = if path.is_absolute() {
            open_at(libc::AT_FDCWD, &root, dir_flags, 0)
        } else {
            open_at(libc::AT_FDCWD, &dot, dir_flags, 0)
        }
        .map_err(io_err(path))?;
        let mut walked = if path.is_absolute() { PathBuf::from("/") } else { PathBuf::new() };
        let mut queue: VecDeque<OsString> = components(path);
        let mut links = 0;
        while let Some(comp) = queue.pop_front() {
            let here = walked.join(&comp);
            let c = cstr(&comp).map_err(io_err(&here))?;
            match stat_at(fd.as_raw_fd(), &c, libc::AT_SYMLINK_NOFOLLOW) {
                Ok(st) if is_type(&st, libc::S_IFLNK) => {
                    if !trusted(st.st_uid) {
                        return Err(SafeFileError::ForeignLink { path: here, uid: st.st_uid });
                    }
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(SafeFileError::LinkLoop { path: path.to_path_buf() });
                    }
                    let target = read_link_at(fd.as_raw_fd(), &c).map_err(io_err(&here))?;
                    if target.is_absolute() {
                        fd = open_at(libc::AT_FDCWD, &root, dir_flags, 0).map_err(io_err(&here))?;
                        walked = PathBuf::from("/");
                    }
                    for t in components(&target).into_iter().rev() {
                        queue.push_front(t);
                    }
                    continue;
                }
                Ok(_) => {
                    fd = open_at(fd.as_raw_fd(), &c, dir_flags | libc::O_NOFOLLOW, 0).map_err(|source| {
                        if source.raw_os_error() == Some(libc::ENOTDIR) {
                            SafeFileError::NotDir { path: here.clone() }
                        } else {
                            SafeFileError::Io { path: here.clone(), source }
                        }
                    })?;
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    // SAFETY: c is NUL-terminated; mkdirat does not follow a link at c.
                    if unsafe { libc::mkdirat(fd.as_raw_fd(), c.as_ptr(), 0o755) } != 0 {
                        let e = io::Error::last_os_error();
                        if e.raw_os_error() != Some(libc::EEXIST) {
                            return Err(SafeFileError::Io { path: here, source: e });
                        }
                        queue.push_front(comp); // raced with someone: look again
                        continue;
                    }
                    let created = open_at(fd.as_raw_fd(), &c, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0)
                        .map_err(io_err(&here))?;
                    chown_to_sudo_user(&created).map_err(io_err(&here))?;
                    fd = created;
                }
                Err(e) => return Err(SafeFileError::Io { path: here, source: e }),
            }
            walked = here;
        }
        // SAFETY: zeroed stat is a valid out-parameter of fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(SafeFileError::Io { path: path.to_path_buf(), source: io::Error::last_os_error() });
        }
        if !is_type(&st, libc::S_IFDIR) {
            return Err(SafeFileError::NotDir { path: path.to_path_buf() });
        }
        if !trusted(st.st_uid) {
            return Err(SafeFileError::ForeignDir { path: path.to_path_buf(), uid: st.st_uid });
        }
        if st.st_mode & 0o002 != 0 && st.st_mode & libc::S_ISVTX == 0 {
            return Err(SafeFileError::OpenDir { path: path.to_path_buf() });
        }
        Ok(Dir { fd })
    }

    /// What is at the final name now must be nothing, or a regular file of a trusted owner.
    pub(super) fn check_final(&self, name: &OsStr, path: &Path) -> Result<(), SafeFileError> {
        let c = cstr(name).map_err(|source| SafeFileError::Io { path: path.to_path_buf(), source })?;
        match stat_at(self.fd.as_raw_fd(), &c, libc::AT_SYMLINK_NOFOLLOW) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(source) => Err(SafeFileError::Io { path: path.to_path_buf(), source }),
            Ok(st) if is_type(&st, libc::S_IFLNK) => Err(SafeFileError::FinalLink { path: path.to_path_buf() }),
            Ok(st) if !is_type(&st, libc::S_IFREG) => Err(SafeFileError::NotRegular { path: path.to_path_buf() }),
            Ok(st) if !trusted(st.st_uid) => Err(SafeFileError::ForeignFile { path: path.to_path_buf(), uid: st.st_uid }),
            Ok(_) => Ok(()),
        }
    }

    /// Creates a fresh hidden temporary file next to the final name (never an existing file).
    pub(super) fn create_temp(&self, name: &OsStr, path: &Path) -> Result<(File, OsString), SafeFileError> {
        let io_err = |source| SafeFileError::Io { path: path.to_path_buf(), source };
        let mut base = name.as_bytes().to_vec();
        base.truncate(200);
        for i in 0..1000u32 {
            let mut tmp = b".".to_vec();
            tmp.extend_from_slice(&base);
            tmp.extend_from_slice(format!(".{}.{i}.tmp", std::process::id()).as_bytes());
            let tmp = OsString::from_vec(tmp);
            let c = cstr(&tmp).map_err(io_err)?;
            let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
            match open_at(self.fd.as_raw_fd(), &c, flags, 0o644) {
                Ok(fd) => return Ok((File::from(fd), tmp)),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                Err(e) => return Err(io_err(e)),
            }
        }
        Err(io_err(io::Error::new(io::ErrorKind::AlreadyExists, "no free temporary name")))
    }

    pub(super) fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        let (f, t) = (cstr(from)?, cstr(to)?);
        let d = self.fd.as_raw_fd();
        // SAFETY: both names are NUL-terminated; renameat replaces a link, never follows it.
        if unsafe { libc::renameat(d, f.as_ptr(), d, t.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Removes the hidden temporary files `.BASE.PID.N.tmp` a killed clrprobe left here: BASE
    /// starts with `base`, PID is no running clrprobe, and the file is a regular file (not a
    /// link) of a trusted owner. Returns the names removed.
    pub(super) fn remove_stale_temps(&self, dir: &Path, base: &[u8]) -> Vec<OsString> {
        let mut removed = Vec::new();
        let Ok(entries) = std::fs::read_dir(dir) else { return removed };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(pid) = stale_temp_pid(name.as_bytes(), base) else { continue };
            if std::fs::read(format!("/proc/{pid}/comm")).is_ok_and(|c| c.starts_with(b"clrprobe")) {
                continue;
            }
            let Ok(c) = cstr(&name) else { continue };
            // Checked through the directory fd, links not followed; unlinkat removes the name.
            match stat_at(self.fd.as_raw_fd(), &c, libc::AT_SYMLINK_NOFOLLOW) {
                Ok(st) if is_type(&st, libc::S_IFREG) && trusted(st.st_uid) => {
                    self.unlink(&name);
                    removed.push(name);
                }
                _ => {}
            }
        }
        removed
    }

    pub(super) fn unlink(&self, name: &OsStr) {
        if let Ok(c) = cstr(name) {
            // SAFETY: c is NUL-terminated; unlinkat removes the name, never a link's target.
            unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) };
        }
    }
}

/// The PID of a temporary name `.BASE….PID.N.tmp` whose BASE starts with `base`.
fn stale_temp_pid(name: &[u8], base: &[u8]) -> Option<u32> {
    let rest = name.strip_prefix(b".")?.strip_suffix(b".tmp")?;
    if !rest.starts_with(base) || base.is_empty() {
        return None;
    }
    let s = std::str::from_utf8(rest).ok()?;
    let mut parts = s.rsplitn(3, '.');
    let n = parts.next()?;
    let pid = parts.next()?;
    parts.next()?;
    (n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty()).then_some(())?;
    pid.parse().ok()
}

/// The components of `path` to walk (root and `.` dropped, `..` kept).
fn components(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

fn read_link_at(dir: RawFd, name: &CString) -> io::Result<PathBuf> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: buf is writable for its length; name is NUL-terminated.
    let n = unsafe { libc::readlinkat(dir, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(PathBuf::from(OsString::from_vec(buf)))
}
