//! Uprobes: counts hits per target process and logs the first hit of each.
use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::uprobe,
    programs::ProbeContext,
};
use aya_log_ebpf::info;

use crate::maps::{CXA_THROWS, UPROBE_COUNTS, is_target, with_stats};

const BPF_NOEXIST: u64 = 1;

#[uprobe]
pub fn uprobe_count(ctx: ProbeContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if !is_target(tgid) {
        return 0;
    }
    with_stats(|s| s.uprobe_hits += 1);
    match UPROBE_COUNTS.get_ptr_mut(&tgid) {
        // SAFETY: value in the map; lost increments under races only under-count.
        Some(v) => unsafe { *v += 1 },
        None => {
            if UPROBE_COUNTS.insert(&tgid, &1u64, BPF_NOEXIST).is_ok() {
                info!(&ctx, "uprobe first hit pid={} tid={}", tgid, pid_tgid as u32);
            }
        }
    }
    0
}

/// Counts C++ throws (`__cxa_throw` in libstdc++) per target process: on .NET ≤ 8 on Linux every
/// managed throw passes through it.
#[uprobe]
pub fn cxa_throw(_ctx: ProbeContext) -> u32 {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !is_target(tgid) {
        return 0;
    }
    match CXA_THROWS.get_ptr_mut(&tgid) {
        // SAFETY: value in the map.
        Some(v) => unsafe { *v += 1 },
        None => {
            let _ = CXA_THROWS.insert(&tgid, &1u64, BPF_NOEXIST);
        }
    }
    0
}
