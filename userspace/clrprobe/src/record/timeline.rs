//! Samples with their times, for the timeline formats (Firefox Profiler, speedscope): the
//! BPF sampler stamps each CPU sample and each off-CPU interval (its start) with
//! CLOCK_MONOTONIC when sample times are on (recording named processes). When every sample of
//! a kind has its time, the profile holds them one by one, at their times relative to the
//! recording start; otherwise (host-wide recording, the perf_event fallback, too many) the
//! kind stays aggregated without times.
use std::collections::HashMap;

use clrprobe_profile::{LabelSet, ProfileBuilder, ProfileError};

use super::{AggKey, StackSource, gc};
use crate::sampler::RawSample;

/// Most timed off-CPU intervals kept (24 bytes each and their distinct keys).
const MAX_OFFCPU: usize = 1 << 19;

#[derive(Debug, Default)]
pub struct OffCpuTimes {
    /// (key, start monotonic ns, off-CPU ns).
    intervals: super::timed_keys::TimedKeys,
    full: bool,
}

impl OffCpuTimes {
    pub fn note(&mut self, s: &RawSample) {
        if self.intervals.len() >= MAX_OFFCPU {
            self.full = true;
        }
        if s.time_ns == 0 || self.full {
            return;
        }
        self.intervals.push(s.pid, s.tid, &s.comm, &s.kernel, &s.user, s.time_ns, s.count);
    }

    /// Takes out the intervals of `pids` (exited process being folded into the profile).
    pub fn take_pids(&mut self, pids: &std::collections::HashSet<u32>) -> Vec<(AggKey, u64, u64)> {
        self.intervals.take_pids(pids)
    }

    pub fn intervals(&self) -> super::timed_keys::TimedView<'_> {
        self.intervals.view()
    }

    /// Intervals held.
    pub fn held(&self) -> usize {
        self.intervals.len()
    }

    /// Intervals have times (and none was dropped for room).
    pub fn has_times(&self) -> bool {
        !self.full && self.intervals.len() > 0
    }
}

/// What the aggregate `all` holds beyond the timed entries (key, time, value): samples taken
/// before times were switched on.
pub(super) fn untimed(all: &HashMap<AggKey, u64>, timed: super::timed_keys::TimedView<'_>) -> HashMap<AggKey, u64> {
    let mut left = all.clone();
    for (key, _, v) in timed.iter() {
        if let Some(n) = left.get_mut(key) {
            *n = n.saturating_sub(*v);
        }
    }
    left.retain(|_, n| *n > 0);
    left
}

/// What one timed sample becomes: which column, its labels and whether it is GC work.
pub(super) struct TimedInput<'a> {
    pub key: &'a AggKey,
    pub time_mono_ns: u64,
    pub value: i64,
    pub column: usize,
    pub in_gc: bool,
}

/// (pid, kernel stack, user stack, GC work) of a timed sample.
type StackKey<'a> = (u32, &'a [u64], &'a [u64], bool);

/// Adds timed samples (times relative to `start_mono_ns`).
pub(super) fn add_timed<'a>(
    b: &mut ProfileBuilder,
    width: usize,
    samples: impl Iterator<Item = TimedInput<'a>>,
    resolver: &mut dyn StackSource,
    processes: &mut ProcessLabels,
    start_mono_ns: i64,
) -> Result<(), ProfileError> {
    // A thread's timed samples repeat the same stacks: each distinct one is named and
    // interned once (most of the time the profile took to build after Ctrl-C).
    let mut stacks: clrprobe_profile::hash::FastMap<StackKey<'a>, clrprobe_profile::StackId> = Default::default();
    let mut threads: clrprobe_profile::hash::FastMap<(u32, u32, &'a str), clrprobe_profile::LabelSetId> = Default::default();
    for s in samples {
        let (pid, tid, comm, kernel, user) = s.key;
        let in_gc = s.in_gc || gc::is_gc_thread(comm);
        let stack = match stacks.get(&(*pid, &kernel[..], &user[..], in_gc)) {
            Some(&id) => id,
            None => {
                let frames = gc::under_gc_root(in_gc, resolver.stack(*pid, kernel, user));
                let mut ids = Vec::with_capacity(frames.len());
                for f in frames {
                    ids.push(b.intern_frame(f)?);
                }
                let id = b.intern_stack(&ids)?;
                stacks.insert((*pid, &kernel[..], &user[..], in_gc), id);
                id
            }
        };
        let labels = match threads.get(&(*pid, *tid, comm.as_str())) {
            Some(&id) => id,
            None => {
                let id = b.intern_labels(processes.labels(*pid, *tid, comm))?;
                threads.insert((*pid, *tid, comm.as_str()), id);
                id
            }
        };
        let mut values = vec![0i64; width];
        values[s.column] = s.value;
        let t = (s.time_mono_ns as i64).saturating_sub(start_mono_ns).max(0) as u64;
        b.add_timed_sample(stack, &values, labels, t)?;
    }
    Ok(())
}

/// Labels of a sample's thread: pid, tid, thread name, process name and, for a process in a
/// container, `container` (the container id from its cgroup, else `yes`). Read once per pid.
#[derive(Default)]
pub(super) struct ProcessLabels {
    by_pid: HashMap<u32, (String, Option<String>)>,
    /// Exited processes that were not targets, folded by thread name only (no pid, tid or
    /// process name): a long host-wide recording keeps one label set per name, not per
    /// process, for the host's thousands of short-lived processes.
    name_only: std::collections::HashSet<u32>,
    /// Thread names kept for them so far: at most [`NAMES_KEPT`] (test harnesses name a thread
    /// after each test, so a host running test suites brings thousands of names: the label
    /// sets of a soak grew from 7.6k to 15.7k in 6 minutes); later names become [`OTHER_NAME`].
    names: std::collections::HashSet<String>,
}

/// Distinct thread names kept for exited processes that were not recorded.
const NAMES_KEPT: usize = 1024;
/// The thread name of the rest.
pub(super) const OTHER_NAME: &str = "[other threads]";
/// The process name of a process gone before its name was read.
const EXITED_NAME: &str = "[exited]";

impl ProcessLabels {
    /// Forgets exited processes.
    pub fn forget(&mut self, pids: &std::collections::HashSet<u32>) {
        self.by_pid.retain(|p, _| !pids.contains(p));
        self.name_only.retain(|p| !pids.contains(p));
    }

    /// Labels samples of these processes by thread name only (see `name_only`).
    pub fn by_name_only(&mut self, pids: impl IntoIterator<Item = u32>) {
        self.name_only.extend(pids);
    }

    /// A sample of `pid` was read: its name and container are read now, while it runs (at
    /// fold time a short-lived process has gone and its name would be its pid: one more label
    /// set per process in the host profile, which grew for an hour). A process gone already
    /// is named after the thread of its first sample when that is its main thread.
    pub fn seen(&mut self, pid: u32, tid: u32, comm: &str) {
        if self.by_pid.contains_key(&pid) || self.name_only.contains(&pid) {
            return;
        }
        let entry = Self::read(pid).unwrap_or_else(|| (if tid == pid { comm.to_string() } else { EXITED_NAME.to_string() }, None));
        self.by_pid.insert(pid, entry);
    }

    /// The name and container of a running process (None: gone).
    fn read(pid: u32) -> Option<(String, Option<String>)> {
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim_end().to_string();
        let container = crate::discover::in_container(pid).then(|| container_id(pid).unwrap_or_else(|| "yes".into()));
        Some((name, container))
    }

    pub fn labels(&mut self, pid: u32, tid: u32, comm: &str) -> LabelSet {
        if self.name_only.contains(&pid) {
            let kept = self.names.contains(comm) || (self.names.len() < NAMES_KEPT && self.names.insert(comm.to_string()));
            return LabelSet { thread_name: Some(if kept { comm } else { OTHER_NAME }.into()), ..LabelSet::default() };
        }
        let (name, container) = self.by_pid.entry(pid).or_insert_with(|| Self::read(pid).unwrap_or_else(|| (pid.to_string(), None)));
        let mut l = LabelSet::thread(pid, tid);
        // Threads kept by name only (clrprobe's own, see `record::own_thread`).
        if tid == 0 {
            l.tid = None;
        }
        l.thread_name = Some(comm.into());
        l.process_name = Some(name.as_str().into());
        if let Some(c) = container {
            l = l.with_string("container", c.as_str());
        }
        l
    }
}

/// The container id in `/proc/PID/cgroup` (docker, containerd, podman: 64 hex digits),
/// shortened to 12 as `docker ps` shows it.
pub(crate) fn container_id(pid: u32) -> Option<String> {
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    container_id_in(&cgroup)
}

fn container_id_in(cgroup: &str) -> Option<String> {
    for line in cgroup.lines() {
        for part in line.rsplit(['/', '-', ':']) {
            let part = part.strip_suffix(".scope").unwrap_or(part);
            if part.len() == 64 && part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Some(part[..12].to_owned());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn exited_unrecorded_processes_keep_a_bounded_set_of_thread_names() {
        let mut p = super::ProcessLabels::default();
        p.by_name_only([1]);
        for i in 0..super::NAMES_KEPT {
            assert_eq!(p.labels(1, 1, &format!("test_{i}")).thread_name.as_deref(), Some(format!("test_{i}").as_str()));
        }
        assert_eq!(p.labels(1, 1, "one_more").thread_name.as_deref(), Some(super::OTHER_NAME));
        assert_eq!(p.labels(1, 1, "test_7").thread_name.as_deref(), Some("test_7"), "names kept stay");
    }

    #[test]
    fn process_names_are_read_while_the_process_runs() {
        let mut p = super::ProcessLabels::default();
        // A child that exits at once: its name is read when its first sample is seen, and
        // still labels its samples after it has gone.
        let mut child = std::process::Command::new("sleep").arg("0.2").spawn().expect("sleep");
        let pid = child.id();
        // spawn() may return before the child has exec'd (its comm is still ours).
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|c| c.trim_end() != "sleep").unwrap_or(false) && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        p.seen(pid, pid, "whatever");
        child.wait().expect("wait");
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
        assert_eq!(p.labels(pid, pid, "sleep").process_name.as_deref(), Some("sleep"));
        // Gone before it was seen: its main thread's name, else `[exited]` (never its pid).
        let mut gone = std::process::Command::new("true").spawn().expect("true");
        let gone_pid = gone.id();
        gone.wait().expect("wait");
        p.seen(gone_pid, gone_pid + 1, "worker");
        assert_eq!(p.labels(gone_pid, gone_pid + 1, "worker").process_name.as_deref(), Some(super::EXITED_NAME));
        // Threads kept by name only carry no tid.
        assert_eq!(p.labels(std::process::id(), 0, "attach").tid, None);
    }

    #[test]
    fn container_ids_from_cgroup_paths() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(super::container_id_in(&format!("0::/system.slice/docker-{id}.scope\n")).as_deref(), Some("0123456789ab"));
        assert_eq!(super::container_id_in(&format!("0::/kubepods/besteffort/pod1/{id}")).as_deref(), Some("0123456789ab"));
        assert_eq!(super::container_id_in("0::/user.slice/session-2.scope"), None);
    }
}
