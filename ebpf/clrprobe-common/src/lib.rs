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
}

/// Index of the single STATS per-CPU array slot.
pub const STATS_SLOT: u32 = 0;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all are repr(C), Copy and fully initialised plain data.
    unsafe impl aya::Pod for super::SampleKey {}
    unsafe impl aya::Pod for super::SampleValue {}
    unsafe impl aya::Pod for super::Stats {}
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
    fn layouts_have_no_padding() {
        assert_eq!(core::mem::size_of::<SampleKey>(), 32);
        assert_eq!(core::mem::size_of::<Stats>(), 40);
    }
    #[test]
    fn comm_stops_at_nul() {
        let mut k = SampleKey::default();
        k.comm[..4].copy_from_slice(b"dotn");
        assert_eq!(k.comm_bytes(), b"dotn");
    }
}
