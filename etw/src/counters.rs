//! The typed counters of one .NET Framework runtime, as `ipcblock` reads them from the CLR's
//! shared IPC block (`perfcounterdefs.h` sections; pointer-sized counters widened to u64).

/// The `IPCHeader` of one control block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IpcHeader {
    pub counter: i32,
    pub runtime_id: u32,
    pub version: u16,
    pub flags: u16,
    pub block_size: u32,
    pub build_year: u16,
    pub build_number: u16,
    pub num_entries: u32,
    pub perf_offset: u32,
    pub perf_size: u32,
}

/// A current/total counter pair (`TRICOUNT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TriCount {
    pub current: u32,
    pub total: u32,
}

/// `Perf_GC` (pointer-sized counters widened to u64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GcCounters {
    pub gen0_collections: u64,
    pub gen1_collections: u64,
    pub gen2_collections: u64,
    pub gen0_promoted_bytes: u64,
    pub gen1_promoted_bytes: u64,
    pub promoted_finalization_bytes: u64,
    /// The process id as the GC wrote it (0 before the first GC).
    pub process_id: u64,
    pub gen0_heap_size: u64,
    pub gen1_heap_size: u64,
    pub gen2_heap_size: u64,
    pub total_committed_bytes: u64,
    pub total_reserved_bytes: u64,
    pub large_object_heap_size: u64,
    pub survived_finalize: u64,
    pub handles: u64,
    pub allocated_bytes: u64,
    pub large_allocated_bytes: u64,
    pub induced_gcs: u64,
    pub time_in_gc: u32,
    pub time_in_gc_base: u32,
    pub pinned_objects: u64,
    pub sink_blocks: u64,
}

/// `Perf_Contexts` (remoting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ContextCounters {
    pub remote_calls: u32,
    pub channels: u32,
    pub proxies: u32,
    pub classes: u32,
    pub objects_allocated: u32,
    pub contexts: u32,
}

/// `Perf_Interop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InteropCounters {
    pub ccws: u32,
    pub stubs: u32,
    pub marshalling: u32,
    pub tlb_imports: u32,
    pub tlb_exports: u32,
}

/// `Perf_Loading`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadingCounters {
    pub classes_loaded: TriCount,
    pub app_domains: TriCount,
    pub assemblies: TriCount,
    pub time_loading: i64,
    pub assembly_search_length: u32,
    pub load_failures: u32,
    pub loader_heap_size: u64,
    pub app_domains_unloaded: u32,
}

/// `Perf_Excep`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExceptionCounters {
    pub thrown: u32,
    pub filters_executed: u32,
    pub finallys_executed: u32,
    pub throw_to_catch_depth: u32,
}

/// `Perf_LocksAndThreads`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LocksAndThreadsCounters {
    pub contentions: u32,
    pub queue_length: TriCount,
    pub current_logical_threads: u32,
    pub current_physical_threads: u32,
    pub recognized_threads: TriCount,
}

/// `Perf_Jit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JitCounters {
    pub methods_jitted: u32,
    pub il_bytes_jitted: TriCount,
    pub jit_failures: u32,
    pub time_in_jit: u32,
    pub time_in_jit_base: u32,
}

/// `Perf_Security`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SecurityCounters {
    pub total_runtime_checks: u32,
    pub time_authorize: i64,
    pub link_checks: u32,
    pub time_runtime_checks: u32,
    pub time_runtime_checks_base: u32,
    pub stack_walk_depth: u32,
}

/// Every counter of one runtime's IPC block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClrCounters {
    pub header: IpcHeader,
    /// Pointer size of the writing runtime (4: x86, 8: x64).
    pub pointer_size: u8,
    /// `cBytes` and `wAttrs` of the counter block.
    pub perf_block_size: u16,
    pub perf_attributes: u16,
    pub gc: GcCounters,
    pub contexts: ContextCounters,
    pub interop: InteropCounters,
    pub loading: LoadingCounters,
    pub exceptions: ExceptionCounters,
    pub locks_and_threads: LocksAndThreadsCounters,
    pub jit: JitCounters,
    pub security: SecurityCounters,
}
