//! The kind of wait an off-CPU stack shows, from its kernel frames (leaf last).

/// Name of the one frame of off-CPU time a thread spent preempted (runnable, on the run
/// queue), whose stacks the sched_switch program does not walk.
pub const PREEMPTED_FRAME: &str = "[preempted]";

/// The kernel "stack" a preempted interval is drained with: one address no kernel symbol has
/// (the last page), named [`PREEMPTED_FRAME`] by the frame resolver.
pub const PREEMPTED_ADDRESS: u64 = 0xffff_ffff_ffff_f000;

/// Is this (leaf-first kernel stack, user stack) a preempted interval's?
pub fn is_preempted(kernel: &[u64], user: &[u64]) -> bool {
    kernel == [PREEMPTED_ADDRESS] && user.is_empty()
}

/// Kinds, checked from the innermost kernel frame outwards; the first frame that matches a
/// pattern decides.
const KINDS: &[(&str, &[&str])] = &[
    ("page-fault", &["exc_page_fault", "handle_mm_fault", "do_user_addr_fault"]),
    ("lock", &["futex_wait", "futex_q_wait", "__futex_wait", "do_futex", "__x64_sys_futex"]),
    ("sleep", &["do_nanosleep", "hrtimer_nanosleep", "clock_nanosleep", "__x64_sys_nanosleep"]),
    ("socket", &["tcp_recvmsg", "tcp_sendmsg", "sock_recvmsg", "sock_sendmsg", "unix_stream_read", "inet_csk_accept", "__sys_accept", "__sys_connect", "sk_wait_data", "unix_stream_recvmsg"]),
    ("poll", &["ep_poll", "do_epoll_wait", "do_sys_poll", "do_select", "do_poll", "__x64_sys_poll", "__x64_sys_ppoll"]),
    ("io", &["io_schedule", "folio_wait", "blk_", "ext4_", "xfs_", "btrfs_", "filemap_", "__x64_sys_read", "__x64_sys_write", "__x64_sys_fsync", "pipe_read", "pipe_write"]),
    // A spin-wait giving up its CPU (Monitor.Enter, SpinWait: Thread.Yield), runnable all along.
    ("yield", &["do_sched_yield", "__x64_sys_sched_yield"]),
    ("preempted", &[PREEMPTED_FRAME, "irqentry_exit", "preempt_schedule", "__cond_resched", "exit_to_user_mode"]),
];

/// The wait kind of a stack given its kernel frame names (outermost first, as in profiles):
/// `lock`, `sleep`, `socket`, `poll`, `page-fault`, `io`, `yield`, `preempted` or `other`.
pub fn kind<'a>(kernel_frames: impl DoubleEndedIterator<Item = &'a str>) -> &'static str {
    for name in kernel_frames.rev() {
        for (kind, patterns) in KINDS {
            if patterns.iter().any(|p| name.starts_with(p)) {
                return kind;
            }
        }
    }
    "other"
}

#[cfg(test)]
mod tests {
    use super::kind;

    #[test]
    fn kinds_from_kernel_stacks() {
        let k = |s: &str| kind(s.split(';'));
        assert_eq!(k("entry_SYSCALL_64_after_hwframe;do_syscall_64;__x64_sys_futex;do_futex;futex_wait;schedule;__schedule"), "lock");
        assert_eq!(k("do_syscall_64;__x64_sys_clock_nanosleep;common_nsleep;hrtimer_nanosleep;do_nanosleep;schedule"), "sleep");
        assert_eq!(k("do_syscall_64;__x64_sys_recvfrom;__sys_recvfrom;sock_recvmsg;tcp_recvmsg;tcp_recvmsg_locked;sk_wait_data;wait_woken"), "socket");
        assert_eq!(k("do_syscall_64;__x64_sys_epoll_wait;do_epoll_wait;ep_poll;schedule_hrtimeout_range"), "poll");
        assert_eq!(k("asm_exc_page_fault;exc_page_fault;do_user_addr_fault;handle_mm_fault;__handle_mm_fault;do_fault;filemap_fault;folio_wait_bit"), "io");
        assert_eq!(k("asm_sysvec_apic_timer_interrupt;irqentry_exit;preempt_schedule_irq;__schedule"), "preempted");
        assert_eq!(k("entry_SYSCALL_64_after_hwframe;do_syscall_64;__x64_sys_sched_yield;schedule;__schedule"), "yield");
        assert_eq!(k("do_syscall_64;__x64_sys_exit;do_exit"), "other");
        assert_eq!(k(super::PREEMPTED_FRAME), "preempted");
    }
}
