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
    let mut kids: HashMap<u32, Vec<u32>> = HashMap::new();
    for pid in std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
    {
        if let Some(pp) = parent(pid) {
            kids.entry(pp).or_default().push(pid);
        }
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
