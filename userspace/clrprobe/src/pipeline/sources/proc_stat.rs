//! CPU times and container ids read from /proc.
use std::sync::Arc;

use clrprobe_pipeline::stream::Record;

pub use crate::record::gc::monotonic_ns;

fn ticks_ns() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    1_000_000_000 / hz
}

/// (comm, utime ticks, stime ticks) of a /proc/…/stat line (the comm may hold spaces and
/// parentheses: it ends at the last `)`).
fn parse_stat(stat: &str) -> Option<(&str, u64, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?;
    let mut rest = stat.get(close + 1..)?.split_whitespace();
    let utime: u64 = rest.nth(11)?.parse().ok()?;
    let stime: u64 = rest.next()?.parse().ok()?;
    Some((comm, utime, stime))
}

/// Reads a small /proc file into `buf` (cleared first), without the size query and seek
/// `fs::read_to_string` makes first (two of the five system calls of each per-thread read of
/// a drain). None if it could not be read or is not UTF-8.
fn read_small<'a>(path: &std::path::Path, buf: &'a mut Vec<u8>) -> Option<&'a str> {
    use std::io::Read;
    buf.clear();
    let mut f = std::fs::File::open(path).ok()?;
    let mut chunk = [0u8; 1024];
    loop {
        match f.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    std::str::from_utf8(buf).ok()
}

/// The process's CPU time and its GC threads' (`all_threads`: every thread's, which names the
/// threads of a recording), as records. False, and no records, when the process has exited
/// (gone, or a zombie: as [`crate::record::alive`] says).
pub fn cpu_records(pid: u32, all_threads: bool, out: &mut Vec<Record>) -> bool {
    let tick = ticks_ns();
    let mut buf = Vec::with_capacity(1024);
    let Some(stat) = read_small(std::path::Path::new(&format!("/proc/{pid}/stat")), &mut buf) else { return false };
    if !crate::record::alive_in_stat(stat) {
        return false;
    }
    if let Some((_, u, s)) = parse_stat(stat) {
        out.push(Record::ProcessCpu { pid, user_ns: u * tick, system_ns: s * tick });
    }
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return true };
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Some(stat) = read_small(&t.path().join("stat"), &mut buf) else { continue };
        // Only the GC threads' CPU is used (GC CPU on dedicated threads).
        if let Some((comm, u, s)) = parse_stat(stat)
            && (all_threads || clrprobe_pipeline::stream::is_gc_thread(comm))
        {
            out.push(Record::ThreadCpu { pid, tid, comm: Arc::from(comm), cpu_ns: (u + s) * tick });
        }
    }
    true
}

/// The parent of `pid`.
pub fn ppid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.get(stat.rfind(')')? + 1..)?.split_whitespace().nth(1)?.parse().ok()
}

/// The container id of `pid` from its cgroup path (the last 64-hex-digit name in it, as
/// Docker, containerd and CRI-O name their cgroups), or "".
pub fn container_id(pid: u32) -> String {
    let Ok(cg) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else { return String::new() };
    id_from_cgroup(&cg).unwrap_or_default()
}

fn id_from_cgroup(cg: &str) -> Option<String> {
    cg.lines()
        .flat_map(|l| l.rsplit(['/', '-', ':']))
        .map(|part| part.trim_end_matches(".scope"))
        .find(|part| part.len() == 64 && part.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_of_common_runtimes() {
        let id = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899";
        assert_eq!(id_from_cgroup(&format!("0::/system.slice/docker-{id}.scope\n")).as_deref(), Some(id));
        assert_eq!(id_from_cgroup(&format!("0::/kubepods/burstable/pod1234/{id}\n")).as_deref(), Some(id));
        assert_eq!(id_from_cgroup("0::/user.slice/user-0.slice/session-3.scope\n"), None);
    }

    /// The state letter of a /proc/…/stat line (`R`, `S`, `Z`…).
    fn stat_state(stat: &str) -> Option<&str> {
        stat.get(stat.rfind(')')? + 1..)?.split_whitespace().next()
    }

    #[test]
    fn state_after_a_comm_with_parens() {
        assert!(!crate::record::alive_in_stat("7 (a) b) Z 1 2") && crate::record::alive_in_stat("7 (a) b) S 1 2"));
        assert_eq!(stat_state("7 (a) b) Z 1 2"), Some("Z"));
        assert_eq!(stat_state("7 (a"), None);
    }

    #[test]
    fn a_zombie_has_no_cpu_records() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Exited, not reaped yet: a zombie.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| stat_state(&s) == Some("Z")) {
            assert!(std::time::Instant::now() < deadline, "true did not exit");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut out = Vec::new();
        assert!(!cpu_records(pid, true, &mut out));
        assert!(out.is_empty());
        child.wait().unwrap();
        assert!(!cpu_records(pid, true, &mut out));
        let me = std::process::id();
        assert!(cpu_records(me, true, &mut out));
        assert!(out.iter().any(|r| matches!(r, Record::ProcessCpu { pid, .. } if *pid == me)));
        assert!(out.iter().filter(|r| matches!(r, Record::ThreadCpu { pid, .. } if *pid == me)).count() >= 1);
    }

    #[test]
    fn stat_with_parens_in_comm() {
        assert_eq!(parse_stat("7 (a (b)) S 1 2 3 4 5 6 7 8 9 10 250 31 0 0"), Some(("a (b)", 250, 31)));
    }
}
