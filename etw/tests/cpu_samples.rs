//! Kernel CPU samples through the collector: SampledProfile records followed by their
//! StackWalk records (kernel part, then user part), named with image loads (native, kernel)
//! and the CLR's method loads (managed), filtered by process.

mod common;

use clrprobe_etw::stackwalk::CorrelatorConfig;
use clrprobe_etw::{Collector, EtwRecord, RecordKinds, kernel, providers};
use clrprobe_pipeline::Kinds;
use clrprobe_profile::{FrameKind, kinds};
use common::{Payload, canonical, total};

const APP: u32 = 77;
const OTHER: u32 = 88;
const NTDLL: u64 = 0x7ff8_1000_0000;
const NTOS: u64 = 0xffff_f803_0000_0000;
const JIT: u64 = 0x7ff7_0000_1000;

fn rec(provider: clr_events::Guid, id: u16, opcode: u8, pid: u32, tid: u32, ts: i64, payload: Vec<u8>) -> EtwRecord {
    EtwRecord { provider, event_id: id, opcode, version: 2, pid, tid, timestamp: ts, payload, pointer_size: 8, stack: None }
}

fn image(pid: u32, base: u64, size: u64, path: &str) -> EtwRecord {
    let p = Payload::new(8).u64(base).u64(size).u32(pid).u32(0).u32(0).u32(0).u64(base).u32(0).u32(0).u32(0).u32(0).str(path);
    rec(providers::KERNEL_IMAGE, 0, kernel::OPCODE_IMAGE_DC_START, pid, 0, 1, p.buf)
}

fn sample(tid: u32, ts: i64, ip: u64) -> EtwRecord {
    let p = Payload::new(8).u64(ip).u32(tid).u16(1).u16(0x40);
    rec(providers::KERNEL_PERF_INFO, 0, kernel::OPCODE_SAMPLED_PROFILE, u32::MAX, u32::MAX, ts, p.buf)
}

fn walk(pid: u32, tid: u32, ts: i64, frames: &[u64]) -> EtwRecord {
    let mut p = Payload::new(8).u64(ts as u64).u32(pid).u32(tid);
    for &f in frames {
        p = p.u64(f);
    }
    rec(providers::KERNEL_STACK_WALK, 0, kernel::OPCODE_STACK_WALK, pid, tid, ts + 2, p.buf)
}

fn method_load(pid: u32) -> EtwRecord {
    let p = Payload::new(8).u64(1).u64(2).u64(JIT).u32(0x100).u32(0x0600_0001).u32(8).str("App.Program").str("Spin").str("void ()").u16(3).u64(0);
    let mut r = rec(providers::RUNTIME, 143, 0, pid, 5, 3, p.buf);
    r.version = 2;
    r
}

fn records() -> Vec<EtwRecord> {
    vec![
        image(APP, NTDLL, 0x20_0000, r"\Device\HarddiskVolume3\Windows\System32\ntdll.dll"),
        image(0, NTOS, 0x100_0000, r"\SystemRoot\system32\ntoskrnl.exe"),
        method_load(APP),
        // 3 samples in managed code under ntdll's thread start, one of them in the kernel.
        sample(5, 100, JIT + 0x10),
        walk(APP, 5, 100, &[JIT + 0x10, NTDLL + 0x500]),
        sample(5, 10_100, NTOS + 0x40),
        walk(APP, 5, 10_100, &[NTOS + 0x40]),              // kernel part
        walk(APP, 5, 10_100, &[JIT + 0x20, NTDLL + 0x500]), // user part
        sample(5, 20_100, JIT + 0x11),
        walk(APP, 5, 20_100, &[JIT + 0x11, NTDLL + 0x500]),
        // Another process's sample, and one whose stack never came (process unknown).
        sample(9, 20_200, 0x1000),
        walk(OTHER, 9, 20_200, &[0x1000]),
        sample(6, 30_000, 0x2000),
    ]
}

fn run(pid: Option<u32>) -> (clrprobe_profile::Profile, clrprobe_etw::CollectorStats) {
    let kinds = RecordKinds { cpu: true, events: Kinds { alloc: false, exceptions: false, contention: false } };
    let mut c = Collector::new(kinds, pid, CorrelatorConfig::default());
    for r in records() {
        c.push(r);
    }
    let (p, _, stats) = c.finish().expect("profile");
    (p, stats)
}

#[test]
fn samples_get_their_stacks_and_names() {
    let (p, stats) = run(Some(APP));
    assert_eq!(stats.images, 2);
    assert_eq!(stats.samples_without_process, 1);
    assert_eq!(stats.stacks.orphan_stacks, 0);
    assert_eq!(total(&p, kinds::CPU), 3, "other process filtered out");
    assert_eq!(p.period().map(|x| x.value), Some(1_000_000));
    // Wanted events from the method load at 3 to the last sample at 20_100 (100 ns units).
    assert_eq!(p.duration_ns(), 2_009_700);
    let lines = canonical(&p).join("\n");
    // Root first: ntdll (return address looked up minus one), then the JIT-ed method.
    assert!(lines.contains("cpu/samples=2 :: ntdll.dll+0x4ff|ntdll.dll|native|0x0|[] > App.Program::Spin||jit"), "{lines}");
    assert!(
        lines.contains("cpu/samples=1 :: ntdll.dll+0x4ff|ntdll.dll|native|0x0|[] > App.Program::Spin||jit|0x0|[] > ntoskrnl.exe+0x40|ntoskrnl.exe|kernel"),
        "kernel part is the leaf: {lines}"
    );
    assert!(p.frames().iter().any(|f| f.kind == FrameKind::Kernel));
}

#[test]
fn all_processes_keeps_every_known_process() {
    let (p, _) = run(None);
    assert_eq!(total(&p, kinds::CPU), 4);
    let lines = canonical(&p).join("\n");
    assert!(lines.contains("pid: Some(88)") && lines.contains("0x1000||unknown|0x1000"), "{lines}");
}
