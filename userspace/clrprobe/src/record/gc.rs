//! GC CPU time and GC markers of a recording.
//!
//! GC threads: the runtime names its dedicated GC threads; /proc/PID/task/TID/comm shows them
//! truncated to 15 bytes, on .NET 8 as `.NET Server GC` (one per heap, server GC) and
//! `.NET BGC` (one per heap, background GC). Their CPU samples get the synthetic root frame
//! [`GC_FRAME`]; their on-CPU time comes from the BPF sched_switch accounting, and, pulled,
//! from /proc/PID/task/TID/stat read at the end of each drain period ([`ProcCpu`]).
//!
//! Workstation (and foreground) GC runs on the thread that triggered it: that thread's CPU
//! samples taken between its GCSuspendEEBegin and GCRestartEEEnd are GC work too. EventPipe
//! timestamps on Linux are CLOCK_MONOTONIC nanoseconds, the clock of `bpf_ktime_get_ns`, so
//! the windows meet sample times directly once shifted by the session's origin.
use std::collections::HashMap;

use clrprobe_pipeline::{EventReport, GcCpu};
use clrprobe_profile::{Frame, FrameKind, Marker, Profile, ProfileError};

use super::AggKey;
use crate::bpf::ThreadCpuTime;

/// The synthetic root frame of GC work.
pub const GC_FRAME: &str = "Garbage Collector";

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    #[allow(clippy::unnecessary_cast)] // time_t and c_long are i32 on 32-bit targets
    let ns = ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64;
    ns
}

/// A dedicated GC thread of the runtime, by its (truncated) name.
pub fn is_gc_thread(comm: &str) -> bool {
    comm.starts_with(".NET Server GC") || comm.starts_with(".NET BGC")
}

/// The root frame every GC stack starts with.
pub fn gc_frame() -> Frame {
    Frame::new(GC_FRAME, "", FrameKind::Synthetic)
}

/// `frames` (root → leaf) under [`GC_FRAME`] when `in_gc`.
pub fn under_gc_root(in_gc: bool, mut frames: Vec<Frame>) -> Vec<Frame> {
    if in_gc {
        frames.insert(0, gc_frame());
    }
    frames
}

/// The GC pause windows of each thread on the host's monotonic clock, from the timelines.
#[derive(Debug, Default)]
pub struct GcWindows {
    /// (pid, tid) → sorted (start, end) host monotonic ns.
    by_thread: HashMap<(u32, u32), Vec<(u64, u64)>>,
}

impl GcWindows {
    pub fn from_reports(reports: &[(u32, EventReport)]) -> Self {
        let mut by_thread: HashMap<(u32, u32), Vec<(u64, u64)>> = HashMap::new();
        for (pid, r) in reports {
            let Some(origin) = r.gc.clock_origin_mono_ns else { continue };
            for g in &r.gc.timeline {
                let Some(tid) = g.suspend_tid else { continue };
                for &(s, e) in &g.pauses {
                    let shift = |t: u64| (origin.saturating_add(t as i64)).max(0) as u64;
                    by_thread.entry((*pid, tid as u32)).or_default().push((shift(s), shift(e)));
                }
            }
        }
        for v in by_thread.values_mut() {
            v.sort_unstable();
        }
        Self { by_thread }
    }

    /// Was thread `tid` of `pid` inside a GC pause it drove at host monotonic time `t`?
    pub fn contains(&self, pid: u32, tid: u32, t: u64) -> bool {
        let Some(w) = self.by_thread.get(&(pid, tid)) else { return false };
        let i = w.partition_point(|&(s, _)| s <= t);
        i > 0 && t <= w[i - 1].1
    }
}

/// Makes the BPF CPU sampler stamp each sample with its time (one map entry per sample
/// instead of one per distinct stack: fine for a few processes, not for `--all` on a big host).
pub fn enable_sample_time(l: &mut crate::bpf::Loaded) -> Result<(), String> {
    use aya::maps::{Array, MapData};
    use clrprobe_common::{names, switch_config};
    let name = names::SWITCH_CONFIG;
    let map = l.ebpf.map_mut(name).ok_or_else(|| format!("no map {name}"))?;
    let mut cfg: Array<&mut MapData, u64> = Array::try_from(map).map_err(|e| format!("map {name}: {e}"))?;
    cfg.set(switch_config::SAMPLE_TIME, 1, 0).map_err(|e| format!("map {name}: {e}"))
}

/// Most timed samples kept for the GC-window check (24 bytes each and their distinct keys:
/// 90 minutes of one busy thread at 99 Hz); later ones are not checked (a warning says so).
const MAX_TIMED: usize = 1 << 19;

/// CPU samples with their time, kept until the GC windows are known (the end).
#[derive(Debug, Default)]
pub struct TimedSamples {
    samples: super::timed_keys::TimedKeys,
    /// Off-CPU intervals with their start (timelines and `--http` ask BPF for their times).
    pub offcpu: super::timeline::OffCpuTimes,
    pub overflowed: bool,
}

impl TimedSamples {
    pub fn note(&mut self, s: &crate::sampler::RawSample) {
        if s.time_ns == 0 {
            return;
        }
        if self.samples.len() >= MAX_TIMED {
            self.overflowed = true;
            return;
        }
        self.samples.push(s.pid, s.tid, &s.comm, &s.kernel, &s.user, s.time_ns, s.count);
    }

    /// (key, monotonic ns, count) of every timed sample kept.
    pub fn entries(&self) -> super::timed_keys::TimedView<'_> {
        self.samples.view()
    }

    /// Takes out the timed samples of `pids` (exited process being folded into the profile).
    pub fn take_pids(&mut self, pids: &std::collections::HashSet<u32>) -> Vec<(AggKey, u64, u64)> {
        self.samples.take_pids(pids)
    }

    /// Timed samples held.
    pub fn held(&self) -> usize {
        self.samples.len()
    }

    /// Samples counted in [`TimedSamples::entries`].
    pub fn total(&self) -> u64 {
        self.samples.view().iter().map(|s| *s.2).sum()
    }

    /// Moves the samples taken inside a GC window of their own thread out of `cpu` into the
    /// returned aggregate (GC work on user threads), with the count per pid.
    pub fn split_gc(&self, cpu: &mut HashMap<AggKey, u64>, windows: &GcWindows) -> (HashMap<AggKey, u64>, HashMap<u32, u64>) {
        let mut gc: HashMap<AggKey, u64> = HashMap::new();
        let mut per_pid: HashMap<u32, u64> = HashMap::new();
        for (key, t, n) in self.samples.view() {
            if is_gc_thread(&key.2) || !windows.contains(key.0, key.1, *t) {
                continue;
            }
            let Some(c) = cpu.get_mut(key) else { continue };
            let n = (*n).min(*c);
            *c -= n;
            *gc.entry(key.clone()).or_insert(0) += n;
            *per_pid.entry(key.0).or_insert(0) += n;
        }
        cpu.retain(|_, c| *c > 0);
        (gc, per_pid)
    }
}

/// Per-thread CPU time pulled from /proc/PID/task/TID/stat (utime + stime).
#[derive(Debug, Default)]
pub struct ProcCpu {
    /// (pid, tid) → (comm, CPU ns at first sight, CPU ns at last read).
    threads: HashMap<(u32, u32), (String, u64, u64)>,
    /// Reads done per pid: a thread first seen after the first read started inside the window.
    reads: HashMap<u32, u32>,
}

impl ProcCpu {
    /// Reads every thread of `pid` (the end of a drain period).
    pub fn read(&mut self, pid: u32) {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return };
        let first_read = !self.reads.contains_key(&pid);
        // SAFETY: sysconf has no memory effects.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else { continue };
            let Some((comm, ticks)) = parse_stat(&stat) else { continue };
            let ns = ticks.saturating_mul(1_000_000_000 / hz);
            let e = self.threads.entry((pid, tid)).or_insert_with(|| (comm.to_string(), if first_read { ns } else { 0 }, ns));
            if e.0 != comm {
                e.0 = comm.to_string();
            }
            e.2 = ns;
        }
        *self.reads.entry(pid).or_insert(0) += 1;
    }

    /// Forgets exited processes (folded, their reports complete).
    pub fn forget(&mut self, pids: &std::collections::HashSet<u32>) {
        self.threads.retain(|(p, _), _| !pids.contains(p));
        self.reads.retain(|p, _| !pids.contains(p));
    }

    /// The thread names of `pid` as of the last read (`comm`, from the same stat files).
    pub fn thread_names(&self, pid: u32) -> impl Iterator<Item = (u32, &str)> {
        self.threads.iter().filter(move |((p, _), _)| *p == pid).map(|(&(_, tid), (comm, _, _))| (tid, comm.as_str()))
    }

    /// CPU time of each thread of `pid` between the first and the last read.
    pub fn deltas(&self, pid: u32) -> Vec<ThreadCpuTime> {
        self.threads
            .iter()
            .filter(|((p, _), _)| *p == pid)
            .map(|(&(pid, tid), (comm, first, last))| ThreadCpuTime { pid, tid, comm: comm.clone(), on_cpu_ns: last.saturating_sub(*first) })
            .collect()
    }
}

/// (comm, utime + stime ticks) of a /proc/…/stat line.
fn parse_stat(stat: &str) -> Option<(&str, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?;
    let mut rest = stat.get(close + 1..)?.split_whitespace();
    // After the comm: state(3) … utime is field 14, stime 15 (1-based over the whole line).
    let utime: u64 = rest.nth(11)?.parse().ok()?;
    let stime: u64 = rest.next()?.parse().ok()?;
    Some((comm, utime + stime))
}

/// GC thread CPU of `pid` from per-thread times.
pub fn gc_cpu(pid: u32, threads: &[ThreadCpuTime], source: &str) -> Option<GcCpu> {
    let mine: Vec<&ThreadCpuTime> = threads.iter().filter(|t| t.pid == pid).collect();
    if mine.is_empty() {
        return None;
    }
    let mut gc: Vec<(u64, String, u64)> =
        mine.iter().filter(|t| is_gc_thread(&t.comm)).map(|t| (u64::from(t.tid), t.comm.clone(), t.on_cpu_ns)).collect();
    gc.sort();
    Some(GcCpu {
        source: source.into(),
        gc_threads_ns: gc.iter().map(|t| t.2).sum(),
        user_thread_gc_ns: 0,
        process_ns: mine.iter().map(|t| t.on_cpu_ns).sum(),
        threads: gc,
    })
}

/// Fills each report's GC CPU (kernel accounting, else /proc), its cross-check from /proc and
/// the recording window; `user_gc_ns` is the workstation GC CPU per pid from the samples.
pub fn complete_reports(
    reports: &mut [(u32, EventReport)],
    kernel: &[ThreadCpuTime],
    proc_cpu: &ProcCpu,
    user_gc_ns: &HashMap<u32, u64>,
    window_ns: u64,
) {
    for (pid, r) in reports {
        r.gc.set_window(window_ns);
        r.gc.cpu_proc = gc_cpu(*pid, &proc_cpu.deltas(*pid), "/proc task stat");
        r.gc.cpu = gc_cpu(*pid, kernel, "bpf sched_switch").or_else(|| r.gc.cpu_proc.clone());
        if let Some(c) = r.gc.cpu.as_mut() {
            c.user_thread_gc_ns = user_gc_ns.get(pid).copied().unwrap_or(0);
        }
    }
}

/// One marker per GC (index, generation, reason, type, pause, heap sizes) and one per pause,
/// on the profile's clock (`start_mono_ns`: host monotonic time of the profile start).
pub fn add_markers(profile: Profile, reports: &[(u32, EventReport)], start_mono_ns: i64) -> Result<Profile, ProfileError> {
    if reports.iter().all(|(_, r)| r.gc.timeline.is_empty()) {
        return Ok(profile);
    }
    // Markers and comments need no interning: added to the built profile, not copied.
    let mut b = profile;
    for (pid, r) in reports {
        let Some(origin) = r.gc.clock_origin_mono_ns else { continue };
        let at = |t: u64| (origin.saturating_add(t as i64) - start_mono_ns).max(0) as u64;
        for g in &r.gc.timeline {
            let end = g.end_ns.or(g.pauses.last().map(|p| p.1)).unwrap_or(g.start_ns);
            let mut data = vec![
                ("index".to_string(), g.index.to_string()),
                ("generation".into(), g.generation.to_string()),
                ("reason".into(), g.reason.clone()),
                ("type".into(), g.gc_type.clone()),
                ("pause_ms".into(), format!("{:.3}", g.pause_ns as f64 / 1e6)),
                ("why".into(), g.why()),
            ];
            for (k, v) in [("heap_before", g.heap_before), ("heap_after", g.heap_after.or(g.heap_stats_size)), ("promoted", g.promoted_bytes)] {
                if let Some(v) = v {
                    data.push((k.into(), v.to_string()));
                }
            }
            b.add_marker(Marker {
                name: format!("GC #{} gen{} {}", g.index, g.generation, g.reason),
                start_ns: at(g.start_ns),
                end_ns: at(end.max(g.start_ns)),
                pid: Some(*pid),
                tid: Some(g.tid as u32),
                data,
            });
            for &(s, e) in &g.pauses {
                b.add_marker(Marker {
                    name: "GC pause".into(),
                    start_ns: at(s),
                    end_ns: at(e),
                    pid: Some(*pid),
                    tid: g.suspend_tid.map(|t| t as u32),
                    data: vec![("gc".into(), g.index.to_string()), ("pause_ms".into(), format!("{:.3}", (e - s) as f64 / 1e6))],
                });
            }
        }
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_line_with_spaces_and_parens_in_comm() {
        let line = "4242 (.NET Server GC) S 1 2 3 4 5 6 7 8 9 10 250 31 0 0 20 0 12 0 100 0 0";
        assert_eq!(parse_stat(line), Some((".NET Server GC", 281)));
        assert_eq!(parse_stat("1 (a) b) S 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn gc_thread_names() {
        assert!(is_gc_thread(".NET Server GC") && is_gc_thread(".NET BGC"));
        assert!(!is_gc_thread(".NET Finalizer") && !is_gc_thread("dotnet"));
    }

    #[test]
    fn windows_contain_their_ends_only() {
        let mut w = GcWindows::default();
        w.by_thread.insert((1, 2), vec![(100, 200), (300, 400)]);
        assert!(w.contains(1, 2, 100) && w.contains(1, 2, 200) && w.contains(1, 2, 350));
        assert!(!w.contains(1, 2, 99) && !w.contains(1, 2, 250) && !w.contains(1, 2, 401) && !w.contains(1, 3, 150));
    }
}
