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

/// The process's CPU time and its GC threads' (`all_threads`: every thread's, which names the
/// threads of a recording), as records.
pub fn cpu_records(pid: u32, all_threads: bool, out: &mut Vec<Record>) {
    let tick = ticks_ns();
    if let Some((_, u, s)) = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().as_deref().and_then(parse_stat) {
        out.push(Record::ProcessCpu { pid, user_ns: u * tick, system_ns: s * tick });
    }
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return };
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else { continue };
        // Only the GC threads' CPU is used (GC CPU on dedicated threads).
        if let Some((comm, u, s)) = parse_stat(&stat)
            && (all_threads || clrprobe_pipeline::stream::is_gc_thread(comm))
        {
            out.push(Record::ThreadCpu { pid, tid, comm: Arc::from(comm), cpu_ns: (u + s) * tick });
        }
    }
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

    #[test]
    fn stat_with_parens_in_comm() {
        assert_eq!(parse_stat("7 (a (b)) S 1 2 3 4 5 6 7 8 9 10 250 31 0 0"), Some(("a (b)", 250, 31)));
    }
}
