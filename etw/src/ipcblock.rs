//! The .NET Framework CLR's shared IPC block (`Cor_SxSPublic_IPCBlock`) and its performance
//! counters, parsed from bytes. Platform-neutral; `ipcblock_windows` maps the real block.
//!
//! Layout (CLR `ipcheader.h` / `perfcounterdefs.h`, see `shared/specs/clr-ipcblock.md`): the
//! mapping is a table of 32 control blocks of 2048 bytes. Each starts with an `IPCHeader`
//! (Counter, RuntimeId, Reserved1, Reserved2: u32; Version, Flags: u16; BlockSize: u32;
//! BuildYear, BuildNumber: u16; NumEntries: u32; one `IPCEntry {Offset, Size}` = 40 bytes),
//! whose entry 0 locates the `PerfCounterIPCControlBlock` (Offset from the start of the block).
//! That block is `cBytes, wAttrs: u16` then the sections GC, Contexts, Interop, Loading,
//! Exceptions, LocksAndThreads, Jit, Security. `size_t` fields are the writer's pointer size.
//! x86 writers pack structs to 4 bytes (`pshpack4.h`); x64 writers use natural alignment, so
//! 8-byte fields and the GC, Loading and Security sections are 8-aligned there. `TRICOUNT` is
//! `{Cur, Total: u32}`, `DUALCOUNT` is `{Total: u32}`. The writer's bitness is header flag
//! `IPC_FLAG_X86`.

use thiserror::Error;

pub use crate::counters::*;

/// Size of one control block.
pub const IPC_BLOCK_SIZE: usize = 2048;
/// Control blocks in the shared table (side-by-side runtimes; the first is used in practice).
pub const IPC_NUM_BLOCKS: usize = 32;
/// `IPCHeader` with its one-entry directory.
pub const IPC_HEADER_SIZE: usize = 40;
pub const IPC_FLAG_USES_FLAGS: u16 = 0x1;
pub const IPC_FLAG_INITIALIZED: u16 = 0x2;
pub const IPC_FLAG_X86: u16 = 0x4;
/// `PerfCounterIPCControlBlock` sizes written by x86 and x64 runtimes.
pub const PERF_BLOCK_SIZE_X86: usize = 280;
pub const PERF_BLOCK_SIZE_X64: usize = 384;
const EMPTY_ENTRY_OFFSET: u32 = 0xFFFF_FFFF;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CountersError {
    #[error("IPC block truncated at {what} (offset {offset}): need {needed} bytes, {available} available")]
    Truncated { what: &'static str, offset: usize, needed: usize, available: usize },
    #[error("IPC block was never written by a runtime (Counter 0): the process has no .NET Framework CLR loaded, or it has not started yet")]
    NeverWritten,
    #[error("IPC block is free (RuntimeId 0): no runtime owns it")]
    BlockFree,
    #[error("IPC block header is being written (Counter {counter} is odd): read again")]
    WriterBusy { counter: i32 },
    #[error("IPC block is not initialized yet (Flags {flags:#x}): the runtime is still starting; read again")]
    NotInitialized { flags: u16 },
    #[error("IPC block has no performance-counter section (directory entry empty or NumEntries {num_entries})")]
    NoPerfSection { num_entries: u32 },
    #[error("IPC block's performance-counter entry (offset {offset}, size {size}) lies outside the {block_len}-byte block: corrupt block")]
    BadPerfEntry { offset: u32, size: u32, block_len: usize },
    #[error("performance-counter section is {size} bytes, the {pointer_size}-byte-pointer layout needs {needed}: unknown runtime version")]
    PerfSectionTooSmall { size: u32, needed: usize, pointer_size: u8 },
    #[error("pointer size {0} is not 4 or 8")]
    BadPointerSize(u8),
    #[error("no usable IPC block for process {pid:?} among {blocks} blocks ({reason})")]
    NoRuntimeBlock { pid: Option<u32>, blocks: usize, reason: String },
    #[error("the IPC block belongs to process {found}, not {expected}")]
    PidMismatch { expected: u32, found: u64 },
    #[error("{call} failed with Windows error {code}: {hint}")]
    Os { call: &'static str, code: u32, hint: &'static str },
}

/// Little-endian reader with C struct alignment (capped at `pack`).
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    pointer_size: u8,
    pack: usize,
}

impl<'a> Reader<'a> {
    fn align(&mut self, natural: usize) {
        let a = natural.min(self.pack);
        self.pos = self.pos.div_ceil(a) * a;
    }
    fn take<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], CountersError> {
        self.align(N);
        let end = self.pos.checked_add(N);
        match end.and_then(|e| self.buf.get(self.pos..e)) {
            Some(s) => {
                let mut out = [0u8; N];
                out.copy_from_slice(s);
                self.pos += N;
                Ok(out)
            }
            None => Err(CountersError::Truncated {
                what,
                offset: self.pos,
                needed: N,
                available: self.buf.len().saturating_sub(self.pos),
            }),
        }
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, CountersError> {
        self.take::<2>(what).map(u16::from_le_bytes)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, CountersError> {
        self.take::<4>(what).map(u32::from_le_bytes)
    }
    fn i64(&mut self, what: &'static str) -> Result<i64, CountersError> {
        self.take::<8>(what).map(i64::from_le_bytes)
    }
    fn nint(&mut self, what: &'static str) -> Result<u64, CountersError> {
        if self.pointer_size == 4 { self.u32(what).map(u64::from) } else { self.take::<8>(what).map(u64::from_le_bytes) }
    }
    fn tri(&mut self, what: &'static str) -> Result<TriCount, CountersError> {
        Ok(TriCount { current: self.u32(what)?, total: self.u32(what)? })
    }
    /// Starts a struct whose largest member is `natural` bytes.
    fn section(&mut self, natural: usize) {
        self.align(natural);
    }
    /// Ends a struct: its size is a multiple of its alignment.
    fn end_section(&mut self, natural: usize) {
        self.align(natural);
    }
}

/// Parses the header of one control block.
pub fn parse_header(block: &[u8]) -> Result<IpcHeader, CountersError> {
    let mut r = Reader { buf: block, pos: 0, pointer_size: 4, pack: 4 };
    Ok(IpcHeader {
        counter: r.u32("IPCHeader.Counter")? as i32,
        runtime_id: r.u32("IPCHeader.RuntimeId")?,
        version: {
            let _ = r.u32("IPCHeader.Reserved1")?;
            let _ = r.u32("IPCHeader.Reserved2")?;
            r.u16("IPCHeader.Version")?
        },
        flags: r.u16("IPCHeader.Flags")?,
        block_size: r.u32("IPCHeader.BlockSize")?,
        build_year: r.u16("IPCHeader.BuildYear")?,
        build_number: r.u16("IPCHeader.BuildNumber")?,
        num_entries: r.u32("IPCHeader.NumEntries")?,
        perf_offset: r.u32("IPCEntry.Offset")?,
        perf_size: r.u32("IPCEntry.Size")?,
    })
}

/// The pointer size of the writer: `IPC_FLAG_X86` when the block uses flags, else told by the
/// size of the counter section.
pub fn writer_pointer_size(h: &IpcHeader) -> u8 {
    if h.flags & IPC_FLAG_USES_FLAGS != 0 {
        if h.flags & IPC_FLAG_X86 != 0 { 4 } else { 8 }
    } else if h.perf_size as usize == PERF_BLOCK_SIZE_X86 {
        4
    } else {
        8
    }
}

/// Parses one 2048-byte control block (a shorter slice is an error naming the field).
pub fn parse_block(block: &[u8]) -> Result<ClrCounters, CountersError> {
    let header = parse_header(block)?;
    if header.counter == 0 {
        return Err(CountersError::NeverWritten);
    }
    if header.runtime_id == 0 {
        return Err(CountersError::BlockFree);
    }
    if header.counter & 1 != 0 {
        return Err(CountersError::WriterBusy { counter: header.counter });
    }
    if header.flags == 0 || (header.flags & IPC_FLAG_USES_FLAGS != 0 && header.flags & IPC_FLAG_INITIALIZED == 0) {
        return Err(CountersError::NotInitialized { flags: header.flags });
    }
    if header.num_entries == 0 || header.perf_offset == EMPTY_ENTRY_OFFSET {
        return Err(CountersError::NoPerfSection { num_entries: header.num_entries });
    }
    let start = header.perf_offset as usize;
    let end = start.checked_add(header.perf_size as usize);
    let limit = block.len().min(IPC_BLOCK_SIZE);
    let perf = match end {
        Some(end) if start >= IPC_HEADER_SIZE && end <= limit => &block[start..end],
        _ => {
            return Err(CountersError::BadPerfEntry { offset: header.perf_offset, size: header.perf_size, block_len: limit });
        }
    };
    let pointer_size = writer_pointer_size(&header);
    let mut c = parse_perf(perf, pointer_size)?;
    c.header = header;
    Ok(c)
}

/// Parses a `PerfCounterIPCControlBlock` written by a runtime with `pointer_size` pointers.
pub fn parse_perf(perf: &[u8], pointer_size: u8) -> Result<ClrCounters, CountersError> {
    let (pack, needed) = match pointer_size {
        4 => (4, PERF_BLOCK_SIZE_X86),
        8 => (8, PERF_BLOCK_SIZE_X64),
        other => return Err(CountersError::BadPointerSize(other)),
    };
    if perf.len() < needed {
        return Err(CountersError::PerfSectionTooSmall { size: perf.len() as u32, needed, pointer_size });
    }
    let p = usize::from(pointer_size);
    let mut r = Reader { buf: perf, pos: 0, pointer_size, pack };
    let perf_block_size = r.u16("cBytes")?;
    let perf_attributes = r.u16("wAttrs")?;

    r.section(p);
    let gc = GcCounters {
        gen0_collections: r.nint("GC.cGenCollections[0]")?,
        gen1_collections: r.nint("GC.cGenCollections[1]")?,
        gen2_collections: r.nint("GC.cGenCollections[2]")?,
        gen0_promoted_bytes: r.nint("GC.cbPromotedMem[0]")?,
        gen1_promoted_bytes: r.nint("GC.cbPromotedMem[1]")?,
        promoted_finalization_bytes: r.nint("GC.cbPromotedFinalizationMem")?,
        process_id: r.nint("GC.cProcessID")?,
        gen0_heap_size: r.nint("GC.cGenHeapSize[0]")?,
        gen1_heap_size: r.nint("GC.cGenHeapSize[1]")?,
        gen2_heap_size: r.nint("GC.cGenHeapSize[2]")?,
        total_committed_bytes: r.nint("GC.cTotalCommittedBytes")?,
        total_reserved_bytes: r.nint("GC.cTotalReservedBytes")?,
        large_object_heap_size: r.nint("GC.cLrgObjSize")?,
        survived_finalize: r.nint("GC.cSurviveFinalize")?,
        handles: r.nint("GC.cHandles")?,
        allocated_bytes: r.nint("GC.cbAlloc")?,
        large_allocated_bytes: r.nint("GC.cbLargeAlloc")?,
        induced_gcs: r.nint("GC.cInducedGCs")?,
        time_in_gc: r.u32("GC.timeInGC")?,
        time_in_gc_base: r.u32("GC.timeInGCBase")?,
        pinned_objects: r.nint("GC.cPinnedObj")?,
        sink_blocks: r.nint("GC.cSinkBlocks")?,
    };
    r.end_section(p);

    r.section(4);
    let contexts = ContextCounters {
        remote_calls: r.u32("Contexts.cRemoteCalls")?,
        channels: r.u32("Contexts.cChannels")?,
        proxies: r.u32("Contexts.cProxies")?,
        classes: r.u32("Contexts.cClasses")?,
        objects_allocated: r.u32("Contexts.cObjAlloc")?,
        contexts: r.u32("Contexts.cContexts")?,
    };
    let interop = InteropCounters {
        ccws: r.u32("Interop.cCCW")?,
        stubs: r.u32("Interop.cStubs")?,
        marshalling: r.u32("Interop.cMarshalling")?,
        tlb_imports: r.u32("Interop.cTLBImports")?,
        tlb_exports: r.u32("Interop.cTLBExports")?,
    };

    r.section(8);
    let loading = LoadingCounters {
        classes_loaded: r.tri("Loading.cClassesLoaded")?,
        app_domains: r.tri("Loading.cAppDomains")?,
        assemblies: r.tri("Loading.cAssemblies")?,
        time_loading: r.i64("Loading.timeLoading")?,
        assembly_search_length: r.u32("Loading.cAsmSearchLen")?,
        load_failures: r.u32("Loading.cLoadFailures")?,
        loader_heap_size: r.nint("Loading.cbLoaderHeapSize")?,
        app_domains_unloaded: r.u32("Loading.cAppDomainsUnloaded")?,
    };
    r.end_section(8);

    let exceptions = ExceptionCounters {
        thrown: r.u32("Excep.cThrown")?,
        filters_executed: r.u32("Excep.cFiltersExecuted")?,
        finallys_executed: r.u32("Excep.cFinallysExecuted")?,
        throw_to_catch_depth: r.u32("Excep.cThrowToCatchStackDepth")?,
    };
    let locks_and_threads = LocksAndThreadsCounters {
        contentions: r.u32("LocksAndThreads.cContention")?,
        queue_length: r.tri("LocksAndThreads.cQueueLength")?,
        current_logical_threads: r.u32("LocksAndThreads.cCurrentThreadsLogical")?,
        current_physical_threads: r.u32("LocksAndThreads.cCurrentThreadsPhysical")?,
        recognized_threads: r.tri("LocksAndThreads.cRecognizedThreads")?,
    };
    let jit = JitCounters {
        methods_jitted: r.u32("Jit.cMethodsJitted")?,
        il_bytes_jitted: r.tri("Jit.cbILJitted")?,
        jit_failures: r.u32("Jit.cJitFailures")?,
        time_in_jit: r.u32("Jit.timeInJit")?,
        time_in_jit_base: r.u32("Jit.timeInJitBase")?,
    };

    r.section(8);
    let security = SecurityCounters {
        total_runtime_checks: r.u32("Security.cTotalRTChecks")?,
        time_authorize: r.i64("Security.timeAuthorize")?,
        link_checks: r.u32("Security.cLinkChecks")?,
        time_runtime_checks: r.u32("Security.timeRTchecks")?,
        time_runtime_checks_base: r.u32("Security.timeRTchecksBase")?,
        stack_walk_depth: r.u32("Security.stackWalkDepth")?,
    };
    r.end_section(8);
    debug_assert_eq!(r.pos, needed);

    Ok(ClrCounters {
        header: IpcHeader::default(),
        pointer_size,
        perf_block_size,
        perf_attributes,
        gc,
        contexts,
        interop,
        loading,
        exceptions,
        locks_and_threads,
        jit,
        security,
    })
}

/// Finds the runtime's block in the whole table (`IPC_NUM_BLOCKS` × 2048 bytes): the block
/// whose GC section names `pid`, else (no GC has run yet) the first usable block whose
/// process id is still 0; with `pid` `None`, the first usable block. When nothing matched and
/// a block was mid-update, the error is [`CountersError::WriterBusy`]: read again.
pub fn parse_table(table: &[u8], pid: Option<u32>) -> Result<ClrCounters, CountersError> {
    let mut first_unset = None;
    let mut reasons: Vec<String> = Vec::new();
    let mut other_pid = None;
    let mut busy = None;
    let blocks = table.len().div_ceil(IPC_BLOCK_SIZE).min(IPC_NUM_BLOCKS);
    for chunk in table.chunks(IPC_BLOCK_SIZE).take(IPC_NUM_BLOCKS) {
        match parse_block(chunk) {
            Ok(c) => match pid {
                None => return Ok(c),
                Some(p) if c.gc.process_id == u64::from(p) => return Ok(c),
                Some(_) if c.gc.process_id == 0 => {
                    first_unset.get_or_insert(c);
                }
                Some(_) => other_pid = Some(c.gc.process_id),
            },
            Err(CountersError::NeverWritten) => {}
            Err(CountersError::WriterBusy { counter }) => busy = Some(counter),
            Err(e) => {
                if reasons.len() < 3 {
                    reasons.push(e.to_string());
                }
            }
        }
    }
    if let Some(c) = first_unset {
        return Ok(c);
    }
    if let Some(counter) = busy {
        return Err(CountersError::WriterBusy { counter });
    }
    if let (Some(expected), Some(found)) = (pid, other_pid) {
        return Err(CountersError::PidMismatch { expected, found });
    }
    let reason = if reasons.is_empty() { "every block is never written (Counter 0): the process has no .NET Framework CLR loaded".to_string() } else { reasons.join("; ") };
    Err(CountersError::NoRuntimeBlock { pid, blocks, reason })
}
