//! The "Done when": ETW-shaped records (payload bytes laid out as the manifest says,
//! for .NET Framework 4.8 and .NET 8 event versions) go through the ETW adapter, stack
//! correlation and collector, and the same events as EventPipe delivers them (provider by
//! name, stack on the event) go through the pipeline directly; the two profiles and reports
//! must be equal, and must hold the expected values.

mod common;

use clrprobe_etw::stackwalk::CorrelatorConfig;
use clrprobe_etw::{Collector, EtwRecord, RecordKinds, kernel};
use clrprobe_pipeline::Kinds;
use clrprobe_profile::kinds;
use common::{Ev, PID, Payload, canonical, eventpipe_profile, etw_records, total};

#[derive(Clone, Copy, Debug)]
enum Flavor {
    /// .NET Framework 4.8 (ClrEtwAll 2016 manifest): MethodLoadVerbose_V1, rundown
    /// MethodDCEndVerbose_V1, GCAllocationTick_V2/V3, ExceptionThrown_V1, ContentionStart_V1,
    /// ContentionStop (V0, no duration).
    Framework48,
    /// .NET 8: MethodLoadVerbose_V2, MethodDCEndVerbose_V2, GCAllocationTick_V4,
    /// ExceptionThrown_V1, ContentionStart_V2, ContentionStop_V1 (DurationNs).
    Net8,
}

/// Code addresses: above 4 GiB for x64, below for x86 (stack walks carry pointer-sized frames).
fn base(ps: u8) -> u64 {
    if ps == 4 { 0x0100_0000 } else { 0x7ff0_0000_0000 }
}

fn method(ps: u8, version: u8, start: u64, size: u32, ns: &str, name: &str, flags: u32) -> Vec<u8> {
    let mut p = Payload::new(ps)
        .u64(start ^ 0xABC) // MethodID
        .u64(0x5000) // ModuleID
        .u64(start)
        .u32(size)
        .u32(0x0600_0001)
        .u32(flags)
        .str(ns)
        .str(name)
        .str("void  ()");
    if version >= 1 {
        p = p.u16(3);
    }
    if version >= 2 {
        p = p.u64(0);
    }
    p.buf
}

fn alloc(ps: u8, version: u8, amount: u64, kind: u32, ty: &str, size: u64) -> Vec<u8> {
    let mut p = Payload::new(ps).u32(amount as u32).u32(kind).u16(3).u64(amount).ptr(0x7ffe_a911_ea28).str(ty).u32(0);
    if version >= 3 {
        p = p.ptr(0x19a_0001_7fe8);
    }
    if version >= 4 {
        p = p.u64(size);
    }
    p.buf
}

fn exception(ps: u8, ty: &str, msg: &str, eip: u64) -> Vec<u8> {
    Payload::new(ps).str(ty).str(msg).ptr(eip).u32(0x8013_1509).u16(0x10).u16(3).buf
}

fn contention_start(ps: u8, version: u8, owner: u64) -> Vec<u8> {
    let p = Payload::new(ps).u8(0).u16(3);
    if version >= 2 { p.ptr(0x1234_5678).ptr(0x9abc_def0).u64(owner).buf } else { p.buf }
}

fn contention_stop(ps: u8, version: u8, duration_ns: f64) -> Vec<u8> {
    let p = Payload::new(ps).u8(0).u16(3);
    if version >= 1 { p.f64(duration_ns).buf } else { p.buf }
}

#[allow(non_snake_case)]
fn scenario(flavor: Flavor, ps: u8) -> Vec<Ev> {
    let (mv, av, sv, stopv) = match flavor {
        Flavor::Framework48 => (1, 3, 1, 0),
        Flavor::Net8 => (2, 4, 2, 1),
    };
    let (MAIN, WORK, CACHE_GET) = (base(ps) + 0x1_1000, base(ps) + 0x1_2000, base(ps) + 0x2_0000);
    let ev = |rundown, id, version, tid, time, payload, stack: &[u64]| Ev { rundown, id, version, tid, time, payload, stack: stack.to_vec() };
    let in_main = [WORK + 0x10, MAIN + 0x50]; // leaf first
    let in_cache = [CACHE_GET + 0x8, WORK + 0x20, MAIN + 0x60];
    let mut v = vec![
        ev(false, 143, mv, 11, 1_000, method(ps, mv, MAIN, 0x200, "App.Program", "Main", 0x8), &[]),
        ev(false, 143, mv, 11, 1_010, method(ps, mv, WORK, 0x100, "App.Program", "Work", 0x8 | (4 << 7)), &[]),
        ev(false, 10, av, 11, 2_000, alloc(ps, av, 104_096, 0, "System.Object[]", 48), &in_main),
        ev(false, 10, av, 12, 2_005, alloc(ps, av, 100_000, 1, "System.Byte[]", 100_000), &in_cache),
        ev(false, 10, av, 11, 2_010, alloc(ps, av, 102_400, 0, "System.Object[]", 48), &in_main),
        ev(false, 80, 1, 12, 3_000, exception(ps, "System.InvalidOperationException", "boom", WORK + 0x30), &in_main),
        ev(false, 80, 1, 11, 3_001, exception(ps, "System.InvalidOperationException", "boom", WORK + 0x30), &in_main),
        ev(false, 80, 1, 12, 3_002, exception(ps, "System.IO.IOException", "disk", CACHE_GET), &in_cache),
        ev(false, 81, sv, 11, 4_000, contention_start(ps, sv, 12), &in_cache),
        ev(false, 81, sv, 12, 4_100, contention_start(ps, sv, 11), &in_main),
        ev(false, 91, stopv, 11, 24_000, contention_stop(ps, stopv, 1_999_000.0), &[]),
        ev(false, 91, stopv, 12, 34_100, contention_stop(ps, stopv, 3_000_000.0), &[]),
        ev(false, 80, 1, 11, 40_000, exception(ps, "System.InvalidOperationException", "unnamed frame", 0x1234), &[0x1234, MAIN + 0x70]),
        // End rundown: methods alive at the end, including one JIT-ed before the session.
        ev(true, 144, mv, 11, 50_000, method(ps, mv, MAIN, 0x200, "App.Program", "Main", 0x8), &[]),
        ev(true, 144, mv, 11, 50_001, method(ps, mv, CACHE_GET, 0x40, "App.Cache", "Get", 0), &[]),
    ];
    if let Flavor::Framework48 = flavor {
        // Framework runtimes before 4.5.1 style: one AllocationTick_V2 (no Address).
        v.push(ev(false, 10, 2, 12, 45_000, alloc(ps, 2, 100_500, 0, "System.String", 0), &in_main));
    }
    v
}

/// Moves each ClrStackWalk after the next record when that one is another thread's event, as
/// a merged stream from several threads can deliver them.
fn interleave(mut recs: Vec<EtwRecord>) -> Vec<EtwRecord> {
    let mut i = 0;
    while i + 1 < recs.len() {
        let is_walk = |r: &EtwRecord| r.event_id == kernel::CLR_STACK_WALK_ID && r.opcode == 82;
        if is_walk(&recs[i]) && !is_walk(&recs[i + 1]) && recs[i + 1].tid != recs[i].tid {
            recs.swap(i, i + 1);
            i += 2;
        } else {
            i += 1;
        }
    }
    recs
}

fn etw_profile(records: Vec<EtwRecord>) -> (clrprobe_profile::Profile, clrprobe_pipeline::EventReport, clrprobe_etw::CollectorStats) {
    let mut c = Collector::new(RecordKinds { cpu: false, events: Kinds::ALL }, Some(PID), CorrelatorConfig::default());
    for r in records {
        c.push(r);
    }
    c.finish().expect("profile builds")
}

fn check(flavor: Flavor, ps: u8, interleaved: bool) {
    let events = scenario(flavor, ps);
    let (ep, ep_report) = eventpipe_profile(&events, ps, Kinds::ALL);
    let mut recs = etw_records(&events, ps);
    if interleaved {
        recs = interleave(recs);
    }
    let (etw, etw_report, stats) = etw_profile(recs);
    let ctx = format!("{flavor:?} ps={ps} interleaved={interleaved}");

    assert_eq!(stats.decode_errors, 0, "{ctx}");
    assert_eq!(stats.stacks.orphan_stacks, 0, "{ctx}: every ClrStackWalk found its event");
    let (a, b) = (canonical(&ep), canonical(&etw));
    assert_eq!(a, b, "{ctx}: profiles differ");
    assert_eq!(ep.sample_types(), etw.sample_types(), "{ctx}");
    assert_eq!(ep_report.exceptions, etw_report.exceptions, "{ctx}");
    assert_eq!(ep_report.exceptions_by_type, etw_report.exceptions_by_type, "{ctx}");
    assert_eq!(ep_report.contention, etw_report.contention, "{ctx}");
    assert_eq!(ep_report.allocations, etw_report.allocations, "{ctx}");

    // And the profile is the expected one, not merely the same.
    assert_eq!(total(&etw, kinds::EXCEPTIONS), 4, "{ctx}");
    assert_eq!(total(&etw, kinds::CONTENTION_COUNT), 2, "{ctx}");
    let expected_wait = match flavor {
        Flavor::Framework48 => 2_000_000 + 3_000_000, // event time differences (no DurationNs)
        Flavor::Net8 => 1_999_000 + 3_000_000,
    };
    assert_eq!(total(&etw, kinds::CONTENTION_NS), expected_wait, "{ctx}");
    let alloc_expected = 104_096 + 100_000 + 102_400 + if let Flavor::Framework48 = flavor { 100_500 } else { 0 };
    assert_eq!(total(&etw, kinds::ALLOC_BYTES), alloc_expected, "{ctx}");
    let text = b.join("\n");
    for needle in [
        "App.Program::Main||jit",
        "App.Program::Work||jit",
        "App.Cache::Get||r2r", // from the rundown only, not JIT-ed (flags 0)
        "System.Object[]||synthetic",
        "System.InvalidOperationException||synthetic",
        "0x1234||unknown|0x1234",
        "exception.message\", \"boom\"",
        "heap\", \"LOH\"",
    ] {
        assert!(text.contains(needle), "{ctx}: no `{needle}` in\n{text}");
    }
    if let Flavor::Net8 = flavor {
        assert!(text.contains("lock.owner"), "{ctx}: ContentionStart_V2 names the owner");
    }
    // Stacks are root first: Main, then Work, then the allocated type.
    assert!(text.contains("App.Program::Main||jit|0x0|[] > App.Program::Work||jit|0x0|[] > System.Object[]"), "{ctx}:\n{text}");
}

#[test]
fn framework48_x64_etw_equals_eventpipe() {
    check(Flavor::Framework48, 8, false);
}

#[test]
fn framework48_x86_etw_equals_eventpipe() {
    check(Flavor::Framework48, 4, false);
}

#[test]
fn net8_etw_equals_eventpipe() {
    check(Flavor::Net8, 8, false);
}

#[test]
fn interleaved_stack_walks_still_equal() {
    check(Flavor::Framework48, 8, true);
    check(Flavor::Net8, 8, true);
}

#[test]
fn other_processes_are_filtered_out_and_corrupt_payloads_counted() {
    let events = scenario(Flavor::Net8, 8);
    let mut recs = etw_records(&events, 8);
    for r in recs.iter_mut().take(4) {
        r.pid = 999;
    }
    let mut bad = recs.iter().find(|r| r.event_id == 80 && r.pid == PID).expect("an exception").clone();
    bad.payload.truncate(3);
    recs.push(bad);
    let (p, _, stats) = etw_profile(recs);
    assert_eq!(stats.decode_errors, 1);
    assert!(canonical(&p).iter().all(|l| l.contains("pid: Some(4321)")));
}
