//! GC CPU time and GC markers of a recording.
//!
//! GC threads: the runtime names its dedicated GC threads; /proc/PID/task/TID/comm shows them
//! truncated to 15 bytes, on .NET 8 as `.NET Server GC` (one per heap, server GC) and
//! `.NET BGC` (one per heap, background GC). Their CPU samples get the synthetic root frame
//! [`GC_FRAME`]; their on-CPU time comes from the BPF sched_switch accounting ([`gc_cpu`]).
//!
//! Workstation (and foreground) GC runs on the thread that triggered it: that thread's CPU
//! samples taken between its GCSuspendEEBegin and GCRestartEEEnd are GC work too. EventPipe
//! timestamps on Linux are CLOCK_MONOTONIC nanoseconds, the clock of `bpf_ktime_get_ns`, so
//! the windows meet sample times directly once shifted by the session's origin.
use clrprobe_pipeline::{EventReport, GcCpu};
use clrprobe_profile::{Frame, FrameKind, Marker, Profile, ProfileError};

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
    fn gc_thread_names() {
        assert!(is_gc_thread(".NET Server GC") && is_gc_thread(".NET BGC"));
        assert!(!is_gc_thread(".NET Finalizer") && !is_gc_thread("dotnet"));
    }
}
