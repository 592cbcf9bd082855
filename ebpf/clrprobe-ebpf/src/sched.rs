//! sched_switch: off-CPU time with the stack at switch-out, and on-CPU time per thread, for
//! target processes. The current task at the tracepoint is the one switching out (prev); the
//! one switching in (next) is known only by its tid, read from the record at the offset
//! userspace found in the tracepoint's format file.
use aya_ebpf::{
    EbpfContext,
    bindings::BPF_F_USER_STACK,
    helpers::{bpf_get_current_pid_tgid, generated::bpf_ktime_get_ns},
    macros::{map, raw_tracepoint, tracepoint},
    maps::LruHashMap,
    programs::{RawTracePointContext, TracePointContext, tracing::StackIdContext},
};
use clrprobe_common::{OffCpuStart, SampleKey, SampleValue, ThreadCpu, UserStackHeader, switch_config, ustack};

use crate::maps::{
    OFFCPU_NS, OFFCPU_START, ONCPU_NS, ONCPU_START, STACKS, SWITCH_CONFIG, is_target, with_stats,
};

const BPF_NOEXIST: u64 = 1;

/// A thread's last stacks taken when it blocked in a syscall, and where: user ip, sp and
/// bp, syscall number. With user stacks taken at the syscall's return, only the kernel stack
/// (`user_stack_id` -1, `user_bp` 0).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct KernelStackAt {
    user_ip: u64,
    user_sp: u64,
    nr: i64,
    kernel_stack_id: i64,
    user_bp: u64,
    user_stack_id: i64,
}

/// tid → `KernelStackAt`: a thread blocking again in the same syscall from the same user ip
/// and sp takes the same kernel path; its stack id is reused instead of walked again (the
/// walk is most of sched_switch's cost). Least recently used threads make room.
#[map(name = "KSTACK_AT")]
pub static KSTACK_AT: LruHashMap<u32, KernelStackAt> = LruHashMap::with_max_entries(crate::maps::MAX_THREADS, 0);

/// The kernel stack of the current thread, blocking in syscall `nr` at user `ip`/`sp`.
#[inline(always)]
fn kernel_stack_at(ctx: &TracePointContext, tid: u32, ip: u64, sp: u64, nr: i64, blocked: bool) -> i32 {
    if blocked
        && let Some(k) = KSTACK_AT.get_ptr(&tid)
    {
        // SAFETY: value in the map, read only.
        let k = unsafe { *k };
        if k.user_ip == ip && k.user_sp == sp && k.nr == nr {
            crate::ustack::count(ustack::STAT_REUSED);
            return k.kernel_stack_id as i32;
        }

    }
    let id = ctx.get_stackid(&STACKS, 0).map(|i| i as i32).unwrap_or_else(|e| e);
    // Preempted threads stop anywhere in the kernel: only blocked ones are kept.
    if blocked && id >= 0 {
        let _ = KSTACK_AT.insert(&tid, &KernelStackAt { user_ip: ip, user_sp: sp, nr, kernel_stack_id: id as i64, user_bp: 0, user_stack_id: -1 }, 0);
    }
    id
}

/// Both stacks of the current thread switching out (`blocked`: not preempted). A thread
/// blocking again in the same syscall from the same user ip, sp and bp takes the same paths:
/// its last stack ids are reused instead of walked again (as its user stack copy is, see
/// `ustack::save_offcpu`). Stack ids stay valid: userspace never removes them from `STACKS`.
#[inline(always)]
fn stacks_at_switch_out(ctx: &TracePointContext, tid: u32, blocked: bool) -> (i32, i32) {
    let at = if blocked {
        match crate::ustack::user_ip_sp_bp_orig_ax() {
            Some((ip, sp, bp, nr)) if nr >= 0 => Some((ip, sp, bp, nr)),
            _ => None,
        }
    } else {
        None
    };
    if let Some((ip, sp, bp, nr)) = at
        && let Some(k) = KSTACK_AT.get_ptr(&tid)
    {
        // SAFETY: value in the map, read only.
        let k = unsafe { *k };
        if k.user_stack_id >= 0 && k.user_ip == ip && k.user_sp == sp && k.user_bp == bp && k.nr == nr {
            crate::ustack::count(ustack::STAT_REUSED);
            return (k.user_stack_id as i32, k.kernel_stack_id as i32);
        }
    }
    let user_stack_id = ctx.get_stackid(&STACKS, BPF_F_USER_STACK as u64).map(|i| i as i32).unwrap_or_else(|e| e);
    let kernel_stack_id = ctx.get_stackid(&STACKS, 0).map(|i| i as i32).unwrap_or_else(|e| e);
    if let Some((ip, sp, bp, nr)) = at
        && user_stack_id >= 0
        && kernel_stack_id >= 0
    {
        let k = KernelStackAt { user_ip: ip, user_sp: sp, nr, kernel_stack_id: kernel_stack_id as i64, user_bp: bp, user_stack_id: user_stack_id as i64 };
        let _ = KSTACK_AT.insert(&tid, &k, 0);
    }
    (user_stack_id, kernel_stack_id)
}

#[inline(always)]
fn config(slot: u32) -> u64 {
    SWITCH_CONFIG.get(slot).copied().unwrap_or(0)
}

#[tracepoint]
pub fn sched_switch(ctx: TracePointContext) -> u32 {
    // SAFETY: ktime has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let flags = config(switch_config::FLAGS);
    let pid_tgid = bpf_get_current_pid_tgid();
    let prev_tgid = (pid_tgid >> 32) as u32;
    let prev_tid = pid_tgid as u32;
    if prev_tid != 0 && is_target(prev_tgid) {
        let comm = ctx.command().unwrap_or([0; 16]);
        if flags & switch_config::FLAG_ONCPU != 0 {
            account_on_cpu(prev_tgid, prev_tid, now, comm);
        }
        let deferred = if flags & (switch_config::FLAG_OFFCPU | switch_config::FLAG_DEFER_USER)
            == switch_config::FLAG_OFFCPU | switch_config::FLAG_DEFER_USER
        {
            // An interval whose syscall has not returned yet (the thread ran again inside it):
            // finished now, the user stack still the one it blocked with.
            finish_pending(&ctx, prev_tid, flags);
            match crate::ustack::user_ip_sp_orig_ax() {
                Some((ip, sp, nr)) if nr >= 0 => Some((ip, sp, nr)),
                _ => None,
            }
        } else {
            None
        };
        if let Some((user_ip, user_sp, nr)) = deferred {
            // In a syscall: the kernel stack now, the user stack when the syscall returns and
            // only if the interval is long enough (`syscall_exit`).
            let kernel_stack_id = kernel_stack_at(&ctx, prev_tid, user_ip, user_sp, nr, voluntary(&ctx));
            let start = OffCpuStart { start_ns: now, pid: prev_tgid, kernel_stack_id, comm, user_ip, user_sp, ..Default::default() };
            if OFFCPU_START.insert(&prev_tid, &start, 0).is_err() {
                with_stats(|s| s.offcpu_dropped += 1);
            }
        } else if flags & switch_config::FLAG_OFFCPU != 0 {
            let blocked = voluntary(&ctx);
            let (user_stack_id, kernel_stack_id) = stacks_at_switch_out(&ctx, prev_tid, blocked);
            let ustack_generation = if crate::ustack::flags() & ustack::COPY_OFFCPU != 0 && blocked {
                let hdr = UserStackHeader { pid: prev_tgid, tid: prev_tid, kernel_stack_id, user_stack_id, comm, ..Default::default() };
                crate::ustack::save_offcpu(prev_tid, hdr)
            } else {
                0
            };
            let start =
                OffCpuStart { start_ns: now, pid: prev_tgid, user_stack_id, kernel_stack_id, ustack_generation, comm, ..Default::default() };
            if OFFCPU_START.insert(&prev_tid, &start, 0).is_err() {
                with_stats(|s| s.offcpu_dropped += 1);
            }
        } else if OFFCPU_START.insert(&prev_tid, &OffCpuStart { start_ns: now, pid: prev_tgid, comm, ..Default::default() }, 0).is_err() {
            with_stats(|s| s.offcpu_dropped += 1);
        }
    }
    // The verifier allows only constant offsets into the context: userspace checked the
    // format file against the layouts known here.
    // SAFETY: reads 4 bytes of the tracepoint record at the offset its format file gives.
    let next_tid = match config(switch_config::NEXT_PID_OFFSET) {
        56 => unsafe { ctx.read_at::<i32>(56) },
        52 => unsafe { ctx.read_at::<i32>(52) },
        _ => return 0,
    };
    let Ok(next_tid) = next_tid else { return 0 };
    let next_tid = next_tid as u32;
    if next_tid == 0 {
        return 0;
    }
    // Only threads of targets were switched out with a start record.
    let Some(start) = OFFCPU_START.get_ptr_mut(&next_tid) else { return 0 };
    // SAFETY: value in the map; its thread is being switched in, `syscall_exit` runs after.
    if unsafe { (*start).user_ip } != 0 {
        if flags & switch_config::FLAG_ONCPU != 0 {
            let _ = ONCPU_START.insert(&next_tid, &now, 0);
        }
        // SAFETY: as above.
        let begin = unsafe { (*start).start_ns };
        if now.saturating_sub(begin) < config(switch_config::MIN_OFFCPU_NS) {
            let _ = OFFCPU_START.remove(&next_tid);
        } else {
            // SAFETY: as above.
            unsafe { (*start).end_ns = now };
        }
        return 0;
    }
    // SAFETY: value in the map, copied before removal.
    let start = unsafe { *start };
    let _ = OFFCPU_START.remove(&next_tid);
    if flags & switch_config::FLAG_ONCPU != 0 {
        let _ = ONCPU_START.insert(&next_tid, &now, 0);
    }
    if flags & switch_config::FLAG_OFFCPU == 0 {
        return 0;
    }
    let delta = now.saturating_sub(start.start_ns);
    if delta < config(switch_config::MIN_OFFCPU_NS) {
        return 0;
    }
    // With a user stack copy sent, the key's `generation` names it: (tid, generation).
    let generation = if start.ustack_generation != 0 && crate::ustack::send_offcpu(next_tid, start.ustack_generation) {
        start.ustack_generation
    } else {
        0
    };
    add_interval(next_tid, &start, start.user_stack_id, start.kernel_stack_id, generation, delta, flags);
    0
}

/// Syscall exit, as the thread leaving it: a deferred off-CPU interval (ended and long
/// enough, see `sched_switch`) gets its user stack now — the registers and stack the thread
/// blocked with, as it has not been back in user mode since.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn syscall_exit(ctx: RawTracePointContext) -> u32 {
    let tid = bpf_get_current_pid_tgid() as u32;
    if tid != 0 {
        finish_pending(&ctx, tid, config(switch_config::FLAGS));
    }
    0
}

/// Records `tid`'s deferred interval if it ended (the thread ran again), walking and copying
/// the current user stack when it is still the one the thread blocked with.
#[inline(always)]
fn finish_pending<C: StackIdContext>(ctx: &C, tid: u32, flags: u64) {
    let Some(start) = OFFCPU_START.get_ptr(&tid) else { return };
    // SAFETY: value in the map, copied before removal.
    let start = unsafe { *start };
    if start.end_ns == 0 || start.user_ip == 0 {
        return;
    }
    let _ = OFFCPU_START.remove(&tid);
    let same = matches!(crate::ustack::user_ip_sp_orig_ax(), Some((ip, sp, _)) if ip == start.user_ip && sp == start.user_sp);
    // Not the same (a fault, not a syscall, blocked it and the thread went on): no user stack.
    let user_stack_id = if same {
        ctx.get_stackid(&STACKS, BPF_F_USER_STACK as u64).map(|i| i as i32).unwrap_or_else(|e| e)
    } else {
        -14
    };
    // Names a new copy: microseconds, increasing per thread (its intervals do not overlap).
    let generation = ((start.end_ns >> 10) as u32).max(1);
    let generation = if same && crate::ustack::flags() & ustack::COPY_OFFCPU != 0 {
        crate::ustack::send_offcpu_deferred(
            tid,
            UserStackHeader {
                pid: start.pid,
                tid,
                kernel_stack_id: start.kernel_stack_id,
                user_stack_id,
                comm: start.comm,
                generation,
                ..Default::default()
            },
        )
    } else {
        0
    };
    let delta = start.end_ns.saturating_sub(start.start_ns);
    add_interval(tid, &start, user_stack_id, start.kernel_stack_id, generation, delta, flags);
}

/// Adds one off-CPU interval of `tid` to `OFFCPU_NS`.
#[inline(always)]
fn add_interval(tid: u32, start: &OffCpuStart, user_stack_id: i32, kernel_stack_id: i32, generation: u32, delta: u64, flags: u64) {
    let key = SampleKey {
        pid: start.pid,
        tid,
        user_stack_id,
        kernel_stack_id,
        comm: start.comm,
        // Each interval its own entry, at its start, when times are asked for (timelines, HTTP).
        time: if flags & switch_config::FLAG_OFFCPU_TIME != 0 || config(switch_config::SAMPLE_TIME) != 0 {
            start.start_ns >> 10
        } else {
            0
        },
        generation,
        _pad: 0,
    };
    with_stats(|s| s.offcpu_intervals += 1);
    if let Some(v) = OFFCPU_NS.get_ptr_mut(&key) {
        // SAFETY: value in the map.
        unsafe { (*v).count += delta };
    } else if OFFCPU_NS.insert(&key, &SampleValue { count: delta }, BPF_NOEXIST).is_err() {
        match OFFCPU_NS.get_ptr_mut(&key) {
            Some(v) => unsafe { (*v).count += delta },
            None => with_stats(|s| s.offcpu_dropped += 1),
        }
    }
}

/// Did the thread switching out block (sleep, wait, I/O) rather than get preempted? A
/// preempted thread is still runnable (`prev_state` R, or R+ with the preemption bit above
/// the state bits) and is off CPU only until the scheduler picks it again: its stack is taken
/// by frame pointers, without a copy (copies are for the blocked threads users read).
#[inline(always)]
fn voluntary(ctx: &TracePointContext) -> bool {
    // prev_state sits at 32 in the layout with next_pid at 56 (the one userspace checked).
    if config(switch_config::NEXT_PID_OFFSET) != 56 {
        return true;
    }
    // SAFETY: reads 8 bytes of the tracepoint record at the offset its format file gives.
    match unsafe { ctx.read_at::<i64>(32) } {
        Ok(state) => state & 0xff != 0,
        Err(_) => true,
    }
}

#[inline(always)]
fn account_on_cpu(pid: u32, tid: u32, now: u64, comm: [u8; 16]) {
    let Some(start) = ONCPU_START.get_ptr(&tid) else { return };
    // SAFETY: value in the map.
    let delta = now.saturating_sub(unsafe { *start });
    let _ = ONCPU_START.remove(&tid);
    match ONCPU_NS.get_ptr_mut(&tid) {
        Some(v) => unsafe {
            (*v).on_cpu_ns += delta;
            (*v).comm = comm;
        },
        None => {
            let _ = ONCPU_NS.insert(&tid, &ThreadCpu { pid, _pad: 0, on_cpu_ns: delta, comm }, BPF_NOEXIST);
        }
    }
}
