//! Finding a process's diagnostics endpoint.
//!
//! Linux: the runtime listens on `$TMPDIR/dotnet-diagnostic-{pid}-{key}-socket` (key = process
//! start time in jiffies). We look in the target's TMPDIR (from /proc/PID/environ), in /tmp, and
//! through `/proc/PID/root` (a target in another mount namespace, e.g. a container). Inside a pid
//! namespace the name carries the namespaced pid (last NSpid entry of /proc/PID/status). If several
//! sockets match, the one whose key equals the start time wins, else the newest.
//! Windows: the named pipe `\\.\pipe\dotnet-diagnostic-{pid}`.
use super::{error::IpcError, transport::Endpoint};

/// Finds the diagnostics endpoint of `pid`.
///
/// Lists `\\.\pipe\` rather than opening the pipe (opening would consume a server instance).
/// If the pipe namespace cannot be listed, the endpoint is returned unchecked and a missing pipe
/// surfaces as [`IpcError::Connect`] on first use.
#[cfg(windows)]
pub fn find_socket(pid: u32) -> Result<Endpoint, IpcError> {
    let name = format!("dotnet-diagnostic-{pid}");
    let dir = std::path::PathBuf::from(r"\\.\pipe\");
    let path = dir.join(&name);
    match std::fs::read_dir(&dir) {
        Ok(entries) => {
            if entries.flatten().any(|e| e.file_name().to_string_lossy().eq_ignore_ascii_case(&name)) {
                Ok(Endpoint::NamedPipe(path))
            } else {
                Err(IpcError::NoSocket { pid, searched: vec![dir] })
            }
        }
        Err(_) => Ok(Endpoint::NamedPipe(path)),
    }
}

/// The pid in a socket's name `dotnet-diagnostic-{pid}-{key}-socket`, when the process of
/// that pid started at `key` (the same process, not a namespaced pid's namesake).
#[cfg(unix)]
pub(crate) fn socket_owner_pid(name: &std::ffi::OsStr) -> Option<u32> {
    let (pid, key) = linux::parse_socket_name(name)?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    (linux::start_time(&stat) == Some(key)).then_some(pid)
}

/// The real and effective uid in /proc/PID/status.
#[cfg(unix)]
pub(crate) fn status_uids(status: &str) -> Option<(u32, u32)> {
    linux::uids(status)
}

/// Finds the diagnostics endpoint of `pid`.
#[cfg(unix)]
pub fn find_socket(pid: u32) -> Result<Endpoint, IpcError> {
    linux::find(pid, std::path::Path::new("/proc"))
}

#[cfg(unix)]
pub(crate) mod linux {
    use std::{
        collections::HashSet,
        ffi::OsStr,
        io,
        os::unix::{
            ffi::OsStrExt,
            fs::{FileTypeExt, MetadataExt},
        },
        path::{Path, PathBuf},
        time::SystemTime,
    };

    use super::super::{error::IpcError, transport::Endpoint};

    /// Parses `dotnet-diagnostic-{pid}-{key}-socket` → (pid, key).
    pub fn parse_socket_name(name: &OsStr) -> Option<(u32, u64)> {
        let s = std::str::from_utf8(name.as_bytes()).ok()?;
        let rest = s.strip_prefix("dotnet-diagnostic-")?.strip_suffix("-socket")?;
        let (pid, key) = rest.split_once('-')?;
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(pid) || !digits(key) {
            return None;
        }
        Some((pid.parse().ok()?, key.parse().ok()?))
    }

    /// The pids the process is known by: host pid, then the innermost namespace pid (NSpid).
    pub fn namespace_pids(pid: u32, status: &str) -> Vec<u32> {
        let mut pids = vec![pid];
        let inner = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|rest| rest.split_whitespace().last())
            .and_then(|t| t.parse::<u32>().ok());
        if let Some(inner) = inner.filter(|&p| p != pid) {
            pids.push(inner);
        }
        pids
    }

    /// Field 22 of /proc/PID/stat (start time in jiffies); the comm field may contain spaces/parens.
    pub fn start_time(stat: &str) -> Option<u64> {
        let after = &stat[stat.rfind(')')? + 1..];
        after.split_whitespace().nth(19)?.parse().ok()
    }

    /// `btime` of /proc/stat: the boot time, seconds since the epoch.
    pub fn boot_time(proc_stat: &str) -> Option<u64> {
        proc_stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()
    }

    /// Slack for a socket created at the process's start: the start time has clock-tick
    /// resolution and `btime` whole seconds.
    const START_SLACK: std::time::Duration = std::time::Duration::from_secs(2);

    /// When the process started, wall clock, from its start time in clock ticks since boot.
    /// Unlike the key in the socket name, unchanged by a time namespace.
    fn started_at(proc_root: &Path, start_ticks: u64) -> Option<SystemTime> {
        let btime = boot_time(&std::fs::read_to_string(proc_root.join("stat")).ok()?)?;
        // SAFETY: sysconf has no preconditions.
        let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok().filter(|&h| h > 0)?;
        let since_boot = std::time::Duration::from_millis(start_ticks.saturating_mul(1000) / hz);
        Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(btime) + since_boot)
    }

    fn tmpdir_from_environ(environ: &[u8]) -> Option<PathBuf> {
        environ
            .split(|&b| b == 0)
            .find_map(|kv| kv.strip_prefix(b"TMPDIR="))
            .filter(|v| !v.is_empty())
            .map(|v| PathBuf::from(OsStr::from_bytes(v)))
    }

    /// The target's real and effective uid (`Uid:` line of /proc/PID/status).
    pub fn uids(status: &str) -> Option<(u32, u32)> {
        let mut ids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().map(|t| t.parse::<u32>().ok());
        Some((ids.next()??, ids.next()??))
    }

    /// Why a candidate socket file is not the runtime's own: None if it is a socket (not a link)
    /// owned by the target's user or root. `meta` is of the entry itself (links not followed).
    pub fn untrusted(meta: &std::fs::Metadata, uids: Option<(u32, u32)>) -> Option<String> {
        let ft = meta.file_type();
        if ft.is_symlink() {
            return Some("is a symbolic link".into());
        }
        if !ft.is_socket() {
            return Some("is not a socket".into());
        }
        let uid = meta.uid();
        let ok = uid == 0 || uids.is_some_and(|(r, e)| uid == r || uid == e);
        (!ok).then(|| format!("belongs to uid {uid}, not to the target's user{} or root", uids.map(|(_, e)| format!(" ({e})")).unwrap_or_default()))
    }

    fn is_perm(e: &io::Error) -> bool {
        e.kind() == io::ErrorKind::PermissionDenied
    }

    pub fn find(pid: u32, proc_root: &Path) -> Result<Endpoint, IpcError> {
        let proc_dir = proc_root.join(pid.to_string());
        let status = match std::fs::read_to_string(proc_dir.join("status")) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(IpcError::NoSuchProcess { pid }),
            Err(e) if is_perm(&e) => return Err(IpcError::PermissionDenied { path: proc_dir.join("status"), source: e }),
            Err(e) => return Err(IpcError::Io(e)),
        };
        let pids = namespace_pids(pid, &status);
        let owner = uids(&status);
        let mut refused: Option<(PathBuf, String)> = None;
        let mut refused_exact = false;
        let start = std::fs::read_to_string(proc_dir.join("stat")).ok().and_then(|s| start_time(&s));
        // A socket not named for this start time and last changed before the process started
        // is an earlier process's with the same pid (pids are reused; killed runtimes leave
        // their sockets): never a candidate.
        let not_before = start.and_then(|t| started_at(proc_root, t)).and_then(|t| t.checked_sub(START_SLACK));
        let mut perm_error: Option<(PathBuf, io::Error)> = None;

        let root = proc_dir.join("root");
        let mut dirs: Vec<PathBuf> = Vec::new();
        match std::fs::read(proc_dir.join("environ")) {
            Ok(env) => {
                if let Some(tmp) = tmpdir_from_environ(&env) {
                    if tmp.is_absolute() {
                        dirs.push(root.join(tmp.strip_prefix("/").unwrap_or(&tmp)));
                    }
                    dirs.push(tmp);
                }
            }
            Err(e) if is_perm(&e) => perm_error = Some((proc_dir.join("environ"), e)),
            Err(_) => {}
        }
        dirs.push(PathBuf::from("/tmp"));
        dirs.push(root.join("tmp"));

        // (mtime, key matches start time, path)
        let mut best: Option<(bool, SystemTime, PathBuf)> = None;
        let mut seen_dirs = HashSet::new();
        for dir in &dirs {
            let meta = match std::fs::metadata(dir) {
                Ok(m) => m,
                Err(e) => {
                    if is_perm(&e) && perm_error.is_none() {
                        perm_error = Some((dir.clone(), e));
                    }
                    continue;
                }
            };
            if !seen_dirs.insert((meta.dev(), meta.ino())) {
                continue;
            }
            let entries = match std::fs::read_dir(dir) {
                Ok(r) => r,
                Err(e) => {
                    if is_perm(&e) && perm_error.is_none() {
                        perm_error = Some((dir.clone(), e));
                    }
                    continue;
                }
            };
            for entry in entries.flatten() {
                let Some((p, key)) = parse_socket_name(&entry.file_name()) else { continue };
                if !pids.contains(&p) {
                    continue;
                }
                let path = entry.path();
                // DirEntry::metadata does not follow links.
                let Ok(meta) = entry.metadata() else { continue };
                let exact = start == Some(key);
                let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                if !exact && not_before.is_some_and(|t| mtime < t) {
                    continue;
                }
                if let Some(reason) = untrusted(&meta, owner) {
                    // The socket named for this very process outranks a stale one of an
                    // earlier process with the same pid (pids are reused; their sockets stay).
                    if exact && !refused_exact {
                        refused = Some((path, reason));
                        refused_exact = true;
                    } else {
                        refused.get_or_insert((path, reason));
                    }
                    continue;
                }
                let better = match &best {
                    None => true,
                    Some((bexact, bmtime, _)) => (exact, mtime) > (*bexact, *bmtime),
                };
                if better {
                    best = Some((exact, mtime, path));
                }
            }
        }
        match (best, perm_error, refused) {
            // Only a stale socket of an earlier process with this pid besides the refused
            // one named for this process: the refusal is the answer, not the stale socket.
            (Some((false, _, _)), _, Some((path, reason))) if refused_exact => Err(IpcError::UntrustedSocket { pid, path, reason }),
            (Some((_, _, path)), _, _) => Ok(Endpoint::UnixSocket(path)),
            (None, _, Some((path, reason))) => Err(IpcError::UntrustedSocket { pid, path, reason }),
            (None, Some((path, source)), None) => Err(IpcError::PermissionDenied { path, source }),
            (None, None, None) => Err(IpcError::NoSocket { pid, searched: dirs }),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn socket_names() {
            assert_eq!(parse_socket_name(OsStr::new("dotnet-diagnostic-123-456789-socket")), Some((123, 456789)));
            for bad in ["dotnet-diagnostic-123-socket", "dotnet-diagnostic--1-socket", "dotnet-diagnostic-1-2-socketx", "dotnet-diagnostic-a-2-socket", "x"] {
                assert_eq!(parse_socket_name(OsStr::new(bad)), None, "{bad}");
            }
        }

        #[test]
        fn nspid_and_start_time() {
            let status = "Name:\tdotnet\nNSpid:\t4242\t17\n";
            assert_eq!(namespace_pids(4242, status), vec![4242, 17]);
            assert_eq!(namespace_pids(5, "Name:\tx\nNSpid:\t5\n"), vec![5]);
            let stat = "77 (a b) c) S 1 77 77 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1000 1";
            assert_eq!(start_time(stat), Some(987654));
            assert_eq!(start_time("garbage"), None);
        }

        /// A fake /proc entry whose TMPDIR holds several candidate sockets (plain files).
        #[test]
        fn picks_start_time_match_else_newest() {
            let base = clrprobe_tests::scratch_dir("ipc-discovery");
            let (proc_root, tmp) = (base.join("proc"), base.join("tmp"));
            let pid = 4_000_001u32; // beyond pid_max: never collides with a real socket in /tmp
            let pdir = proc_root.join(pid.to_string());
            std::fs::create_dir_all(&pdir).unwrap();
            std::fs::create_dir_all(&tmp).unwrap();
            std::fs::write(pdir.join("status"), format!("Name:\tdotnet\nNSpid:\t{pid}\n")).unwrap();
            let stat = format!("{pid} (dotnet) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5000 0 0");
            std::fs::write(pdir.join("stat"), stat).unwrap();
            std::fs::write(pdir.join("environ"), format!("A=b\0TMPDIR={}\0", tmp.display())).unwrap();
            let mut listeners = Vec::new();
            let mut touch = |key: u64, age_s: u64| {
                let p = tmp.join(format!("dotnet-diagnostic-{pid}-{key}-socket"));
                listeners.push(std::os::unix::net::UnixListener::bind(&p).unwrap());
                set_mtime(&p, SystemTime::now() - std::time::Duration::from_secs(age_s));
                p
            };
            touch(100, 50);
            let newest = touch(200, 10);
            let _other = std::os::unix::net::UnixListener::bind(tmp.join("dotnet-diagnostic-999-1-socket")).unwrap(); // other pid
            assert_eq!(find(pid, &proc_root).unwrap(), Endpoint::UnixSocket(newest));
            let exact = touch(5000, 100); // key == start time: wins although oldest
            assert_eq!(find(pid, &proc_root).unwrap(), Endpoint::UnixSocket(exact.clone()));
            // The socket named for this process is refused (here: not a socket): a stale
            // socket of an earlier process with the same pid is not used instead.
            drop(listeners);
            std::fs::remove_file(&exact).unwrap();
            std::fs::write(&exact, b"").unwrap();
            match find(pid, &proc_root) {
                Err(IpcError::UntrustedSocket { path, reason, .. }) => assert_eq!((path, reason.as_str()), (exact, "is not a socket")),
                other => panic!("expected the refusal of the exact socket, got {other:?}"),
            }
            std::fs::remove_dir_all(&base).unwrap();
        }

        /// With the boot time known, a socket not named for the process and older than the
        /// process is an earlier process's: skipped, even when it is the only one (a newer one
        /// is taken: a time namespace shifts the name's key, not the file's time).
        #[test]
        fn a_socket_older_than_the_process_is_not_taken() {
            let base = clrprobe_tests::scratch_dir("ipc-stale");
            let (proc_root, tmp) = (base.join("proc"), base.join("tmp"));
            let pid = 4_000_002u32;
            let pdir = proc_root.join(pid.to_string());
            std::fs::create_dir_all(&pdir).unwrap();
            std::fs::create_dir_all(&tmp).unwrap();
            // SAFETY: sysconf has no preconditions.
            let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
            let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
            // Booted 1000 s ago; the process started 100 s ago.
            std::fs::write(proc_root.join("stat"), format!("cpu  1 2 3\nbtime {}\nprocesses 5\n", now - 1000)).unwrap();
            let ticks = 900 * hz;
            std::fs::write(pdir.join("status"), format!("Name:\tdotnet\nNSpid:\t{pid}\n")).unwrap();
            std::fs::write(pdir.join("stat"), format!("{pid} (dotnet) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {ticks} 0 0")).unwrap();
            std::fs::write(pdir.join("environ"), format!("TMPDIR={}\0", tmp.display())).unwrap();
            let stale = tmp.join(format!("dotnet-diagnostic-{pid}-77-socket"));
            let _l1 = std::os::unix::net::UnixListener::bind(&stale).unwrap();
            set_mtime(&stale, SystemTime::now() - std::time::Duration::from_secs(500));
            match find(pid, &proc_root) {
                Err(IpcError::NoSocket { .. }) => {}
                other => panic!("a socket older than the process was taken: {other:?}"),
            }
            let shifted = tmp.join(format!("dotnet-diagnostic-{pid}-78-socket"));
            let _l2 = std::os::unix::net::UnixListener::bind(&shifted).unwrap();
            set_mtime(&shifted, SystemTime::now() - std::time::Duration::from_secs(99));
            assert_eq!(find(pid, &proc_root).unwrap(), Endpoint::UnixSocket(shifted));
            std::fs::remove_dir_all(&base).unwrap();
        }

        fn set_mtime(p: &Path, t: SystemTime) {
            let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap();
            let ts = libc::timespec { tv_sec: d.as_secs() as _, tv_nsec: d.subsec_nanos() as _ };
            let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
            // SAFETY: c is NUL-terminated; times points at two timespecs.
            assert_eq!(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [ts, ts].as_ptr(), 0) }, 0);
        }

        /// Only a socket (not a link, not a file) owned by the target's user or root is used.
        #[test]
        fn refuses_files_links_and_foreign_sockets() {
            let base = clrprobe_tests::scratch_dir("ipc-untrusted");
            let meta = |p: &Path| std::fs::symlink_metadata(p).unwrap();
            let file = base.join("file");
            std::fs::write(&file, b"").unwrap();
            let sock = base.join("sock");
            let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
            let link = base.join("link");
            std::os::unix::fs::symlink(&sock, &link).unwrap();
            let me = meta(&sock).uid();
            assert_eq!(untrusted(&meta(&sock), Some((me, me))), None);
            assert_eq!(untrusted(&meta(&file), Some((me, me))).as_deref(), Some("is not a socket"));
            assert_eq!(untrusted(&meta(&link), Some((me, me))).as_deref(), Some("is a symbolic link"));
            let other = me.wrapping_add(4242);
            let foreign = untrusted(&meta(&sock), Some((other, other)));
            assert_eq!(foreign.is_some(), me != 0, "root's sockets are trusted for any target");
            assert_eq!(uids("Name:\tx\nUid:\t1000\t1001\t1001\t1001\n"), Some((1000, 1001)));
            std::fs::remove_dir_all(&base).unwrap();
        }

        #[test]
        fn no_such_process_is_typed() {
            // pid 0 never has a /proc entry
            assert!(matches!(find(0, Path::new("/proc")), Err(IpcError::NoSuchProcess { pid: 0 })));
        }

        #[test]
        fn a_process_without_runtime_has_no_socket() {
            let me = std::process::id();
            match find(me, Path::new("/proc")) {
                Err(IpcError::NoSocket { pid, searched }) => {
                    assert_eq!(pid, me);
                    assert!(searched.contains(&PathBuf::from("/tmp")));
                }
                other => panic!("expected NoSocket, got {other:?}"),
            }
        }
    }
}
