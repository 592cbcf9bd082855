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
#[derive(Default)]
pub struct ChildScan {
    parents: HashMap<u32, u32>,
}

impl ChildScan {
    pub fn descendants(&mut self, roots: &[u32]) -> Vec<(u32, u32)> {
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
}
