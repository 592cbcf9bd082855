//! Files a target process leaves in its `/tmp` (perf map, perfinfo, jitdump), opened or removed
//! only after checks: other users can create files there too.
//!
//! A file is used only if it is a regular file (not a FIFO, device, socket or directory), not a
//! symbolic link, and owned by the target's user or root (what perf requires of perf maps). It
//! is opened `O_NONBLOCK|O_NOFOLLOW` (a FIFO never blocks the open) and checked with `fstat` on
//! the descriptor, so what was checked is what is read. Reads are incremental and capped.
//! When the process's start is known, a file last written before it started is not its own:
//! pids are reused, and an earlier process's files stay in /tmp.
use std::fs::File;
use std::time::{Duration, SystemTime};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why a target's file was not used.
#[derive(Debug, thiserror::Error)]
pub enum TargetFileError {
    #[error("{} is a symbolic link: not followed", path.display())]
    Link { path: PathBuf },
    #[error("{} is {kind}, not a regular file: not read", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{} belongs to uid {uid}, not to the target's user ({owner}) or root: not trusted", path.display())]
    Foreign { path: PathBuf, uid: u32, owner: u32 },
    #[error("{} was last written before the process started: an earlier process's with the same pid, not read", path.display())]
    Stale { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, #[source] source: io::Error },
}

impl TargetFileError {
    /// The file is simply not there (nothing to say about it).
    pub fn is_not_found(&self) -> bool {
        matches!(self, TargetFileError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// The file is an earlier process's (as good as absent for this one).
    pub fn is_stale(&self) -> bool {
        matches!(self, TargetFileError::Stale { .. })
    }
}

/// Files written this long before the process's start (as the kernel counts it, to the
/// second of boot time) still count as its own: clock granularity, not a stale file.
const START_SLACK: Duration = Duration::from_secs(2);

/// The users whose files a target may own: its real and effective uid (and root); and, when
/// known, when it started (files written before are not its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub real: u32,
    pub effective: u32,
    pub started: Option<SystemTime>,
}

impl Owner {
    /// The users `real` and `effective`, start unknown.
    pub fn users(real: u32, effective: u32) -> Owner {
        Owner { real, effective, started: None }
    }

    /// Root only, start unknown.
    pub fn root() -> Owner {
        Self::users(0, 0)
    }

    /// Read from `/proc/PID/status` (`Uid:` line) and `/proc/PID/stat` (start); None if the
    /// process is gone.
    pub fn of_pid(pid: u32) -> Option<Owner> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let started = process_start(pid);
        Self::from_status(&status).map(|o| Owner { started, ..o })
    }

    pub fn from_status(status: &str) -> Option<Owner> {
        let mut ids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().map(|t| t.parse::<u32>().ok());
        Some(Self::users(ids.next()??, ids.next()??))
    }

    pub fn accepts(&self, uid: u32) -> bool {
        uid == 0 || uid == self.real || uid == self.effective
    }
}

fn kind_of(ft: std::fs::FileType) -> &'static str {
    if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

fn check(path: &Path, meta: &std::fs::Metadata, owner: Owner) -> Result<(), TargetFileError> {
    let ft = meta.file_type();
    if ft.is_symlink() {
        return Err(TargetFileError::Link { path: path.to_path_buf() });
    }
    if !ft.is_file() {
        return Err(TargetFileError::NotRegular { path: path.to_path_buf(), kind: kind_of(ft) });
    }
    if !owner.accepts(meta.uid()) {
        return Err(TargetFileError::Foreign { path: path.to_path_buf(), uid: meta.uid(), owner: owner.effective });
    }
    if let (Some(started), Ok(written)) = (owner.started, meta.modified())
        && written + START_SLACK < started
    {
        return Err(TargetFileError::Stale { path: path.to_path_buf() });
    }
    Ok(())
}

/// When `pid` started, wall clock: boot time (`btime`, /proc/stat) + its start in clock ticks
/// (/proc/PID/stat field 22).
pub fn process_start(pid: u32) -> Option<SystemTime> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks: u64 = stat[stat.rfind(')')? + 2..].split_whitespace().nth(19)?.parse().ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat").ok()?.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok().filter(|&h| h > 0)?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(boot) + Duration::from_millis(ticks.saturating_mul(1000) / hz))
}

/// Opens a target's file for reading after the checks in the module docs.
pub fn open(path: &Path, owner: Owner) -> Result<File, TargetFileError> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(path)
        .map_err(|source| {
            if source.raw_os_error() == Some(libc::ELOOP) {
                TargetFileError::Link { path: path.to_path_buf() }
            } else {
                TargetFileError::Io { path: path.to_path_buf(), source }
            }
        })?;
    let meta = f.metadata().map_err(|source| TargetFileError::Io { path: path.to_path_buf(), source })?;
    check(path, &meta, owner)?;
    Ok(f)
}

/// Is there a file at `path` that [`open`] would accept? (Err: something refused is there.)
pub fn probe(path: &Path, owner: Owner) -> Result<bool, TargetFileError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => check(path, &meta, owner).map(|()| true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(TargetFileError::Io { path: path.to_path_buf(), source }),
    }
}

/// Removes a target's file if it is one [`open`] would accept (a link's name is never
/// removed for someone else, nor another user's file). Ok(false): nothing was there.
pub fn remove(path: &Path, owner: Owner) -> Result<bool, TargetFileError> {
    if !probe(path, owner)? {
        return Ok(false);
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(TargetFileError::Io { path: path.to_path_buf(), source }),
    }
}

/// Reads `f` from byte `from` in chunks of at most `chunk` bytes, handing each to `feed`, until
/// the end of the file or until `feed` returns false. Never holds more than one chunk.
pub fn read_from(f: &mut File, path: &Path, from: u64, chunk: usize, mut feed: impl FnMut(&[u8]) -> bool) -> Result<u64, TargetFileError> {
    let io = |source| TargetFileError::Io { path: path.to_path_buf(), source };
    f.seek(SeekFrom::Start(from)).map_err(io)?;
    // Sized to what the file holds past `from` (a file that grows meanwhile is read in more
    // calls): polling an unchanged perf map allocated, mapped and unmapped 1 MiB each time.
    let left = f.metadata().map_or(chunk as u64, |m| m.len().saturating_sub(from));
    let mut buf = vec![0u8; usize::try_from(left).unwrap_or(usize::MAX).clamp(chunk.min(4096), chunk)];
    let mut total = 0u64;
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        total += n as u64;
        if !feed(&buf[..n]) {
            return Ok(total);
        }
    }
}
