//! sched_switch: off-CPU time with the stack at switch-out, and on-CPU time per thread, for
//! target processes. A raw tracepoint: the kernel passes (preempt, prev, next, prev_state)
//! straight to the program, without filling the classic tracepoint's record (two task names
//! copied, the record buffer reserved) on every context switch of the host. The current task
//! is the one switching out (prev). Per-thread state lives in maps keyed by the task's
//! address, so the one switching in (next) is found by the pointer the tracepoint passes:
//! no read of its tid. A task's last switch-out (`TASK_DEAD`) leaves no entry behind, so a
//! later task at the same address never finds one of the dead task's.
use aya_ebpf::{
    EbpfContext,
    bindings::BPF_F_USER_STACK,
    helpers::{bpf_get_current_pid_tgid, generated::{bpf_get_current_task, bpf_ktime_get_ns}},
    macros::{map, raw_tracepoint},
    maps::LruHashMap,
    programs::{RawTracePointContext, tracing::StackIdContext},
};
use clrprobe_common::{OffCpuStart, SampleKey, SampleValue, ThreadCpu, UserStackHeader, switch_config, ustack};

use crate::{
    maps::{OFFCPU_NS, OFFCPU_START, ONCPU_NS, ONCPU_START, STACKS, SWITCH_CONFIG, is_target, with_stats},
    ustack::UserRegs,
};

/// `prev_state` of a task switching out for the last time (`TASK_DEAD`).
const TASK_DEAD: u64 = 0x80;

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
fn kernel_stack_at(ctx: &RawTracePointContext, tid: u32, ip: u64, sp: u64, nr: i64, blocked: bool) -> i32 {
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

/// Both stacks of the current thread switching out (`regs`: its user registers when it
/// blocked, not preempted). A thread blocking again in the same syscall from the same user ip,
/// sp and bp takes the same paths: its last stack ids are reused instead of walked again (as
/// its user stack copy is, see `ustack::save_offcpu`). Stack ids stay valid: userspace never
/// removes them from `STACKS`.
#[inline(always)]
fn stacks_at_switch_out(ctx: &RawTracePointContext, tid: u32, r: UserRegs) -> (i32, i32) {
    let at = r.in_syscall();
    if at
        && let Some(k) = KSTACK_AT.get_ptr(&tid)
    {
        // SAFETY: value in the map, read only.
        let k = unsafe { *k };
        if k.user_stack_id >= 0 && k.user_ip == r.ip && k.user_sp == r.sp && k.user_bp == r.bp && k.nr == r.orig_ax {
            crate::ustack::count(ustack::STAT_REUSED);
            return (k.user_stack_id as i32, k.kernel_stack_id as i32);
        }
    }
    let user_stack_id = ctx.get_stackid(&STACKS, BPF_F_USER_STACK as u64).map(|i| i as i32).unwrap_or_else(|e| e);
    let kernel_stack_id = ctx.get_stackid(&STACKS, 0).map(|i| i as i32).unwrap_or_else(|e| e);
    if at
        && user_stack_id >= 0
        && kernel_stack_id >= 0
    {
        let k = KernelStackAt {
            user_ip: r.ip,
            user_sp: r.sp,
            nr: r.orig_ax,
            kernel_stack_id: kernel_stack_id as i64,
            user_bp: r.bp,
            user_stack_id: user_stack_id as i64,
        };
        let _ = KSTACK_AT.insert(&tid, &k, 0);
    }
    (user_stack_id, kernel_stack_id)
}

#[inline(always)]
fn config(slot: u32) -> u64 {
    SWITCH_CONFIG.get(slot).copied().unwrap_or(0)
}

#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn sched_switch(ctx: RawTracePointContext) -> u32 {
    // TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
    //          unsigned int prev_state): prev is the current task.
    let preempt: u64 = ctx.arg(0);
    let prev_task: u64 = ctx.arg(1);
    let next_task: u64 = ctx.arg(2);
    let prev_state: u64 = ctx.arg(3);
    // SAFETY: ktime has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let flags = config(switch_config::FLAGS);
    let pid_tgid = bpf_get_current_pid_tgid();
    let prev_tgid = (pid_tgid >> 32) as u32;
    let prev_tid = pid_tgid as u32;
    if prev_tid != 0 && is_target(prev_tgid) {
        let comm = ctx.command().unwrap_or([0; 16]);
        if flags & switch_config::FLAG_ONCPU != 0 {
            account_on_cpu(prev_task, prev_tgid, prev_tid, now, comm);
        }
        // Blocked (sleep, wait, I/O) rather than preempted: a preempted thread is still
        // runnable and off CPU only until the scheduler picks it again; its stack is taken by
        // frame pointers, without a copy (copies are for the blocked threads users read).
        let blocked = preempt & 0xff == 0 && prev_state & 0xffff_ffff != 0;
        let defer = flags & (switch_config::FLAG_OFFCPU | switch_config::FLAG_DEFER_USER)
            == switch_config::FLAG_OFFCPU | switch_config::FLAG_DEFER_USER;
        // One read of the user registers serves every use below.
        let regs = if defer || (blocked && flags & switch_config::FLAG_OFFCPU != 0) {
            crate::ustack::user_regs_now()
        } else {
            UserRegs::NONE
        };
        if defer {
            // An interval whose syscall has not returned yet (the thread ran again inside it):
            // finished now, the user stack still the one it blocked with.
            finish_pending(&ctx, prev_task, Some(&regs), flags);
        }
        if prev_state & TASK_DEAD != 0 {
            // Its last switch-out: nothing waits for a switch-in.
        } else if defer && regs.in_syscall() {
            let r = regs;
            // In a syscall: the kernel stack now, the user stack when the syscall returns and
            // only if the interval is long enough (`syscall_exit`).
            let kernel_stack_id = kernel_stack_at(&ctx, prev_tid, r.ip, r.sp, r.orig_ax, blocked);
            let start = OffCpuStart {
                start_ns: now,
                pid: prev_tgid,
                tid: prev_tid,
                kernel_stack_id,
                comm,
                user_ip: r.ip,
                user_sp: r.sp,
                ..Default::default()
            };
            if OFFCPU_START.insert(&prev_task, &start, 0).is_err() {
                with_stats(|s| s.offcpu_dropped += 1);
            }
        } else if flags & switch_config::FLAG_OFFCPU != 0 {
            let regs = if blocked { regs } else { UserRegs::NONE };
            let (user_stack_id, kernel_stack_id) = stacks_at_switch_out(&ctx, prev_tid, regs);
            let ustack_generation = if regs.present() && crate::ustack::flags() & ustack::COPY_OFFCPU != 0 {
                let hdr = UserStackHeader { pid: prev_tgid, tid: prev_tid, kernel_stack_id, user_stack_id, comm, ..Default::default() };
                crate::ustack::save_offcpu(prev_tid, regs, hdr)
            } else {
                0
            };
            let start = OffCpuStart {
                start_ns: now,
                pid: prev_tgid,
                tid: prev_tid,
                user_stack_id,
                kernel_stack_id,
                ustack_generation,
                comm,
                ..Default::default()
            };
            if OFFCPU_START.insert(&prev_task, &start, 0).is_err() {
                with_stats(|s| s.offcpu_dropped += 1);
            }
        } else if OFFCPU_START
            .insert(&prev_task, &OffCpuStart { start_ns: now, pid: prev_tgid, tid: prev_tid, comm, ..Default::default() }, 0)
            .is_err()
        {
            with_stats(|s| s.offcpu_dropped += 1);
        }
    }
    // Only threads of targets were switched out with a start record.
    let Some(start) = OFFCPU_START.get_ptr_mut(&next_task) else { return 0 };
    // SAFETY: value in the map; its thread is being switched in, `syscall_exit` runs after.
    if unsafe { (*start).user_ip } != 0 {
        if flags & switch_config::FLAG_ONCPU != 0 {
            let _ = ONCPU_START.insert(&next_task, &now, 0);
        }
        // SAFETY: as above.
        let begin = unsafe { (*start).start_ns };
        if now.saturating_sub(begin) < config(switch_config::MIN_OFFCPU_NS) {
            let _ = OFFCPU_START.remove(&next_task);
        } else {
            // SAFETY: as above.
            unsafe { (*start).end_ns = now };
        }
        return 0;
    }
    // SAFETY: value in the map, copied before removal.
    let start = unsafe { *start };
    let _ = OFFCPU_START.remove(&next_task);
    if flags & switch_config::FLAG_ONCPU != 0 {
        let _ = ONCPU_START.insert(&next_task, &now, 0);
    }
    if flags & switch_config::FLAG_OFFCPU == 0 {
        return 0;
    }
    let delta = now.saturating_sub(start.start_ns);
    if delta < config(switch_config::MIN_OFFCPU_NS) {
        return 0;
    }
    let next_tid = start.tid;
    // With a user stack copy sent, the key's `generation` names it: (tid, generation).
    let generation = if start.ustack_generation != 0 && crate::ustack::send_offcpu(next_tid, start.ustack_generation) {
        start.ustack_generation
    } else {
        0
    };
    add_interval(&start, start.user_stack_id, start.kernel_stack_id, generation, delta, flags);
    0
}

/// Floors for `cargo xtask bench-stacks` (`CLRPROBE_SWITCH_FLOOR`): programs that do nothing,
/// attached where `sched_switch` is (raw) and to the classic tracepoint it used before, which
/// fills its record for every switch before the program runs.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn sched_switch_floor_raw(_ctx: RawTracePointContext) -> u32 {
    0
}

#[aya_ebpf::macros::tracepoint]
pub fn sched_switch_floor_tp(_ctx: aya_ebpf::programs::TracePointContext) -> u32 {
    0
}

/// Syscall exit, as the thread leaving it: a deferred off-CPU interval (ended and long
/// enough, see `sched_switch`) gets its user stack now — the registers and stack the thread
/// blocked with, as it has not been back in user mode since.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn syscall_exit(ctx: RawTracePointContext) -> u32 {
    if bpf_get_current_pid_tgid() as u32 != 0 {
        // SAFETY: no preconditions.
        let task = unsafe { bpf_get_current_task() };
        // The registers are read only for a thread with an interval (not on every syscall).
        finish_pending(&ctx, task, None, config(switch_config::FLAGS));
    }
    0
}

/// Records the deferred interval of the current thread (`task`, user registers `regs`, read
/// here when not given) if it ended (the thread ran again), walking and copying the current
/// user stack when it is still the one the thread blocked with.
#[inline(always)]
fn finish_pending<C: StackIdContext>(ctx: &C, task: u64, regs: Option<&UserRegs>, flags: u64) {
    let Some(start) = OFFCPU_START.get_ptr(&task) else { return };
    // SAFETY: value in the map, copied before removal.
    let start = unsafe { *start };
    if start.end_ns == 0 || start.user_ip == 0 {
        return;
    }
    let _ = OFFCPU_START.remove(&task);
    let tid = start.tid;
    let regs = match regs {
        Some(r) => *r,
        None => crate::ustack::user_regs_now(),
    };
    let same = regs.present() && regs.ip == start.user_ip && regs.sp == start.user_sp;
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
            regs,
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
    add_interval(&start, user_stack_id, start.kernel_stack_id, generation, delta, flags);
}

/// Adds one off-CPU interval of `start.tid` to `OFFCPU_NS`.
#[inline(always)]
fn add_interval(start: &OffCpuStart, user_stack_id: i32, kernel_stack_id: i32, generation: u32, delta: u64, flags: u64) {
    let key = SampleKey {
        pid: start.pid,
        tid: start.tid,
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

#[inline(always)]
fn account_on_cpu(task: u64, pid: u32, tid: u32, now: u64, comm: [u8; 16]) {
    let Some(start) = ONCPU_START.get_ptr(&task) else { return };
    // SAFETY: value in the map.
    let delta = now.saturating_sub(unsafe { *start });
    let _ = ONCPU_START.remove(&task);
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
