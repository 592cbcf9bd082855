//! The IPC-block parser against bytes laid out by hand from the CLR's C structs
//! (`ipcheader.h`, `perfcounterdefs.h`): x86 writers pack to 4 bytes, x64 writers align
//! 8-byte fields and the GC / Loading / Security sections to 8. The offsets below are worked
//! out by hand from those structs, independently of the parser's reader.

use clrprobe_etw::ipcblock::{
    self, ClrCounters, CountersError, IPC_BLOCK_SIZE, IPC_FLAG_INITIALIZED, IPC_FLAG_USES_FLAGS, IPC_FLAG_X86,
    PERF_BLOCK_SIZE_X64, PERF_BLOCK_SIZE_X86, TriCount,
};

/// (field, x86 offset, x64 offset, width on x86, width on x64) inside PerfCounterIPCControlBlock.
const FIELDS: &[(&str, usize, usize, usize, usize)] = &[
    ("cBytes", 0, 0, 2, 2),
    ("wAttrs", 2, 2, 2, 2),
    ("gen0_collections", 4, 8, 4, 8),
    ("gen1_collections", 8, 16, 4, 8),
    ("gen2_collections", 12, 24, 4, 8),
    ("gen0_promoted_bytes", 16, 32, 4, 8),
    ("gen1_promoted_bytes", 20, 40, 4, 8),
    ("promoted_finalization_bytes", 24, 48, 4, 8),
    ("process_id", 28, 56, 4, 8),
    ("gen0_heap_size", 32, 64, 4, 8),
    ("gen1_heap_size", 36, 72, 4, 8),
    ("gen2_heap_size", 40, 80, 4, 8),
    ("total_committed_bytes", 44, 88, 4, 8),
    ("total_reserved_bytes", 48, 96, 4, 8),
    ("large_object_heap_size", 52, 104, 4, 8),
    ("survived_finalize", 56, 112, 4, 8),
    ("handles", 60, 120, 4, 8),
    ("allocated_bytes", 64, 128, 4, 8),
    ("large_allocated_bytes", 68, 136, 4, 8),
    ("induced_gcs", 72, 144, 4, 8),
    ("time_in_gc", 76, 152, 4, 4),
    ("time_in_gc_base", 80, 156, 4, 4),
    ("pinned_objects", 84, 160, 4, 8),
    ("sink_blocks", 88, 168, 4, 8),
    ("remote_calls", 92, 176, 4, 4),
    ("channels", 96, 180, 4, 4),
    ("proxies", 100, 184, 4, 4),
    ("classes", 104, 188, 4, 4),
    ("objects_allocated", 108, 192, 4, 4),
    ("contexts", 112, 196, 4, 4),
    ("ccws", 116, 200, 4, 4),
    ("stubs", 120, 204, 4, 4),
    ("marshalling", 124, 208, 4, 4),
    ("tlb_imports", 128, 212, 4, 4),
    ("tlb_exports", 132, 216, 4, 4),
    ("classes_loaded.cur", 136, 224, 4, 4),
    ("classes_loaded.total", 140, 228, 4, 4),
    ("app_domains.cur", 144, 232, 4, 4),
    ("app_domains.total", 148, 236, 4, 4),
    ("assemblies.cur", 152, 240, 4, 4),
    ("assemblies.total", 156, 244, 4, 4),
    ("time_loading", 160, 248, 8, 8),
    ("assembly_search_length", 168, 256, 4, 4),
    ("load_failures", 172, 260, 4, 4),
    ("loader_heap_size", 176, 264, 4, 8),
    ("app_domains_unloaded", 180, 272, 4, 4),
    ("thrown", 184, 280, 4, 4),
    ("filters_executed", 188, 284, 4, 4),
    ("finallys_executed", 192, 288, 4, 4),
    ("throw_to_catch_depth", 196, 292, 4, 4),
    ("contentions", 200, 296, 4, 4),
    ("queue_length.cur", 204, 300, 4, 4),
    ("queue_length.total", 208, 304, 4, 4),
    ("current_logical_threads", 212, 308, 4, 4),
    ("current_physical_threads", 216, 312, 4, 4),
    ("recognized_threads.cur", 220, 316, 4, 4),
    ("recognized_threads.total", 224, 320, 4, 4),
    ("methods_jitted", 228, 324, 4, 4),
    ("il_bytes_jitted.cur", 232, 328, 4, 4),
    ("il_bytes_jitted.total", 236, 332, 4, 4),
    ("jit_failures", 240, 336, 4, 4),
    ("time_in_jit", 244, 340, 4, 4),
    ("time_in_jit_base", 248, 344, 4, 4),
    ("total_runtime_checks", 252, 352, 4, 4),
    ("time_authorize", 256, 360, 8, 8),
    ("link_checks", 264, 368, 4, 4),
    ("time_runtime_checks", 268, 372, 4, 4),
    ("time_runtime_checks_base", 272, 376, 4, 4),
    ("stack_walk_depth", 276, 380, 4, 4),
];

const PERF_OFFSET: usize = 40;

/// A distinct value per field: index i → 1000 + i (the process id gets `pid`).
fn value(i: usize, name: &str, pid: u32) -> u64 {
    if name == "process_id" { u64::from(pid) } else { 1000 + i as u64 }
}

/// One 2048-byte control block as a runtime of the given bitness writes it.
fn block(x86: bool, pid: u32) -> Vec<u8> {
    let mut b = vec![0xEEu8; IPC_BLOCK_SIZE]; // padding garbage must not matter
    let perf_size = if x86 { PERF_BLOCK_SIZE_X86 } else { PERF_BLOCK_SIZE_X64 };
    let mut put = |off: usize, v: u64, w: usize| b[off..off + w].copy_from_slice(&v.to_le_bytes()[..w]);
    put(0, 2, 4); // Counter: even, non-zero
    put(4, 1, 4); // RuntimeId
    put(8, 0, 4);
    put(12, 0, 4);
    put(16, 4, 2); // Version
    let flags = IPC_FLAG_USES_FLAGS | IPC_FLAG_INITIALIZED | if x86 { IPC_FLAG_X86 } else { 0 };
    put(18, u64::from(flags), 2);
    put(20, (40 + perf_size) as u64, 4); // BlockSize
    put(24, 2019, 2);
    put(26, 4084, 2);
    put(28, 1, 4); // NumEntries
    put(32, PERF_OFFSET as u64, 4);
    put(36, perf_size as u64, 4);
    for (i, &(name, o86, o64, w86, w64)) in FIELDS.iter().enumerate() {
        let (o, w) = if x86 { (o86, w86) } else { (o64, w64) };
        put(PERF_OFFSET + o, value(i, name, pid), w);
    }
    b
}

fn flat(c: &ClrCounters) -> Vec<(&'static str, u64)> {
    let t = |x: TriCount| (u64::from(x.current), u64::from(x.total));
    let g = &c.gc;
    let l = &c.loading;
    let lt = &c.locks_and_threads;
    let j = &c.jit;
    let s = &c.security;
    let mut v = vec![
        ("cBytes", u64::from(c.perf_block_size)),
        ("wAttrs", u64::from(c.perf_attributes)),
        ("gen0_collections", g.gen0_collections),
        ("gen1_collections", g.gen1_collections),
        ("gen2_collections", g.gen2_collections),
        ("gen0_promoted_bytes", g.gen0_promoted_bytes),
        ("gen1_promoted_bytes", g.gen1_promoted_bytes),
        ("promoted_finalization_bytes", g.promoted_finalization_bytes),
        ("process_id", g.process_id),
        ("gen0_heap_size", g.gen0_heap_size),
        ("gen1_heap_size", g.gen1_heap_size),
        ("gen2_heap_size", g.gen2_heap_size),
        ("total_committed_bytes", g.total_committed_bytes),
        ("total_reserved_bytes", g.total_reserved_bytes),
        ("large_object_heap_size", g.large_object_heap_size),
        ("survived_finalize", g.survived_finalize),
        ("handles", g.handles),
        ("allocated_bytes", g.allocated_bytes),
        ("large_allocated_bytes", g.large_allocated_bytes),
        ("induced_gcs", g.induced_gcs),
        ("time_in_gc", u64::from(g.time_in_gc)),
        ("time_in_gc_base", u64::from(g.time_in_gc_base)),
        ("pinned_objects", g.pinned_objects),
        ("sink_blocks", g.sink_blocks),
        ("remote_calls", u64::from(c.contexts.remote_calls)),
        ("channels", u64::from(c.contexts.channels)),
        ("proxies", u64::from(c.contexts.proxies)),
        ("classes", u64::from(c.contexts.classes)),
        ("objects_allocated", u64::from(c.contexts.objects_allocated)),
        ("contexts", u64::from(c.contexts.contexts)),
        ("ccws", u64::from(c.interop.ccws)),
        ("stubs", u64::from(c.interop.stubs)),
        ("marshalling", u64::from(c.interop.marshalling)),
        ("tlb_imports", u64::from(c.interop.tlb_imports)),
        ("tlb_exports", u64::from(c.interop.tlb_exports)),
    ];
    for (n, x) in [("classes_loaded", l.classes_loaded), ("app_domains", l.app_domains), ("assemblies", l.assemblies)] {
        let (cur, tot) = t(x);
        v.push((leak(format!("{n}.cur")), cur));
        v.push((leak(format!("{n}.total")), tot));
    }
    v.extend([
        ("time_loading", l.time_loading as u64),
        ("assembly_search_length", u64::from(l.assembly_search_length)),
        ("load_failures", u64::from(l.load_failures)),
        ("loader_heap_size", l.loader_heap_size),
        ("app_domains_unloaded", u64::from(l.app_domains_unloaded)),
        ("thrown", u64::from(c.exceptions.thrown)),
        ("filters_executed", u64::from(c.exceptions.filters_executed)),
        ("finallys_executed", u64::from(c.exceptions.finallys_executed)),
        ("throw_to_catch_depth", u64::from(c.exceptions.throw_to_catch_depth)),
        ("contentions", u64::from(lt.contentions)),
        ("queue_length.cur", t(lt.queue_length).0),
        ("queue_length.total", t(lt.queue_length).1),
        ("current_logical_threads", u64::from(lt.current_logical_threads)),
        ("current_physical_threads", u64::from(lt.current_physical_threads)),
        ("recognized_threads.cur", t(lt.recognized_threads).0),
        ("recognized_threads.total", t(lt.recognized_threads).1),
        ("methods_jitted", u64::from(j.methods_jitted)),
        ("il_bytes_jitted.cur", t(j.il_bytes_jitted).0),
        ("il_bytes_jitted.total", t(j.il_bytes_jitted).1),
        ("jit_failures", u64::from(j.jit_failures)),
        ("time_in_jit", u64::from(j.time_in_jit)),
        ("time_in_jit_base", u64::from(j.time_in_jit_base)),
        ("total_runtime_checks", u64::from(s.total_runtime_checks)),
        ("time_authorize", s.time_authorize as u64),
        ("link_checks", u64::from(s.link_checks)),
        ("time_runtime_checks", u64::from(s.time_runtime_checks)),
        ("time_runtime_checks_base", u64::from(s.time_runtime_checks_base)),
        ("stack_walk_depth", u64::from(s.stack_walk_depth)),
    ]);
    v
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

#[test]
fn every_field_of_x86_and_x64_blocks_reads_from_its_documented_offset() {
    assert_eq!(FIELDS.len(), 69);
    for x86 in [true, false] {
        let b = block(x86, 4242);
        let c = ipcblock::parse_block(&b).unwrap_or_else(|e| panic!("x86={x86}: {e}"));
        assert_eq!(c.pointer_size, if x86 { 4 } else { 8 });
        assert_eq!((c.header.version, c.header.build_year, c.header.perf_offset), (4, 2019, 40));
        let got = flat(&c);
        assert_eq!(got.len(), FIELDS.len());
        for (i, ((name, v), &(fname, ..))) in got.iter().zip(FIELDS).enumerate() {
            assert_eq!(*name, fname, "field order");
            assert_eq!(*v, value(i, fname, 4242), "x86={x86}: field {name}");
        }
    }
}

#[test]
fn the_table_is_searched_for_the_process_block() {
    let mut table = vec![0u8; IPC_BLOCK_SIZE * 32];
    table[..IPC_BLOCK_SIZE].copy_from_slice(&block(false, 100));
    table[IPC_BLOCK_SIZE..2 * IPC_BLOCK_SIZE].copy_from_slice(&block(true, 200));
    assert_eq!(ipcblock::parse_table(&table, Some(200)).expect("found").pointer_size, 4);
    assert_eq!(ipcblock::parse_table(&table, Some(100)).expect("found").gc.process_id, 100);
    assert_eq!(ipcblock::parse_table(&table, None).expect("first").gc.process_id, 100);
    assert!(matches!(ipcblock::parse_table(&table, Some(300)), Err(CountersError::PidMismatch { expected: 300, .. })));
    // Before the first GC the process id is 0: that block is taken for any pid.
    table[..IPC_BLOCK_SIZE].copy_from_slice(&block(false, 0));
    assert_eq!(ipcblock::parse_table(&table, Some(300)).expect("unset pid").gc.process_id, 0);
    // A block mid-update (odd counter) and nothing else usable: read again.
    let mut busy = vec![0u8; IPC_BLOCK_SIZE * 32];
    busy[..IPC_BLOCK_SIZE].copy_from_slice(&block(false, 7));
    busy[0] = 5;
    assert!(matches!(ipcblock::parse_table(&busy, Some(7)), Err(CountersError::WriterBusy { counter: 5 })));
    let empty = vec![0u8; IPC_BLOCK_SIZE * 32];
    let e = ipcblock::parse_table(&empty, Some(1)).expect_err("nothing written");
    assert!(e.to_string().contains("never written"), "{e}");
}

#[test]
fn bad_blocks_are_errors_naming_the_cause() {
    let good = block(false, 1);
    let mut b = good.clone();
    b[0] = 3; // odd counter: writer mid-update
    assert!(matches!(ipcblock::parse_block(&b), Err(CountersError::WriterBusy { counter: 3 })));
    let mut b = good.clone();
    b[18] = IPC_FLAG_USES_FLAGS as u8; // not initialized
    assert!(matches!(ipcblock::parse_block(&b), Err(CountersError::NotInitialized { .. })));
    let mut b = good.clone();
    b[32..36].copy_from_slice(&2000u32.to_le_bytes()); // section beyond the block
    assert!(matches!(ipcblock::parse_block(&b), Err(CountersError::BadPerfEntry { offset: 2000, .. })));
    let mut b = good.clone();
    b[36..40].copy_from_slice(&100u32.to_le_bytes()); // section too small for x64
    assert!(matches!(ipcblock::parse_block(&b), Err(CountersError::PerfSectionTooSmall { needed: 384, .. })));
    let mut b = good.clone();
    b[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(ipcblock::parse_block(&b), Err(CountersError::NoPerfSection { .. })));
    // Every truncation of the header and of the counter section is an error, never a panic.
    for n in 0..(PERF_OFFSET + PERF_BLOCK_SIZE_X64) {
        assert!(ipcblock::parse_block(&good[..n]).is_err(), "{n} bytes parsed");
    }
    let e = ipcblock::parse_header(&good[..30]).expect_err("short header");
    assert!(e.to_string().contains("IPCHeader.NumEntries"), "{e}");
    assert!(matches!(ipcblock::parse_perf(&good[40..], 6), Err(CountersError::BadPointerSize(6))));
}
