//! User stack copies (`USTACK_*` maps): switching them on and reading them back.
use aya::maps::{Array, MapData, PerCpuArray, RingBuf};
use clrprobe_common::{UserStackHeader, names, ustack};

use super::{BpfError, Loaded};

/// One copied user stack from `USTACK_RING`.
#[derive(Debug, Clone)]
pub struct CopiedStack {
    pub hdr: UserStackHeader,
    pub data: Vec<u8>,
}

/// Buffers of dropped copies, reused for the next ones: a fresh 16 KiB allocation per copy
/// made glibc consolidate its fast bins each time (~10 % of the unwinding thread's CPU).
static SPARE: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());
/// Most spare buffers kept (16 x 16 KiB: about one drain's copies at 99 Hz on two CPUs).
const SPARE_MAX: usize = 16;

impl CopiedStack {
    /// Parses a ring record (header, then `hdr.len` bytes of stack).
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let n = size_of::<UserStackHeader>();
        let head = bytes.get(..n)?;
        // SAFETY: UserStackHeader is plain repr(C) data; read unaligned from the record.
        let hdr: UserStackHeader = unsafe { std::ptr::read_unaligned(head.as_ptr().cast()) };
        let len = (hdr.len as usize).min(bytes.len() - n);
        let mut data = SPARE.lock().ok().and_then(|mut s| s.pop()).unwrap_or_default();
        data.clear();
        data.extend_from_slice(&bytes[n..n + len]);
        Some(CopiedStack { hdr, data })
    }
}

impl Drop for CopiedStack {
    fn drop(&mut self) {
        if self.data.capacity() == 0 || self.data.capacity() > ustack::BYTES {
            return;
        }
        if let Ok(mut s) = SPARE.lock()
            && s.len() < SPARE_MAX
        {
            s.push(std::mem::take(&mut self.data));
        }
    }
}

impl Loaded {
    /// Sets the `ustack::COPY_*` flags (0: frame pointers only).
    pub fn set_ustack_flags(&mut self, flags: u64) -> Result<(), BpfError> {
        let name = names::USTACK_CONFIG;
        let map = self.ebpf.map_mut(name).ok_or(BpfError::NoMap { name })?;
        let mut cfg: Array<&mut MapData, u64> = Array::try_from(map).map_err(|source| BpfError::Map { name, source })?;
        cfg.set(0, flags, 0).map_err(|source| BpfError::Map { name, source })
    }

    /// Takes the ring buffer of copies out of the object (once).
    pub fn take_ustack_ring(&mut self) -> Result<RingBuf<MapData>, BpfError> {
        let name = names::USTACK_RING;
        let map = self.ebpf.take_map(name).ok_or(BpfError::NoMap { name })?;
        RingBuf::try_from(map).map_err(|source| BpfError::Map { name, source })
    }
}

/// What the BPF side of the stack copies did (summed over CPUs).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct CopyStats {
    pub copies: u64,
    pub reused: u64,
    pub sent_offcpu: u64,
    pub ring_full: u64,
    pub no_entry: u64,
    /// Average run time of the sched_switch and perf_event programs (ns per run), when the
    /// kernel's BPF run-time statistics are on (`CLRPROBE_BPF_STATS=1`).
    pub sched_switch_ns: Option<f64>,
    /// Same for `syscall_exit` (deferred off-CPU user stacks).
    pub syscall_exit_ns: Option<f64>,
    pub cpu_sample_ns: Option<f64>,
}

impl Loaded {
    /// Reads `USTACK_STATS` and the programs' run-time statistics.
    pub fn copy_stats(&self) -> Result<CopyStats, BpfError> {
        let name = names::USTACK_STATS;
        let map = self.ebpf.map(name).ok_or(BpfError::NoMap { name })?;
        let m: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(map).map_err(|source| BpfError::Map { name, source })?;
        let slot = |i: u32| m.get(&i, 0).map(|v| v.iter().sum::<u64>()).unwrap_or(0);
        let avg = |prog: &str| {
            let info = self.ebpf.program(prog)?.info().ok()?;
            (info.run_count() > 0).then(|| info.run_time().as_nanos() as f64 / info.run_count() as f64)
        };
        Ok(CopyStats {
            copies: slot(ustack::STAT_COPIES),
            reused: slot(ustack::STAT_REUSED),
            sent_offcpu: slot(ustack::STAT_SENT_OFFCPU),
            ring_full: slot(ustack::STAT_RING_FULL),
            no_entry: slot(ustack::STAT_NO_ENTRY),
            sched_switch_ns: avg(names::PROG_SCHED_SWITCH),
            syscall_exit_ns: avg(names::PROG_SYSCALL_EXIT),
            cpu_sample_ns: avg(names::PROG_CPU_SAMPLE),
        })
    }
}
