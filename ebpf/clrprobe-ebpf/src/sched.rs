//! sched_switch: off-CPU time with the stack at switch-out, and on-CPU time per thread, for
//! target processes. A raw tracepoint: the kernel passes (preempt, prev, next, prev_state)
//! straight to the program, without filling the classic tracepoint's record (two task names
//! copied, the record buffer reserved) on every context switch of the host. The current task
//! is the one switching out (prev).
//!
//! Everything kept per thread is one `SwitchThread` entry keyed by the task's address: the
//! one switching in (next) is found by the pointer the tracepoint passes (no read of its tid),
//! and a switch costs one lookup for each side. A task's last switch-out (`TASK_DEAD`) removes
//! its entry, so a later task at the same address never finds one of the dead task's.
use aya_ebpf::{
    EbpfContext,
    bindings::BPF_F_USER_STACK,
    helpers::{bpf_get_current_pid_tgid, generated::{bpf_get_current_task, bpf_ktime_get_ns}},
    macros::{map, raw_tracepoint},
    maps::HashMap,
    programs::{RawTracePointContext, tracing::StackIdContext},
};
use clrprobe_common::{
    BlockPlace, OffCpuStart, SampleKey, SampleValue, SwitchThread, ThreadCpu, UserStackHeader, switch_config, switch_thread, ustack,
};

use crate::{
    maps::{OFFCPU_NS, ONCPU_NS, STACKS, SWITCH_CONFIG, is_target, with_stats},
    ustack::UserRegs,
};

const BPF_NOEXIST: u64 = 1;
/// Kernel frames of the hook itself at the leaf of a kernel stack taken here: the program,
/// `bpf_trace_run4` and `__traceiter_sched_switch` (x86-64, Linux 6.x); the stack then starts
/// at the return address into `__schedule`, as the classic tracepoint's did. Userspace names
/// that leaf as a return address: here it is the first byte after `__schedule` (the call is
/// the function's last instruction). `bpf_get_stackid`'s skip field.
const KERNEL_SKIP: u64 = 3;
/// `prev_state` of a task switching out for the last time (`TASK_DEAD`).
const TASK_DEAD: u64 = 0x80;
/// x86-64 `__NR_sched_yield`: a runnable thread switching out inside it gave its CPU up
/// (a spin-wait: `Thread.Yield`, `Thread.Sleep(0)`), a wait at a place, not a preemption.
const NR_SCHED_YIELD: i64 = 24;

/// Task (its `task_struct` address) → its `SwitchThread`, for threads of targets.
#[map(name = "SWITCH_THREADS")]
pub static SWITCH_THREADS: HashMap<u64, SwitchThread> = HashMap::with_max_entries(crate::maps::MAX_THREADS, 0);

/// The entry of `task`, created (zeroed) when it has none; None when the map is full.
#[inline(always)]
fn thread_entry(task: u64) -> Option<*mut SwitchThread> {
    if let Some(t) = SWITCH_THREADS.get_ptr_mut(&task) {
        return Some(t);
    }
    let _ = SWITCH_THREADS.insert(&task, &SwitchThread::default(), BPF_NOEXIST);
    SWITCH_THREADS.get_ptr_mut(&task)
}

#[inline(always)]
fn config(slot: u32) -> u64 {
    SWITCH_CONFIG.get(slot).copied().unwrap_or(0)
}

/// A thread blocking at a place it blocked at before reuses what was taken there at most this
/// many times in a row, then takes it afresh (bounds how long a wrong match can last, see
/// `same_place`).
const MAX_REUSES: u32 = 255;

/// Does `bp` look like a frame pointer of the stack at `sp` (inside the part a copy takes)?
#[inline(always)]
fn frame_pointer(sp: u64, bp: u64) -> bool {
    bp >= sp && bp - sp < ustack::BYTES as u64
}

/// Is the thread (user registers `r`) at place `p`, so that the stacks and copy taken there
/// can be reused? Same ip and sp, and the same bp when bp is a frame pointer. Code without
/// frame pointers (Debian's libc around its futex waits) keeps data in rbp, which can change
/// from one wait to the next at the same place: comparing it defeated reuse. Without that
/// check, a thread blocking at the same ip and sp from another caller with a same-sized frame
/// would reuse the first caller's stacks; `MAX_REUSES` bounds how long.
#[inline(always)]
fn same_place(p: &BlockPlace, r: &UserRegs) -> bool {
    p.ip == r.ip
        && p.sp == r.sp
        && p.reuses < MAX_REUSES
        && (p.bp == r.bp || !(frame_pointer(r.sp, r.bp) || frame_pointer(p.sp, p.bp)))
}

/// Place `slot` (0 or 1) of `t` (constant indices: no bounds check for the verifier).
#[inline(always)]
fn place(t: &mut SwitchThread, slot: u32) -> &mut BlockPlace {
    if slot == 0 { &mut t.places[0] } else { &mut t.places[1] }
}

/// The kernel stack of the current thread, blocking in a syscall (`r`), deferred mode (its
/// user stack is taken when the syscall returns; place 0 only): the one taken at its last
/// blocking switch-out from the same ip, sp and syscall when there is one (same user place,
/// same kernel path; the walk is most of a switch's cost).
#[inline(always)]
fn kernel_stack_at(ctx: &RawTracePointContext, t: &mut SwitchThread, r: &UserRegs) -> i32 {
    let p = &mut t.places[0];
    if p.kernel_stack_id >= 0 && p.ip == r.ip && p.sp == r.sp && p.nr == r.orig_ax && p.ip != 0 {
        crate::ustack::count(ustack::STAT_REUSED);
        return p.kernel_stack_id;
    }
    let id = ctx.get_stackid(&STACKS, KERNEL_SKIP).map(|i| i as i32).unwrap_or_else(|e| e);
    if id >= 0 {
        *p = BlockPlace { ip: r.ip, sp: r.sp, bp: 0, nr: r.orig_ax, user_stack_id: -1, kernel_stack_id: id, copy_generation: 0, reuses: 0 };
    }
    id
}

/// Both stacks of the current thread switching out blocked (`r`: its user registers, `NONE`
/// when it has none), and the slot of its place. A thread blocking again in the same syscall
/// at one of its last two places takes the same paths: the stack ids taken there are reused
/// instead of walked again (as its user stack copy is, see `user_copy`). A new place takes the
/// slot used less recently. Stack ids stay valid: userspace never removes them from `STACKS`.
#[inline(always)]
fn stacks_at_switch_out(ctx: &RawTracePointContext, t: &mut SwitchThread, r: &UserRegs) -> (u32, i32, i32) {
    let in_syscall = r.in_syscall();
    let found = if same_place(&t.places[0], r) {
        0
    } else if same_place(&t.places[1], r) {
        1
    } else {
        2
    };
    if found < 2 {
        let p = place(t, found);
        if in_syscall && p.user_stack_id >= 0 && p.kernel_stack_id >= 0 && p.nr == r.orig_ax {
            crate::ustack::count(ustack::STAT_REUSED);
            p.reuses += 1;
            let ids = (p.user_stack_id, p.kernel_stack_id);
            t.next_slot = found ^ 1;
            return (found, ids.0, ids.1);
        }
    }
    let slot = if found < 2 { found } else { t.next_slot & 1 };
    let user_stack_id = ctx.get_stackid(&STACKS, BPF_F_USER_STACK as u64).map(|i| i as i32).unwrap_or_else(|e| e);
    let kernel_stack_id = ctx.get_stackid(&STACKS, KERNEL_SKIP).map(|i| i as i32).unwrap_or_else(|e| e);
    if r.present() {
        let keep = in_syscall && user_stack_id >= 0 && kernel_stack_id >= 0;
        // Taken afresh (a new place, or reused long enough): so is the copy.
        *place(t, slot) = BlockPlace {
            ip: r.ip,
            sp: r.sp,
            bp: r.bp,
            nr: r.orig_ax,
            user_stack_id: if keep { user_stack_id } else { -1 },
            kernel_stack_id: if keep { kernel_stack_id } else { -1 },
            copy_generation: 0,
            reuses: 0,
        };
        t.next_slot = slot ^ 1;
    }
    (slot, user_stack_id, kernel_stack_id)
}

/// The generation of the current thread's user stack copy at its place `slot` for this
/// switch-out (`r` present, the thread blocked), after `stacks_at_switch_out`: the place's
/// copy when that reused its stacks (taking them afresh clears `copy_generation`), else a new
/// one (`ustack::save_offcpu`). 0 without a copy.
#[inline(always)]
fn user_copy(t: &mut SwitchThread, slot: u32, r: &UserRegs, hdr: UserStackHeader) -> u32 {
    let p = place(t, slot);
    if p.copy_generation != 0 && p.ip == r.ip && p.sp == r.sp {
        crate::ustack::count(ustack::STAT_REUSED);
        return p.copy_generation;
    }
    let generation = crate::ustack::save_offcpu(hdr.tid, slot, *r, hdr);
    p.ip = r.ip;
    p.sp = r.sp;
    p.bp = r.bp;
    p.copy_generation = generation;
    p.reuses = 0;
    generation
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
        switch_out(&ctx, prev_task, prev_tgid, prev_tid, preempt & 0xff != 0, prev_state, now, flags);
    }
    // Only threads of targets have an entry.
    let Some(t) = SWITCH_THREADS.get_ptr_mut(&next_task) else { return 0 };
    // SAFETY: value in the map; its thread is being switched in (only its own switch-out,
    // switch-in and syscall exit touch it, and they do not overlap).
    let t = unsafe { &mut *t };
    if flags & switch_config::FLAG_ONCPU != 0 {
        t.oncpu_start = now;
    }
    if t.state != switch_thread::OUT {
        return 0;
    }
    t.state = switch_thread::IDLE;
    let delta = now.saturating_sub(t.off.start_ns);
    if flags & switch_config::FLAG_OFFCPU == 0 || delta < config(switch_config::MIN_OFFCPU_NS) {
        return 0;
    }
    if t.off.user_ip != 0 {
        // Deferred: recorded when its syscall returns, with the user stack then.
        t.off.end_ns = now;
        t.state = switch_thread::ENDED;
        return 0;
    }
    // With a user stack copy sent, the key's `generation` names it: (tid, generation).
    let g = t.off.ustack_generation;
    let generation = if g == 0 {
        0
    } else if t.sent_generation == g {
        g
    } else if crate::ustack::send_offcpu(t.off.tid, g) {
        t.sent_generation = g;
        g
    } else {
        0
    };
    add_interval(&t.off, t.off.user_stack_id, t.off.kernel_stack_id, generation, delta, flags);
    0
}

/// The current thread of a target (`task`) switching out: its on-CPU time, and the start of
/// an off-CPU interval with its stacks.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn switch_out(ctx: &RawTracePointContext, task: u64, tgid: u32, tid: u32, preempt: bool, prev_state: u64, now: u64, flags: u64) {
    let Some(t) = thread_entry(task) else {
        with_stats(|s| s.offcpu_dropped += 1);
        return;
    };
    // SAFETY: value in the map; only this thread's own switches and syscall exits touch it.
    let t = unsafe { &mut *t };
    let comm = ctx.command().unwrap_or([0; 16]);
    if flags & switch_config::FLAG_ONCPU != 0 && t.oncpu_start != 0 {
        account_on_cpu(tgid, tid, now.saturating_sub(t.oncpu_start), comm);
        t.oncpu_start = 0;
    }
    let offcpu = flags & switch_config::FLAG_OFFCPU != 0;
    let defer = flags & (switch_config::FLAG_OFFCPU | switch_config::FLAG_DEFER_USER)
        == switch_config::FLAG_OFFCPU | switch_config::FLAG_DEFER_USER;
    // One read of the user registers serves every use below. A thread preempted in the
    // kernel (`preempt`) is runnable: no registers needed unless an interval is deferred.
    let regs = if defer || (offcpu && !preempt) { crate::ustack::user_regs_now() } else { UserRegs::NONE };
    // Blocked (sleep, wait, I/O) or yielding in `sched_yield`: a wait at a place, whose stacks
    // users read. Else preempted (TASK_RUNNING: a tick or a wake-up made it give the CPU up,
    // at the return to user mode or in the kernel): run-queue time, not a wait. Its stacks
    // are not walked (the walks were most of the cost of off-CPU recording, and preemptions
    // land anywhere, so nothing is reused); the interval is counted for the thread under
    // `PREEMPTED_STACK_ID`, as `perf --off-cpu` leaves such intervals out altogether.
    let running = prev_state & 0xffff_ffff == 0;
    let blocked = !preempt && (!running || (regs.in_syscall() && regs.orig_ax == NR_SCHED_YIELD));
    if defer {
        // An interval whose syscall has not returned yet (the thread ran again inside it):
        // finished now, the user stack still the one it blocked with.
        finish_pending(ctx, t, &regs, flags);
    }
    if prev_state & TASK_DEAD != 0 {
        // Its last switch-out: nothing waits for a switch-in.
        let _ = SWITCH_THREADS.remove(&task);
        return;
    }
    t.off = if offcpu && !blocked {
        let id = switch_config::PREEMPTED_STACK_ID;
        OffCpuStart { start_ns: now, pid: tgid, tid, user_stack_id: id, kernel_stack_id: id, comm, ..Default::default() }
    } else if defer && regs.in_syscall() {
        // In a syscall: the kernel stack now, the user stack when the syscall returns and only
        // if the interval is long enough (`syscall_exit`).
        let kernel_stack_id = kernel_stack_at(ctx, t, &regs);
        OffCpuStart {
            start_ns: now,
            pid: tgid,
            tid,
            kernel_stack_id,
            comm,
            user_ip: regs.ip,
            user_sp: regs.sp,
            ..Default::default()
        }
    } else if offcpu {
        let (slot, user_stack_id, kernel_stack_id) = stacks_at_switch_out(ctx, t, &regs);
        let ustack_generation = if regs.present() && crate::ustack::flags() & ustack::COPY_OFFCPU != 0 {
            user_copy(t, slot, &regs, UserStackHeader { pid: tgid, tid, kernel_stack_id, user_stack_id, comm, ..Default::default() })
        } else {
            0
        };
        OffCpuStart { start_ns: now, pid: tgid, tid, user_stack_id, kernel_stack_id, ustack_generation, comm, ..Default::default() }
    } else {
        OffCpuStart { start_ns: now, pid: tgid, tid, comm, ..Default::default() }
    };
    t.state = switch_thread::OUT;
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
    if bpf_get_current_pid_tgid() as u32 == 0 {
        return 0;
    }
    // SAFETY: no preconditions.
    let task = unsafe { bpf_get_current_task() };
    let Some(t) = SWITCH_THREADS.get_ptr_mut(&task) else { return 0 };
    // SAFETY: value in the map; this is its thread, running.
    let t = unsafe { &mut *t };
    if t.state == switch_thread::ENDED {
        // The registers are read only for a thread with an interval (not on every syscall).
        finish_pending(&ctx, t, &crate::ustack::user_regs_now(), config(switch_config::FLAGS));
    }
    0
}

/// Records the current thread's deferred interval (`t`, user registers `regs`) if it ended
/// (the thread ran again), walking and copying the current user stack when it is still the
/// one the thread blocked with.
#[inline(always)]
fn finish_pending<C: StackIdContext>(ctx: &C, t: &mut SwitchThread, regs: &UserRegs, flags: u64) {
    if t.state != switch_thread::ENDED {
        return;
    }
    t.state = switch_thread::IDLE;
    let start = t.off;
    let tid = start.tid;
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
            *regs,
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

/// Adds `delta` ns on CPU to `tid`'s total.
#[inline(always)]
fn account_on_cpu(pid: u32, tid: u32, delta: u64, comm: [u8; 16]) {
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
