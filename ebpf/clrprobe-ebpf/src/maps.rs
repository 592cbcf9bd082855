//! Maps shared by the programs. Names must match `clrprobe_common::names`.
use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, PerCpuArray, StackTrace},
};
use clrprobe_common::{
    MAX_SAMPLE_KEYS, MAX_STACKS, MAX_TARGETS, STATS_SLOT, SampleKey, SampleValue, Stats, ThreadCpu,
    switch_config,
};

/// Threads followed by the sched_switch program at most.
pub const MAX_THREADS: u32 = 16_384;

/// sched_switch settings (see `clrprobe_common::switch_config`).
#[map(name = "SWITCH_CONFIG")]
pub static SWITCH_CONFIG: Array<u64> = Array::with_max_entries(switch_config::LEN, 0);

/// Off-CPU nanoseconds aggregated by (pid, tid, stacks, comm).
#[map(name = "OFFCPU_NS")]
pub static OFFCPU_NS: HashMap<SampleKey, SampleValue> = HashMap::with_max_entries(MAX_SAMPLE_KEYS, 0);

/// tid → on-CPU time accounted while recording.
#[map(name = "ONCPU_NS")]
pub static ONCPU_NS: HashMap<u32, ThreadCpu> = HashMap::with_max_entries(MAX_THREADS, 0);

/// `__cxa_throw` calls per tgid.
#[map(name = "CXA_THROWS")]
pub static CXA_THROWS: HashMap<u32, u64> = HashMap::with_max_entries(MAX_TARGETS, 0);

/// Processes to record (tgid → 1). Key 0 present means "every process".
#[map(name = "TARGET_PIDS")]
pub static TARGET_PIDS: HashMap<u32, u8> = HashMap::with_max_entries(MAX_TARGETS, 0);

/// In-kernel aggregation of CPU samples.
#[map(name = "SAMPLE_COUNTS")]
pub static SAMPLE_COUNTS: HashMap<SampleKey, SampleValue> =
    HashMap::with_max_entries(MAX_SAMPLE_KEYS, 0);

/// Stack traces referenced by `SampleKey`.
#[map(name = "STACKS")]
pub static STACKS: StackTrace = StackTrace::with_max_entries(MAX_STACKS, 0);

/// Uprobe hits per tgid.
#[map(name = "UPROBE_COUNTS")]
pub static UPROBE_COUNTS: HashMap<u32, u64> = HashMap::with_max_entries(MAX_TARGETS, 0);

/// Per-CPU counters of what was recorded and what was lost.
#[map(name = "STATS")]
pub static STATS: PerCpuArray<Stats> = PerCpuArray::with_max_entries(1, 0);

/// Is `tgid` one of the processes being recorded?
#[inline(always)]
pub fn is_target(tgid: u32) -> bool {
    // SAFETY: read-only lookups of plain values.
    unsafe { TARGET_PIDS.get(&tgid).is_some() || TARGET_PIDS.get(&0u32).is_some() }
}

/// Applies `f` to this CPU's stats slot.
#[inline(always)]
pub fn with_stats(f: impl FnOnce(&mut Stats)) {
    if let Some(p) = STATS.get_ptr_mut(STATS_SLOT) {
        // SAFETY: per-CPU slot; programs on one CPU do not preempt each other for this map.
        unsafe { f(&mut *p) }
    }
}
