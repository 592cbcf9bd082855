//! Maps shared by the programs. Names must match `clrprobe_common::names`.
use aya_ebpf::{
    macros::map,
    maps::{HashMap, PerCpuArray, StackTrace},
};
use clrprobe_common::{
    MAX_SAMPLE_KEYS, MAX_STACKS, MAX_TARGETS, SampleKey, SampleValue, Stats, STATS_SLOT,
};

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
