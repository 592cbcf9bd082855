//! CPU sampler: a perf_event program on every CPU that aggregates
//! (pid, tid, user stack, kernel stack) → count in the kernel.
use aya_ebpf::{
    EbpfContext,
    bindings::BPF_F_USER_STACK,
    helpers::bpf_get_current_pid_tgid,
    macros::perf_event,
    programs::{PerfEventContext, tracing::StackIdContext},
};
use aya_ebpf::helpers::bpf_ktime_get_ns;
use clrprobe_common::{SampleKey, SampleValue, UserStackHeader, switch_config, ustack};

use crate::maps::{SAMPLE_COUNTS, STACKS, SWITCH_CONFIG, is_target, with_stats};

const BPF_NOEXIST: u64 = 1;
/// `bpf_get_stackid` returns -EFAULT when there is no stack of that kind (a sample taken in
/// user mode has no kernel stack): that is not a lost stack.
const EFAULT: i32 = 14;

#[perf_event]
pub fn cpu_sample(ctx: PerfEventContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let tid = pid_tgid as u32;
    if tid == 0 || !is_target(tgid) {
        return 0;
    }
    let user_stack_id = match ctx.get_stackid(&STACKS, BPF_F_USER_STACK as u64) {
        Ok(id) => id as i32,
        Err(e) => {
            if e != -EFAULT {
                with_stats(|s| s.user_stack_errors += 1);
            }
            e
        }
    };
    let kernel_stack_id = match ctx.get_stackid(&STACKS, 0) {
        Ok(id) => id as i32,
        Err(e) => {
            if e != -EFAULT {
                with_stats(|s| s.kernel_stack_errors += 1);
            }
            e
        }
    };
    let key = SampleKey {
        pid: tgid,
        tid,
        user_stack_id,
        kernel_stack_id,
        comm: ctx.command().unwrap_or([0; 16]),
        time: if SWITCH_CONFIG.get(switch_config::SAMPLE_TIME).copied().unwrap_or(0) != 0 {
            // SAFETY: ktime has no preconditions.
            (unsafe { bpf_ktime_get_ns() }) >> 10
        } else {
            0
        },
        generation: 0,
        _pad: 0,
    };
    with_stats(|s| s.samples += 1);
    if crate::ustack::flags() & ustack::COPY_CPU != 0 {
        let hdr = UserStackHeader {
            kind: ustack::KIND_CPU,
            pid: tgid,
            tid,
            kernel_stack_id,
            user_stack_id,
            // SAFETY: ktime has no preconditions.
            time_ns: unsafe { bpf_ktime_get_ns() },
            comm: key.comm,
            ..Default::default()
        };
        if crate::ustack::send_now(hdr) {
            return 0;
        }
    }
    if let Some(v) = SAMPLE_COUNTS.get_ptr_mut(&key) {
        // SAFETY: the value lives in the map; a racing increment from another CPU may be lost,
        // which only matters for the same thread sampled on two CPUs at once (impossible).
        unsafe { (*v).count += 1 };
    } else if SAMPLE_COUNTS.insert(&key, &SampleValue { count: 1 }, BPF_NOEXIST).is_err() {
        // Either the map is full, or another CPU inserted the key first; retry once.
        match SAMPLE_COUNTS.get_ptr_mut(&key) {
            Some(v) => unsafe { (*v).count += 1 },
            None => with_stats(|s| s.dropped_map_full += 1),
        }
    }
    0
}
