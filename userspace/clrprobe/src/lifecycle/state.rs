//! What clrprobe switched on in which target, kept in a state directory under /run so that it
//! outlives a clrprobe process killed mid-recording, and shared by several clrprobe processes
//! on one target.
//!
//! Layout of [`STATE_DIR`] (root-owned, mode 0700, checked on every open, never followed
//! through a link):
//! - `lock`: a global flock held for the short file operations below (never across IPC);
//! - `t-PID-START` (START = the target's start time in clock ticks, so a reused pid is another
//!   target): a JSON [`Record`] — how the perf map was switched on and which files to remove.
//!   Each clrprobe using the target holds a shared flock on it for as long as it does: the
//!   users' count is the kernel's, and it drops by itself when a clrprobe dies. The one that
//!   gets an exclusive lock on leaving is the last user and switches the map off.
//!
//! A record whose file nobody holds is stale (its clrprobe died): [`sweep`] — run by the
//! guardian when its clrprobe ends and at every start — switches the map off and removes the files.
use clrprobe_symbolizer::target_file::{self, Owner};
use std::{
    ffi::CString,
    fs::File,
    io::{self, Read, Seek, Write},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use clrprobe_eventpipe::ipc::{Client, IpcError, ServerError};

/// Where the state lives.
pub const STATE_DIR: &str = "/run/clrprobe";
/// How long to wait for a lock held by another clrprobe.
const LOCK_WAIT: Duration = Duration::from_secs(3);
/// Bound of DisablePerfMap when a target is left (a stopped target does not answer).
pub const DISABLE_TIMEOUT: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{path}: {source}")]
    Io { path: String, #[source] source: io::Error },
    #[error("refusing the state directory {path}: {why}; remove it (clrprobe recreates it root-owned, mode 0700)")]
    Unsafe { path: String, why: String },
    #[error("{path} stayed locked by another clrprobe for {} s", LOCK_WAIT.as_secs())]
    Busy { path: String },
}

/// How a target's perf map came to be on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Switched {
    /// EnablePerfMap over the diagnostics socket.
    Ipc,
    /// `DOTNET_PerfMapEnabled=1` in the environment of a program clrprobe launched.
    Env,
}

/// What was switched on in one target.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub pid: u32,
    pub start_time: u64,
    pub how: Switched,
    /// Files to remove once the map is off (through /proc/PID/root, and by their own path
    /// when the target shares clrprobe's root).
    pub files: Vec<PathBuf>,
}

/// The target's start time (field 22 of /proc/PID/stat), or None when it is gone.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn io_err(path: impl Into<String>) -> impl FnOnce(io::Error) -> StateError {
    let path = path.into();
    move |source| StateError::Io { path, source }
}

fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL in state names")
}

/// The checked state directory, opened once per process.
pub struct StateDir {
    fd: OwnedFd,
    pub(super) path: String,
}

impl StateDir {
    /// Creates (mode 0700) or opens [`STATE_DIR`], refusing a link, a non-directory, another
    /// owner than us, or any access for group or others.
    pub fn open() -> Result<Self, StateError> {
        Self::open_at(STATE_DIR)
    }

    pub fn open_at(path: &str) -> Result<Self, StateError> {
        let c = cstr(path);
        // SAFETY: mkdir/open with a valid C string.
        unsafe { libc::mkdir(c.as_ptr(), 0o700) };
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ELOOP) | Some(libc::ENOTDIR) => StateError::Unsafe { path: path.into(), why: "not a directory (a link?)".into() },
                _ => StateError::Io { path: path.into(), source: e },
            });
        }
        // SAFETY: fd was just opened and is owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let st = fstat(&fd).map_err(io_err(path))?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if st.st_uid != me {
            return Err(StateError::Unsafe { path: path.into(), why: format!("owned by uid {}, not {me}", st.st_uid) });
        }
        if st.st_mode & 0o077 != 0 {
            return Err(StateError::Unsafe { path: path.into(), why: format!("mode {:o} lets others in", st.st_mode & 0o7777) });
        }
        Ok(Self { fd, path: path.into() })
    }

    pub(super) fn open_file(&self, name: &str, create: bool) -> Result<Option<File>, StateError> {
        let c = cstr(name);
        let flags = libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | if create { libc::O_CREAT } else { 0 };
        // SAFETY: openat on our directory fd with a valid name.
        let fd = unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags, 0o600) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            if !create && e.kind() == io::ErrorKind::NotFound {
                return Ok(None);
            }
            return Err(StateError::Io { path: format!("{}/{name}", self.path), source: e });
        }
        // SAFETY: fd was just opened and is owned here.
        let f = unsafe { File::from_raw_fd(fd) };
        let st = fstat(&f).map_err(io_err(format!("{}/{name}", self.path)))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(StateError::Unsafe { path: format!("{}/{name}", self.path), why: "not a regular file".into() });
        }
        Ok(Some(f))
    }

    pub(super) fn unlink(&self, name: &str) {
        let c = cstr(name);
        // SAFETY: unlinkat on our directory fd with a valid name.
        unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) };
    }

    /// The global lock (exclusive), waiting at most [`LOCK_WAIT`].
    pub(super) fn lock(&self) -> Result<Locked, StateError> {
        let f = self.open_file("lock", true)?.expect("created");
        flock_wait(&f, libc::LOCK_EX, Instant::now() + LOCK_WAIT)
            .map_err(|_| StateError::Busy { path: format!("{}/lock", self.path) })?;
        Ok(Locked { _f: f })
    }

    pub(super) fn names_with(&self, prefix: &str) -> Vec<String> {
        self.all_names().into_iter().filter(|n| n.starts_with(prefix)).collect()
    }

    fn names(&self) -> Vec<String> {
        self.names_with("t-")
    }

    fn all_names(&self) -> Vec<String> {
        std::fs::read_dir(&self.path)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()
    }
}

/// Held while the global lock is (closing the file releases it).
pub(super) struct Locked {
    _f: File,
}

pub(super) fn fstat(fd: &impl AsRawFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid out buffer for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

pub(super) fn try_flock(f: &File, op: libc::c_int) -> bool {
    // SAFETY: flock on an open fd.
    unsafe { libc::flock(f.as_raw_fd(), op | libc::LOCK_NB) == 0 }
}

fn flock_wait(f: &File, op: libc::c_int, deadline: Instant) -> Result<(), ()> {
    loop {
        if try_flock(f, op) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn read_record(f: &mut File) -> Option<Record> {
    let mut s = String::new();
    f.seek(io::SeekFrom::Start(0)).ok()?;
    f.take(64 * 1024).read_to_string(&mut s).ok()?;
    serde_json::from_str(&s).ok()
}

fn entry_name(pid: u32, start: u64) -> String {
    format!("t-{pid}-{start}")
}

/// This process's use of one target: a shared lock on its entry.
pub struct Member {
    file: File,
    name: String,
    pub record: Option<Record>,
}

/// What [`join`] found.
pub enum Joined {
    /// Another clrprobe (live, or dead without cleanup) switched the map on: share it.
    Shared(Member),
    /// Nobody had switched anything on: `Member` has no record yet; write one with
    /// [`Member::write`] before switching anything on.
    First(Member),
}

/// Joins the users of `pid` (a shared lock on its entry). `first` runs under the global lock
/// when no record exists, so that two clrprobe processes never both switch the map on; it
/// must be quick (files only, no IPC: it holds every clrprobe's lock): it writes the record
/// of what the caller is about to switch on, which the caller then does.
pub fn join<T>(dir: &StateDir, pid: u32, first: impl FnOnce(&mut Member) -> T) -> Result<(Member, Option<T>), StateError> {
    let start = start_time(pid).ok_or_else(|| StateError::Io { path: format!("/proc/{pid}/stat"), source: io::ErrorKind::NotFound.into() })?;
    let name = entry_name(pid, start);
    let _lock = dir.lock()?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        let mut file = dir.open_file(&name, true)?.expect("created");
        // An exclusive holder is a last user tearing down: wait for it to unlink the entry.
        if !try_flock(&file, libc::LOCK_SH) || fstat(&file).map(|s| s.st_nlink == 0).unwrap_or(true) {
            if Instant::now() >= deadline {
                return Err(StateError::Busy { path: format!("{}/{name}", dir.path) });
            }
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let record = read_record(&mut file);
        let mut m = Member { file, name: name.clone(), record };
        if m.record.is_some() {
            return Ok((m, None));
        }
        let t = first(&mut m);
        if m.record.is_none() {
            // Nothing switched on: no entry to keep.
            dir.unlink(&name);
        }
        return Ok((m, Some(t)));
    }
}

impl Member {
    /// Writes what is about to be switched on (before switching it on: a crash in between
    /// leaves a record, never a switched-on map without one).
    pub fn write(&mut self, record: Record) -> io::Result<()> {
        let json = serde_json::to_vec(&record).map_err(io::Error::other)?;
        self.file.set_len(0)?;
        self.file.seek(io::SeekFrom::Start(0))?;
        self.file.write_all(&json)?;
        self.record = Some(record);
        Ok(())
    }

    /// Forgets the record (nothing was switched on after all: the runtime has no such
    /// command): later joiners then decide afresh. Under the global lock.
    pub fn clear(&mut self, dir: &StateDir) -> Result<(), StateError> {
        let _lock = dir.lock()?;
        self.file.set_len(0).map_err(io_err(format!("{}/{}", dir.path, self.name)))?;
        self.record = None;
        Ok(())
    }

    /// Leaves the target. The last user (the only one able to lock the entry exclusively)
    /// runs [`teardown`] and removes the entry when it succeeded. Returns the teardown's
    /// result, or Ok(false) when others still use the target.
    pub fn leave(self, dir: &StateDir) -> Result<bool, LeaveError> {
        let Member { mut file, name, .. } = self;
        {
            let Ok(_lock) = dir.lock() else { return Err(LeaveError::Busy) };
            if !try_flock(&file, libc::LOCK_EX) {
                return Ok(false);
            }
        }
        let Some(record) = read_record(&mut file) else {
            dir.unlink(&name);
            return Ok(true);
        };
        let r = teardown(&record);
        if r.is_ok() {
            dir.unlink(&name);
        }
        r.map(|()| true)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaveError {
    #[error("the state lock stayed busy: a later clrprobe or the guardian will switch the map off")]
    Busy,
    #[error("DisablePerfMap: {0} (the map stays on; the next clrprobe start retries)")]
    Disable(IpcError),
}

/// Switches the map of `r` off (when the target still runs) and removes its files.
pub fn teardown(r: &Record) -> Result<(), LeaveError> {
    let now = start_time(r.pid);
    // Still running (not a zombie); or the pid now names another process.
    let same = now == Some(r.start_time) && crate::record::alive(r.pid);
    let reused = now.is_some_and(|t| t != r.start_time);
    if same {
        let disabled = Client::for_pid(r.pid).map(|c| c.with_timeout(DISABLE_TIMEOUT)).and_then(|c| c.disable_perf_map());
        match disabled {
            Ok(()) => {}
            // Gone meanwhile, or no socket (nothing can be on), or a runtime without the command.
            Err(IpcError::NoSuchProcess { .. } | IpcError::NoSocket { .. } | IpcError::Server(ServerError::UnknownCommand)) => {}
            Err(_) if !crate::record::alive(r.pid) => {}
            Err(e) => return Err(LeaveError::Disable(e)),
        }
    }
    let proc_root = format!("/proc/{}/root/", r.pid);
    // Only the runtime's own files: never a link, FIFO or another user's file put there.
    let owner = if same { Owner::of_pid(r.pid) } else { None };
    for f in &r.files {
        let through_proc = f.starts_with(&proc_root);
        // /proc/PID/root of a reused pid is another process's root; a /tmp path of a reused
        // pid may be the new process's own map.
        if (through_proc && !same) || (!through_proc && reused) {
            continue;
        }
        let refused = match owner {
            Some(o) => target_file::remove(f, o).err().map(|e| e.to_string()),
            None => remove_if_regular(f).err().map(|e| e.to_string()),
        };
        if let Some(e) = refused {
            log::warn!("perf map of {}: {e}", r.pid);
        }
    }
    Ok(())
}

/// Tears down every entry nobody holds (its clrprobe died). Returns how many could not be
/// (their target did not answer DisablePerfMap: stopped, or hung).
pub fn sweep(dir: &StateDir) -> usize {
    let mut stale = Vec::new();
    {
        let Ok(_lock) = dir.lock() else { return 0 };
        for name in dir.names() {
            if let Ok(Some(f)) = dir.open_file(&name, false)
                && try_flock(&f, libc::LOCK_EX)
            {
                stale.push((name, f));
            }
        }
    }
    let mut left = 0;
    for (name, mut f) in stale {
        match read_record(&mut f) {
            None => dir.unlink(&name),
            Some(r) => {
                if teardown(&r).is_ok() {
                    dir.unlink(&name);
                } else {
                    left += 1;
                }
            }
        }
    }
    left
}

/// Paths of the files a perf map of `pid` consists of, as reachable after it exits (see [`Record::files`]).
pub fn perf_map_files(pid: u32, jitdump: bool) -> Vec<PathBuf> {
    let ns = crate::record::namespaced_pid(pid);
    let mut names = vec![format!("perf-{ns}.map"), format!("perfinfo-{ns}.map")];
    if jitdump {
        names.push(format!("jit-{ns}.dump"));
    }
    let mut files: Vec<PathBuf> = names.iter().map(|n| PathBuf::from(format!("/proc/{pid}/root/tmp/{n}"))).collect();
    if same_root(pid) {
        files.extend(names.iter().map(|n| Path::new("/tmp").join(n)));
    }
    files
}

/// Does `pid` see the same root directory as we do?
fn same_root(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(format!("/proc/{pid}/root")), std::fs::metadata("/")) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Removes `path` if it is a regular file owned by root or a real user (not a link, FIFO or
/// device): the target is gone, so its owner cannot be checked.
fn remove_if_regular(path: &std::path::Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => std::fs::remove_file(path),
        Ok(_) => Err(std::io::Error::other(format!("{}: not a regular file, left alone", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
