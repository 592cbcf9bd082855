//! Wire structs shared by the BPF programs (`clrprobe-ebpf`) and userspace.
//!
//! Every type is `#[repr(C)]`, has no padding holes that BPF could leave
//! uninitialised, and is `Copy`, so it can be a BPF map key or value.
#![no_std]

/// Names of the BPF maps and programs, so both sides agree on them.
pub mod names {
    pub const TARGET_PIDS: &str = "TARGET_PIDS";
    pub const SAMPLE_COUNTS: &str = "SAMPLE_COUNTS";
    pub const STACKS: &str = "STACKS";
    pub const UPROBE_COUNTS: &str = "UPROBE_COUNTS";
    pub const STATS: &str = "STATS";
    pub const PROG_CPU_SAMPLE: &str = "cpu_sample";
    pub const PROG_UPROBE_COUNT: &str = "uprobe_count";
    pub const PROG_SCHED_SWITCH: &str = "sched_switch";
    pub const PROG_SYSCALL_EXIT: &str = "syscall_exit";
    /// Programs that do nothing, on sched_switch as a raw and as a classic tracepoint: the
    /// hook's own cost (`CLRPROBE_SWITCH_FLOOR`, for the benchmark).
    pub const PROG_SCHED_SWITCH_FLOOR_RAW: &str = "sched_switch_floor_raw";
    pub const PROG_SCHED_SWITCH_FLOOR_TP: &str = "sched_switch_floor_tp";
    pub const PROG_CXA_THROW: &str = "cxa_throw";
    pub const SWITCH_THREADS: &str = "SWITCH_THREADS";
    pub const OFFCPU_NS: &str = "OFFCPU_NS";
    pub const ONCPU_NS: &str = "ONCPU_NS";
    pub const SWITCH_CONFIG: &str = "SWITCH_CONFIG";
    pub const CXA_THROWS: &str = "CXA_THROWS";
    pub const USTACK_CONFIG: &str = "USTACK_CONFIG";
    pub const USTACKS: &str = "USTACKS";
    pub const USTACK_RING: &str = "USTACK_RING";
    pub const USTACK_STATS: &str = "USTACK_STATS";
}

/// Copies of the user stack for unwinding in userspace (code without frame pointers, such as
/// Debian's libc). Slot 0 of the `USTACK_CONFIG` array holds these flags.
pub mod ustack {
    /// CPU samples copy the user stack into `USTACK_RING` instead of aggregating in the kernel.
    pub const COPY_CPU: u64 = 1;
    /// Off-CPU switch-outs copy the user stack into the thread's `USTACKS` entry; switch-ins
    /// after an interval of at least the minimum send it to `USTACK_RING` when it changed.
    pub const COPY_OFFCPU: u64 = 2;
    /// Bytes of user stack copied from the stack pointer up (fewer at the stack's end).
    pub const BYTES: usize = 16_384;
    /// Entries of `USTACKS` (threads with a saved off-CPU stack) at most.
    pub const MAX_THREADS: u32 = 4_096;
    /// `UserStackHeader::kind` of a CPU sample.
    pub const KIND_CPU: u32 = 1;
    /// `UserStackHeader::kind` of an off-CPU switch-out stack.
    pub const KIND_OFFCPU: u32 = 2;
    /// `USTACKS` key of a thread's copy for place `slot` (0 or 1) of its `SwitchThread`.
    pub const fn offcpu_key(tid: u32, slot: u32) -> u32 {
        tid | (slot & 1) << 31
    }
    /// The place slot a copy generation belongs to: slot 0 numbers its copies 1, 3, 5…,
    /// slot 1 numbers them 2, 4, 6… (one sequence per thread, no generation shared).
    pub const fn offcpu_slot(generation: u32) -> u32 {
        (generation & 1) ^ 1
    }
    /// `USTACK_STATS` slots: stacks copied (CPU samples and off-CPU switch-outs).
    pub const STAT_COPIES: u32 = 0;
    /// Off-CPU switch-outs that kept the thread's previous copy (same ip, sp and FP stack);
    /// with `switch_config::FLAG_DEFER_USER`, that kept its previous kernel stack instead.
    pub const STAT_REUSED: u32 = 1;
    /// Off-CPU copies sent at switch-in.
    pub const STAT_SENT_OFFCPU: u32 = 2;
    /// Copies lost: ring buffer full.
    pub const STAT_RING_FULL: u32 = 3;
    /// Off-CPU switch-outs without a copy: `USTACKS` full.
    pub const STAT_NO_ENTRY: u32 = 4;
    pub const STATS: u32 = 5;
}

/// What a copied user stack belongs to, and the registers to start unwinding from.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UserStackHeader {
    /// `ustack::KIND_CPU` or `ustack::KIND_OFFCPU`.
    pub kind: u32,
    pub pid: u32,
    pub tid: u32,
    /// Kernel stack id in STACKS (CPU samples), or negative errno.
    pub kernel_stack_id: i32,
    /// Frame-pointer user stack id in STACKS, or negative errno: the rest of the stack when
    /// the copy ends before the thread's start.
    pub user_stack_id: i32,
    /// Bytes of `UserStack::data` that were read.
    pub len: u32,
    /// Off-CPU: the copy's generation for this thread (the `SampleKey::time` of its intervals).
    pub generation: u32,
    /// Off-CPU: the generation last sent to userspace (BPF bookkeeping).
    pub sent_generation: u32,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// CPU samples: `bpf_ktime_get_ns()`.
    pub time_ns: u64,
    pub comm: [u8; 16],
}

/// A user stack copy: header and the bytes from `sp` up.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UserStack {
    pub hdr: UserStackHeader,
    pub data: [u8; ustack::BYTES],
}

/// Slots of the SWITCH_CONFIG array (u64 each), filled by userspace before attaching.
pub mod switch_config {
    /// Unused since sched_switch is a raw tracepoint (was: `next_pid`'s offset in the
    /// classic tracepoint's record).
    pub const NEXT_PID_OFFSET: u32 = 0;
    /// Off-CPU intervals shorter than this many ns are not recorded.
    pub const MIN_OFFCPU_NS: u32 = 1;
    /// Bit 0: record off-CPU stacks; bit 1: account on-CPU time per thread.
    pub const FLAGS: u32 = 2;
    /// Non-zero: CPU samples carry their time (`SampleKey::time`), so userspace can place
    /// them in time windows (a workstation GC on the sampled thread). Read by `cpu_sample`.
    pub const SAMPLE_TIME: u32 = 3;
    pub const LEN: u32 = 4;
    pub const FLAG_OFFCPU: u64 = 1;
    pub const FLAG_ONCPU: u64 = 2;
    /// Off-CPU intervals carry their start (`SampleKey::time`), one map entry per interval.
    pub const FLAG_OFFCPU_TIME: u64 = 4;
    /// The `syscall_exit` program (raw tracepoint `sys_exit`, running as the thread leaving
    /// its syscall, user registers and stack as they were when it blocked) is attached: a
    /// thread switching out inside a syscall gets its kernel stack walked only; its user stack
    /// is walked and copied when the syscall returns, and only after an interval of at least
    /// the minimum.
    pub const FLAG_DEFER_USER: u64 = 8;
    /// Both stack ids of an off-CPU interval the thread spent runnable (preempted: on the run
    /// queue, not waiting for anything), whose stacks are not walked. Outside the errors
    /// `bpf_get_stackid` returns (-4095..0).
    pub const PREEMPTED_STACK_ID: i32 = -0x1_0000;
}

/// A thread switched out, waiting to be switched back in.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct OffCpuStart {
    pub start_ns: u64,
    pub pid: u32,
    pub user_stack_id: i32,
    pub kernel_stack_id: i32,
    /// Generation of the thread's `USTACKS` copy taken at this switch-out, 0 without one.
    pub ustack_generation: u32,
    pub comm: [u8; 16],
    /// Deferred user stack (`FLAG_DEFER_USER`): the user ip and sp at switch-out, and the
    /// switch-in time once the thread ran again (0 while it is off CPU).
    pub user_ip: u64,
    pub user_sp: u64,
    pub end_ns: u64,
    /// The thread (the map is keyed by its task, see `OFFCPU_START`).
    pub tid: u32,
    pub _pad: u32,
}

/// A place where a thread blocked (`SwitchThread::places`): user ip, sp, bp and syscall
/// number, with the stack ids taken there (negative: none) and the generation of its
/// `USTACKS` copy (0: none). A thread blocking again at the same place reuses them instead of
/// walking and copying again.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct BlockPlace {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    pub nr: i64,
    pub user_stack_id: i32,
    pub kernel_stack_id: i32,
    pub copy_generation: u32,
    /// Switch-outs that reused what was taken here since it was taken.
    pub reuses: u32,
}

/// What the sched_switch program keeps per thread of a target, keyed by the thread's task
/// address (`SWITCH_THREADS`): one map entry read once at switch-out and once at switch-in.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SwitchThread {
    /// The open off-CPU interval (`state` says whether there is one).
    pub off: OffCpuStart,
    /// When the thread was last switched in (0: not seen yet).
    pub oncpu_start: u64,
    /// The last two places it blocked at: threads often alternate between two (a condition
    /// wait and the lock around it, say). Each has its own copy (`USTACKS`, see
    /// `ustack::offcpu_key`).
    pub places: [BlockPlace; 2],
    /// The last copy generation sent to userspace.
    pub sent_generation: u32,
    /// `switch_thread::*`.
    pub state: u32,
    /// The slot of `places` a new place takes next (the other was used last).
    pub next_slot: u32,
    pub _pad: u32,
}

/// `SwitchThread::state`.
pub mod switch_thread {
    /// On CPU, or off CPU without an interval to record.
    pub const IDLE: u32 = 0;
    /// Switched out: the interval ends at its switch-in.
    pub const OUT: u32 = 1;
    /// Deferred interval (`FLAG_DEFER_USER`) ended: recorded when its syscall returns.
    pub const ENDED: u32 = 2;
}

/// On-CPU time accounted to a thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ThreadCpu {
    pub pid: u32,
    pub _pad: u32,
    pub on_cpu_ns: u64,
    pub comm: [u8; 16],
}

/// Maximum entries of the sample aggregation map.
pub const MAX_SAMPLE_KEYS: u32 = 65_536;
/// Maximum entries of the stack trace map (distinct stacks kept).
pub const MAX_STACKS: u32 = 32_768;
/// Maximum number of target processes filtered in the kernel.
pub const MAX_TARGETS: u32 = 4_096;

/// Key of the in-kernel CPU sample aggregation: one entry per distinct
/// (thread, user stack, kernel stack).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SampleKey {
    /// Process id (tgid).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Id in the STACKS map of the user stack, or negative errno.
    pub user_stack_id: i32,
    /// Id in the STACKS map of the kernel stack, or negative errno.
    pub kernel_stack_id: i32,
    /// Thread name (`comm`) at sample time, NUL padded.
    pub comm: [u8; 16],
    /// CPU samples when `switch_config::SAMPLE_TIME` is set: `bpf_ktime_get_ns() >> 10`
    /// (CLOCK_MONOTONIC in ~µs units), which makes each sample its own entry; else 0.
    /// Off-CPU intervals: their start, in the same units, when times are asked for; else 0.
    pub time: u64,
    /// Off-CPU with a user stack copy sent: the copy's generation for this thread (the copy
    /// is keyed by (tid, generation)); 0 without a copy.
    pub generation: u32,
    pub _pad: u32,
}

/// Value of the sample aggregation map.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SampleValue {
    pub count: u64,
}

/// Per-CPU counters of what the BPF side could not record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Stats {
    /// Samples taken for a target.
    pub samples: u64,
    /// Samples dropped because the aggregation map was full.
    pub dropped_map_full: u64,
    /// User stacks that could not be stored (collision or map full).
    pub user_stack_errors: u64,
    /// Kernel stacks that could not be stored.
    pub kernel_stack_errors: u64,
    /// Uprobe hits for a target.
    pub uprobe_hits: u64,
    /// Off-CPU intervals recorded.
    pub offcpu_intervals: u64,
    /// Off-CPU intervals lost because a map was full.
    pub offcpu_dropped: u64,
}

/// Index of the single STATS per-CPU array slot.
pub const STATS_SLOT: u32 = 0;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all are repr(C), Copy and fully initialised plain data.
    unsafe impl aya::Pod for super::SampleKey {}
    unsafe impl aya::Pod for super::SampleValue {}
    unsafe impl aya::Pod for super::Stats {}
    unsafe impl aya::Pod for super::OffCpuStart {}
    unsafe impl aya::Pod for super::SwitchThread {}
    unsafe impl aya::Pod for super::ThreadCpu {}
    unsafe impl aya::Pod for super::UserStackHeader {}
}

impl SampleKey {
    /// The thread name up to the first NUL.
    pub fn comm_bytes(&self) -> &[u8] {
        let end = self.comm.iter().position(|&b| b == 0).unwrap_or(self.comm.len());
        &self.comm[..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn each_place_has_its_own_copy_key_and_generations() {
        let tid = 4_194_303; // pid_max's largest
        assert_ne!(ustack::offcpu_key(tid, 0), ustack::offcpu_key(tid, 1));
        assert_eq!(ustack::offcpu_key(tid, 0), tid);
        for g in [1u32, 3, 5, u32::MAX] {
            assert_eq!(ustack::offcpu_slot(g), 0, "{g}");
        }
        for g in [2u32, 4, u32::MAX - 1] {
            assert_eq!(ustack::offcpu_slot(g), 1, "{g}");
        }
    }

    #[test]
    fn layouts_have_no_padding() {
        assert_eq!(core::mem::size_of::<SampleKey>(), 48);
        assert_eq!(core::mem::size_of::<Stats>(), 56);
        assert_eq!(core::mem::size_of::<OffCpuStart>(), 72);
        assert_eq!(core::mem::size_of::<BlockPlace>(), 48);
        assert_eq!(core::mem::size_of::<SwitchThread>(), 192);
        assert_eq!(core::mem::size_of::<ThreadCpu>(), 32);
        assert_eq!(core::mem::size_of::<UserStackHeader>(), 80);
        assert_eq!(core::mem::size_of::<UserStack>(), 80 + ustack::BYTES);
    }
    #[test]
    fn comm_stops_at_nul() {
        let mut k = SampleKey::default();
        k.comm[..4].copy_from_slice(b"dotn");
        assert_eq!(k.comm_bytes(), b"dotn");
    }
}
