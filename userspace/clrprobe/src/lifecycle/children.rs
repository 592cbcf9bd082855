//! Descendants of followed processes, from the parent pids in /proc/PID/stat (what
//! `perf record -p` with inheritance covers, found by polling instead).
use std::collections::{HashMap, HashSet};

/// The parent pid of `pid`, from /proc/PID/stat.
pub fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()
}

/// Does `pid` descend from `ancestor` (its child, grandchild…)? Walks the parent pids.
pub fn descends_from(pid: u32, ancestor: u32) -> bool {
    let mut p = pid;
    for _ in 0..64 {
        match parent(p) {
            Some(pp) if pp == ancestor => return true,
            Some(pp) if pp > 1 => p = pp,
            _ => return false,
        }
    }
    false
}

/// Every live process descending from one of `roots` (roots excluded), with its parent.
pub fn descendants(roots: &[u32]) -> Vec<(u32, u32)> {
    ChildScan::default().descendants(roots)
}

/// Repeated [`descendants`] scans that read the parent of each process once: a process's
/// parent changes only when the parent exits (it is then reparented away from the roots,
/// which the followed processes do not need to see), so a poll reads /proc/PID/stat only of
/// processes new since the last one instead of every process on the host. (A pid reused
/// between two polls would keep its predecessor's parent: that needs the whole pid space
/// cycled within one poll interval.)
///
/// A poll first reads the last pid the kernel handed out (/proc/loadavg's last field): while it
/// has not moved no process or thread was created, so nothing new can descend from the roots
/// and /proc is not listed (listing it was ~6 % of a three-target recording's CPU). After a
/// change it is listed in that poll and the next (a task whose pid was handed out is listed a
/// moment later), and at least every [`FULL_SCAN`] all the same. When it moved by at most
/// [`RANGE_SCAN`] pids since the poll before the last, only those pids are looked at
/// (/proc/PID/status of each: thread-group leaders only) instead of listing /proc: on a host
/// where threads come and go all the time the listing ran at every poll (a twentieth of a
/// three-target recording's CPU).
#[derive(Default)]
pub struct ChildScan {
    parents: HashMap<u32, u32>,
    /// The last pid handed out, as read at the last two polls.
    last_pids: [Option<u64>; 2],
    last_full: Option<std::time::Instant>,
    /// Polls that looked at the new pids only.
    ranged: u64,
}

/// The longest a poll trusts an unmoved last pid.
const FULL_SCAN: std::time::Duration = std::time::Duration::from_secs(5);
/// The most pids handed out since the poll before the last that are looked at one by one.
const RANGE_SCAN: u64 = 64;

/// The parent of `pid` if it is a process (a thread-group leader; a thread's pid names it
/// in /proc too), from /proc/PID/status.
fn process_parent(pid: u64) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse::<u64>().ok());
    (field("Tgid:")? == pid).then_some(())?;
    u32::try_from(field("PPid:")?).ok()
}

/// The last pid handed out in this pid namespace (/proc/loadavg's fifth field).
fn last_pid() -> Option<u64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().nth(4)?.parse().ok()
}

impl ChildScan {
    /// The descendants of `roots` that are new since the last poll may be all it returns
    /// when no process was created since (the callers keep what earlier polls found).
    pub fn descendants(&mut self, roots: &[u32]) -> Vec<(u32, u32)> {
        let now = last_pid();
        let unmoved = now.is_some() && self.last_pids == [now, now];
        let since = self.last_pids[0];
        self.last_pids = [self.last_pids[1], now];
        let recent = self.last_full.is_some_and(|t| t.elapsed() < FULL_SCAN);
        if unmoved && recent {
            return Vec::new();
        }
        // From the poll before the last: a pid handed out just before the last poll may not
        // have been in /proc yet then.
        if let (Some(from), Some(to)) = (since, now)
            && recent
            && to >= from
            && to - from <= RANGE_SCAN
        {
            for pid in from + 1..=to {
                if let Ok(p) = u32::try_from(pid)
                    && !self.parents.contains_key(&p)
                    && let Some(pp) = process_parent(pid)
                {
                    self.parents.insert(p, pp);
                }
            }
            self.ranged += 1;
            return tree_below(&self.parents, roots);
        }
        self.last_full = Some(std::time::Instant::now());
        let live: HashSet<u32> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
            .collect();
        self.parents.retain(|p, _| live.contains(p));
        for &pid in &live {
            if !self.parents.contains_key(&pid)
                && let Some(pp) = parent(pid)
            {
                self.parents.insert(pid, pp);
            }
        }
        tree_below(&self.parents, roots)
    }
}

fn tree_below(parents: &HashMap<u32, u32>, roots: &[u32]) -> Vec<(u32, u32)> {
    let mut kids: HashMap<u32, Vec<u32>> = HashMap::new();
    for (&pid, &pp) in parents {
        kids.entry(pp).or_default().push(pid);
    }
    let mut seen: HashSet<u32> = roots.iter().copied().collect();
    let mut out = Vec::new();
    let mut queue: Vec<u32> = roots.to_vec();
    while let Some(p) = queue.pop() {
        for &c in kids.get(&p).map(Vec::as_slice).unwrap_or_default() {
            if seen.insert(c) {
                out.push((c, p));
                queue.push(c);
            }
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawned_grandchild_is_a_descendant() {
        let mut child = std::process::Command::new("sh").args(["-c", "sleep 5 & wait"]).spawn().unwrap();
        let me = std::process::id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let found = loop {
            let d = descendants(&[me]);
            if d.iter().any(|&(_, p)| p == child.id()) || std::time::Instant::now() > deadline {
                break d;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        for &(c, p) in &found {
            if p == child.id() {
                // SAFETY: kill(2) of the sleep this test started.
                unsafe { libc::kill(c as i32, libc::SIGKILL) };
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&(child.id(), me)), "{found:?}");
        assert!(found.iter().any(|&(_, p)| p == child.id()), "sleep under sh: {found:?}");
    }

    #[test]
    fn a_child_started_after_quiet_polls_is_found() {
        let me = std::process::id();
        let mut scan = ChildScan::default();
        // Polls until the last pid has stood still (nothing else forks): the scan is skipped.
        for _ in 0..5 {
            scan.descendants(&[me]);
        }
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut found = false;
        while !found && std::time::Instant::now() < deadline {
            found = scan.descendants(&[me]).contains(&(child.id(), me));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(found, "a child started between polls was not found");
        // The skip needs the kernel's last pid, readable here.
        assert!(last_pid().is_some());
    }

    #[test]
    fn a_child_found_by_its_pid_alone_and_a_thread_is_not_one() {
        let me = std::process::id();
        let mut scan = ChildScan::default();
        scan.descendants(&[me]);
        scan.descendants(&[me]);
        let before = last_pid().unwrap();
        // A thread of this process: its pid is handed out and named in /proc, but it is no child.
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            // SAFETY: gettid(2) has no arguments and no memory effects.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            std::thread::sleep(std::time::Duration::from_secs(2));
        });
        let tid = rx.recv().unwrap();
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        // Well inside the full scan's interval and, with few pids handed out, by range.
        let found = scan.descendants(&[me]);
        let handed_out = last_pid().unwrap() - before;
        assert!(scan.ranged == 1 || handed_out > RANGE_SCAN / 2, "full listing with {handed_out} pids handed out");
        let _ = child.kill();
        let _ = child.wait();
        thread.join().unwrap();
        assert!(found.contains(&(child.id(), me)), "{found:?}");
        assert!(!found.iter().any(|&(c, _)| c == tid), "thread {tid} taken for a child: {found:?}");
        assert_eq!(process_parent(u64::from(tid)), None);
        assert_eq!(process_parent(u64::from(child.id())), None, "reaped");
        assert_eq!(process_parent(u64::from(me)), Some(parent(me).unwrap()));
    }
}
