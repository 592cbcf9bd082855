//! User stack copies for unwinding in userspace: the registers the thread had in user mode
//! (its `pt_regs`) and up to `ustack::BYTES` of its stack from the stack pointer up.
//!
//! CPU samples send each copy through `USTACK_RING`. Off-CPU switch-outs keep the copy in the
//! thread's `USTACKS` entry (not copied again while the thread blocks at the same ip, sp and
//! bp), and the switch-in sends it once per generation when the interval is long enough to be
//! recorded.
use aya_ebpf::{
    bindings::pt_regs,
    helpers::{
        bpf_probe_read_kernel,
        generated::{bpf_get_current_task_btf, bpf_probe_read_user, bpf_task_pt_regs},
    },
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use clrprobe_common::{UserStack, UserStackHeader, ustack};

/// Slot 0: `ustack::COPY_*` flags.
#[map(name = "USTACK_CONFIG")]
pub static USTACK_CONFIG: Array<u64> = Array::with_max_entries(1, 0);

/// `ustack::offcpu_key(tid, slot)` → the thread's last off-CPU stack copy at its place `slot`.
/// Not preallocated: memory grows with the threads seen.
#[map(name = "USTACKS")]
pub static USTACKS: HashMap<u32, UserStack> =
    HashMap::with_max_entries(ustack::MAX_THREADS, aya_ebpf::bindings::BPF_F_NO_PREALLOC);

/// A zeroed value to create `USTACKS` entries from (never written).
#[map(name = "USTACK_ZERO")]
pub static USTACK_ZERO: PerCpuArray<UserStack> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU counters: `ustack::STAT_*` slots.
#[map(name = "USTACK_STATS")]
pub static USTACK_STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(ustack::STATS, 0);

#[inline(always)]
pub fn count(slot: u32) {
    if let Some(p) = USTACK_STATS.get_ptr_mut(slot) {
        // SAFETY: this CPU's slot.
        unsafe { *p += 1 };
    }
}

/// Copies sent to userspace.
#[map(name = "USTACK_RING")]
pub static USTACK_RING: RingBuf = RingBuf::with_byte_size(16 << 20, 0);

const CHUNK: usize = 1024;
const BPF_NOEXIST: u64 = 1;

#[inline(always)]
pub fn flags() -> u64 {
    USTACK_CONFIG.get(0).copied().unwrap_or(0)
}

/// The current thread's user-mode registers (its `pt_regs`); None for kernel threads.
#[inline(always)]
fn user_pt_regs() -> Option<pt_regs> {
    // SAFETY: the current task is valid while the program runs; its pt_regs pointer is read
    // with probe_read_kernel.
    let regs = unsafe {
        let task = bpf_get_current_task_btf();
        let p = bpf_task_pt_regs(task) as *const pt_regs;
        bpf_probe_read_kernel(p).ok()?
    };
    (regs.rip != 0 && regs.rsp != 0).then_some(regs)
}

/// A thread's user-mode registers that clrprobe uses: ip, sp, bp and `orig_ax` (the syscall
/// number inside a syscall, negative for an interrupt or fault). All zero (`NONE`) when there
/// are none (kernel thread, not read): a plain value rather than an `Option`, whose copies of
/// an uninitialised payload the verifier rejects.
#[derive(Clone, Copy)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    pub orig_ax: i64,
}

impl UserRegs {
    pub const NONE: UserRegs = UserRegs { ip: 0, sp: 0, bp: 0, orig_ax: -1 };

    #[inline(always)]
    pub fn present(&self) -> bool {
        self.ip != 0
    }

    /// Present and inside a syscall.
    #[inline(always)]
    pub fn in_syscall(&self) -> bool {
        self.ip != 0 && self.orig_ax >= 0
    }
}

/// The current thread's user-mode registers, read once per program run (`NONE` for kernel
/// threads).
#[inline(always)]
pub fn user_regs_now() -> UserRegs {
    match user_pt_regs() {
        Some(r) => UserRegs { ip: r.rip, sp: r.rsp, bp: r.rbp, orig_ax: r.orig_rax as i64 },
        None => UserRegs::NONE,
    }
}

/// The current thread's user-mode ip, sp and bp; None for kernel threads.
#[inline(always)]
fn user_regs() -> Option<(u64, u64, u64)> {
    user_pt_regs().map(|r| (r.rip, r.rsp, r.rbp))
}

/// Copies the user stack from `sp` into `data`, chunk by chunk, stopping at the first chunk
/// that cannot be read (the end of the stack mapping). Returns the bytes read.
#[inline(always)]
fn copy_stack(data: *mut u8, sp: u64) -> u32 {
    let mut len = 0u32;
    let mut i = 0usize;
    while i < ustack::BYTES / CHUNK {
        // SAFETY: `data` has ustack::BYTES bytes; the helper faults safely on bad user addresses.
        let rc = unsafe {
            bpf_probe_read_user(data.add(i * CHUNK).cast(), CHUNK as u32, (sp + (i * CHUNK) as u64) as *const _)
        };
        if rc != 0 {
            break;
        }
        len += CHUNK as u32;
        i += 1;
    }
    len
}

/// Sends the current thread's registers and stack now, under `hdr` (its `kind` says what
/// for): a CPU sample, or an off-CPU interval deferred to its syscall's return (`syscall_exit`,
/// running as the thread whose user registers and stack are those it blocked with, the copy
/// named by `hdr.generation`). False when nothing was sent (kernel thread, ring full): the
/// caller then uses the frame-pointer stack.
#[inline(always)]
pub fn send_now(hdr: UserStackHeader) -> bool {
    let Some(regs) = user_regs() else { return false };
    send_with(regs, hdr)
}

#[inline(always)]
fn send_with((ip, sp, bp): (u64, u64, u64), hdr: UserStackHeader) -> bool {
    let Some(mut entry) = USTACK_RING.reserve::<UserStack>(0) else {
        count(ustack::STAT_RING_FULL);
        return false;
    };
    count(ustack::STAT_COPIES);
    if hdr.kind == ustack::KIND_OFFCPU {
        count(ustack::STAT_SENT_OFFCPU);
    }
    let p = entry.as_mut_ptr();
    // SAFETY: the reserved entry is ours until submitted; fields are written before submit.
    unsafe {
        let len = copy_stack((*p).data.as_mut_ptr(), sp);
        (*p).hdr = UserStackHeader { len, ip, sp, bp, ..hdr };
    }
    // The reader is not woken for each copy (a wake-up per record was the reader thread's
    // main cost): it empties the ring every 50 ms, or at once when a quarter of it is taken.
    let waiting = USTACK_RING.query(BPF_RB_AVAIL_DATA);
    let size = USTACK_RING.query(BPF_RB_RING_SIZE);
    entry.submit(if waiting >= size / 4 { BPF_RB_FORCE_WAKEUP } else { BPF_RB_NO_WAKEUP });
    true
}

/// `bpf_ringbuf_query` flags and `bpf_ringbuf_submit` flags (include/uapi/linux/bpf.h).
const BPF_RB_AVAIL_DATA: u64 = 0;
const BPF_RB_RING_SIZE: u64 = 1;
const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;

/// The copy a thread's last deferred off-CPU interval sent: where it blocked (user ip, sp, bp)
/// and the copy's generation.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct SentCopy {
    ip: u64,
    sp: u64,
    bp: u64,
    generation: u64,
}

/// tid → `SentCopy`: a thread blocking again at the same ip, sp and bp (a thread pool's worker
/// waiting for work, a sleeper) names its previous copy instead of sending a new one (the
/// frames above are taken to be the same, as for switch-out copies). Least recently used
/// threads make room.
#[map(name = "USTACK_SENT")]
pub static USTACK_SENT: LruHashMap<u32, SentCopy> = LruHashMap::with_max_entries(crate::maps::MAX_THREADS, 0);

/// Deferred off-CPU interval (`syscall_exit`, as the thread): the generation naming its user
/// stack copy — the one it sent last if it blocked at the same place, else a new one sent now
/// under `hdr.generation`. 0 when there is no copy (kernel thread, ring full).
#[inline(always)]
pub fn send_offcpu_deferred(tid: u32, regs: UserRegs, hdr: UserStackHeader) -> u32 {
    let (ip, sp, bp) = (regs.ip, regs.sp, regs.bp);
    if let Some(last) = USTACK_SENT.get_ptr(&tid) {
        // SAFETY: value in the map, read only.
        let last = unsafe { *last };
        if last.generation != 0 && last.ip == ip && last.sp == sp && last.bp == bp {
            return last.generation as u32;
        }
    }
    if !send_with((ip, sp, bp), UserStackHeader { kind: ustack::KIND_OFFCPU, ..hdr }) {
        return 0;
    }
    let _ = USTACK_SENT.insert(&tid, &SentCopy { ip, sp, bp, generation: hdr.generation as u64 }, 0);
    hdr.generation
}

/// Off-CPU switch-out: makes sure the thread's `USTACKS` entry for its place `slot` holds its
/// current stack (user registers `regs`) and returns the entry's generation (0 when there is
/// no copy).
#[inline(always)]
pub fn save_offcpu(tid: u32, slot: u32, regs: UserRegs, hdr: UserStackHeader) -> u32 {
    let (ip, sp, bp) = (regs.ip, regs.sp, regs.bp);
    let key = ustack::offcpu_key(tid, slot);
    let entry = match USTACKS.get_ptr_mut(&key) {
        Some(e) => e,
        None => {
            let Some(zero) = USTACK_ZERO.get_ptr(0) else { return 0 };
            // SAFETY: a value in a per-CPU map, only read here.
            if USTACKS.insert(&key, unsafe { &*zero }, BPF_NOEXIST).is_err() {
                count(ustack::STAT_NO_ENTRY);
                return 0;
            }
            match USTACKS.get_ptr_mut(&key) {
                Some(e) => e,
                None => return 0,
            }
        }
    };
    // SAFETY: the entry lives in the map; only this thread's switch-out writes it, and its
    // switch-in (reading it) happens after.
    unsafe {
        let h = &mut (*entry).hdr;
        // Same ip, sp and bp as the last copy: the thread blocks at the same place with the
        // same stack depth, so the frames above are taken to be the same (the frame-pointer
        // stack id is not compared: a walk from a libc RBP varies with garbage).
        if h.generation != 0 && h.ip == ip && h.sp == sp && h.bp == bp && h.len != 0 {
            count(ustack::STAT_REUSED);
            return h.generation;
        }
        count(ustack::STAT_COPIES);
        let len = copy_stack((*entry).data.as_mut_ptr(), sp);
        // This slot's sequence (see `ustack::offcpu_slot`), never 0.
        let generation = match h.generation.wrapping_add(2) {
            g if g > 2 => g,
            _ => 1 + (slot & 1),
        };
        let sent_generation = h.sent_generation;
        (*entry).hdr = UserStackHeader { len, ip, sp, bp, generation, sent_generation, kind: ustack::KIND_OFFCPU, ..hdr };
        generation
    }
}

/// Off-CPU switch-in after a recorded interval: sends the thread's copy of `generation` if it
/// was not sent yet. False when it could not be sent (userspace then uses the FP stack).
#[inline(always)]
pub fn send_offcpu(tid: u32, generation: u32) -> bool {
    let key = ustack::offcpu_key(tid, ustack::offcpu_slot(generation));
    let Some(entry) = USTACKS.get_ptr_mut(&key) else { return false };
    // SAFETY: the entry lives in the map; the thread is not running (it is being switched in).
    unsafe {
        if (*entry).hdr.generation != generation {
            return false;
        }
        if (*entry).hdr.sent_generation == generation {
            return true;
        }
        if USTACK_RING.output::<UserStack>(&*entry, 0).is_err() {
            count(ustack::STAT_RING_FULL);
            return false;
        }
        count(ustack::STAT_SENT_OFFCPU);
        (*entry).hdr.sent_generation = generation;
    }
    true
}
