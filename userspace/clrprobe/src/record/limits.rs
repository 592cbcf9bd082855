//! Overhead and limits of a recording, printed at the end of every run: the BPF maps' sizes
//! (preallocated in the kernel at load), the EventPipe buffer each .NET process gets, and what
//! was dropped (full maps, stack collisions, EventPipe buffer overruns).
use std::{fmt::Write, mem::size_of};

use clrprobe_common::{MAX_SAMPLE_KEYS, MAX_STACKS, MAX_TARGETS, SampleKey, SampleValue, SwitchThread, ThreadCpu};
use serde::Serialize;

use super::{RecordSummary, recipe::EVENTPIPE_BUFFER_MB};

/// Threads tracked by the sched_switch maps (ebpf/clrprobe-ebpf/src/maps.rs).
const MAX_THREADS: u32 = 16_384;
/// Frames kept per stack by the kernel's stack map (PERF_MAX_STACK_DEPTH).
const STACK_DEPTH: u64 = 127;

/// One BPF map: entries and the bytes its keys and values take at most.
#[derive(Debug, Clone, Serialize)]
pub struct MapLimit {
    pub name: &'static str,
    pub max_entries: u32,
    pub bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Limits {
    pub bpf_maps: Vec<MapLimit>,
    pub bpf_bytes: u64,
    /// EventPipe circular buffer per .NET process (memory in the target, not in clrprobe).
    pub eventpipe_buffer_mb: u32,
    pub eventpipe_sessions: usize,
    pub eventpipe_dropped_events: u64,
    pub lost_samples: u64,
    pub lost_user_stacks: u64,
    pub lost_kernel_stacks: u64,
}

fn map(name: &'static str, max_entries: u32, entry: usize) -> MapLimit {
    MapLimit { name, max_entries, bytes: max_entries as u64 * entry as u64 }
}

/// The maps of the loaded BPF object, sized from their definitions.
pub fn bpf_maps() -> Vec<MapLimit> {
    let sample = size_of::<SampleKey>() + size_of::<SampleValue>();
    vec![
        map("SAMPLE_COUNTS", MAX_SAMPLE_KEYS, sample),
        map("OFFCPU_NS", MAX_SAMPLE_KEYS, sample),
        map("STACKS", MAX_STACKS, (4 + STACK_DEPTH * 8) as usize),
        map("TARGET_PIDS", MAX_TARGETS, 5),
        // task → its open off-CPU interval, last switch-in, last blocking place and stacks.
        map("SWITCH_THREADS", MAX_THREADS, 8 + size_of::<SwitchThread>()),
        map("ONCPU_NS", MAX_THREADS, 4 + size_of::<ThreadCpu>()),
        // tid → the user ip, sp, bp and copy generation of its last deferred off-CPU copy.
        map("USTACK_SENT", MAX_THREADS, 4 + 32),
        map("CXA_THROWS", MAX_TARGETS, 12),
        map("UPROBE_COUNTS", MAX_TARGETS, 12),
    ]
}

impl Limits {
    pub fn measure(s: &RecordSummary) -> Self {
        let bpf_maps = if s.sampler.is_some() || s.offcpu { bpf_maps() } else { Vec::new() };
        Limits {
            bpf_bytes: bpf_maps.iter().map(|m| m.bytes).sum(),
            bpf_maps,
            eventpipe_buffer_mb: EVENTPIPE_BUFFER_MB,
            eventpipe_sessions: s.eventpipe.len(),
            eventpipe_dropped_events: s.eventpipe.iter().map(|e| e.2).sum(),
            lost_samples: s.sampler_stats.lost_samples,
            lost_user_stacks: s.sampler_stats.lost_user_stacks,
            lost_kernel_stacks: s.sampler_stats.lost_kernel_stacks,
        }
    }
}

pub fn limits_text(l: &Limits) -> String {
    let mut o = String::new();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    if !l.bpf_maps.is_empty() {
        let maps: Vec<String> = l.bpf_maps.iter().map(|m| format!("{} {}×={:.1} MiB", m.name, m.max_entries, mib(m.bytes))).collect();
        let _ = writeln!(o, "limits: BPF maps {:.1} MiB at most in the kernel ({})", mib(l.bpf_bytes), maps.join(", "));
    }
    let _ = writeln!(
        o,
        "limits: EventPipe buffer {} MB per .NET process ({} sessions, {} events dropped); {} samples lost, {} user / {} kernel stacks lost",
        l.eventpipe_buffer_mb, l.eventpipe_sessions, l.eventpipe_dropped_events, l.lost_samples, l.lost_user_stacks, l.lost_kernel_stacks
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_map_dominates_and_totals_add_up() {
        let maps = bpf_maps();
        let stacks = maps.iter().find(|m| m.name == "STACKS").unwrap();
        assert_eq!(stacks.bytes, 32_768 * (4 + 127 * 8));
        let l = Limits::measure(&RecordSummary { offcpu: true, ..Default::default() });
        assert_eq!(l.bpf_bytes, maps.iter().map(|m| m.bytes).sum::<u64>());
        assert!(limits_text(&l).contains("STACKS 32768×=31.9 MiB"), "{}", limits_text(&l));
    }
}
