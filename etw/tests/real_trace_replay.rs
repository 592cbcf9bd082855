//! Real data: every runtime and rundown event of a real .NET Core 3.0 Windows x64 recording
//! (shared/testdata/nettrace, read with the project's NetTrace reader) replayed twice — as
//! EventPipe delivered it, and as ETW would (provider GUID, stack as a following ClrStackWalk
//! event) — must give equal profiles; totals are checked against TraceEvent's baseline counts.

mod common;


use clrprobe_etw::stackwalk::CorrelatorConfig;
use clrprobe_etw::{Collector, RecordKinds};
use clrprobe_eventpipe::nettrace::NetTraceReader;
use clrprobe_pipeline::Kinds;
use clrprobe_profile::kinds;
use common::{Ev, PID, canonical, eventpipe_profile, etw_records, total};

const TRACE: &str = "perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace";

fn trace_bytes() -> Vec<u8> {
    clrprobe_tests::corpus::read(TRACE)
}

fn events() -> Vec<Ev> {
    let bytes = trace_bytes();
    let mut reader = NetTraceReader::new(&bytes[..]).expect("NetTrace header");
    let mut out = Vec::new();
    while let Some(e) = reader.next_event().expect("reader") {
        let raw = e.raw_event();
        let rundown = raw.provider == clr_events::providers::RUNDOWN;
        if raw.provider != clr_events::providers::RUNTIME && !rundown {
            continue;
        }
        assert_eq!(raw.pointer_size, 8);
        out.push(Ev {
            rundown,
            id: raw.event_id,
            version: raw.version,
            tid: u32::try_from(e.thread_id()).expect("32-bit thread id"),
            // ETW timestamps are 100 ns units; both paths get the same rounded time.
            time: e.time_ns().max(0) / 100,
            payload: raw.payload.to_vec(),
            stack: e.stack().to_vec(),
        });
    }
    out
}

#[test]
fn a_real_windows_recording_gives_the_same_profile_through_etw() {
    let events = events();
    assert!(events.len() > 35_000, "only {} runtime events", events.len());
    let (ep, ep_report) = eventpipe_profile(&events, 8, Kinds::ALL);

    let mut c = Collector::new(RecordKinds { cpu: false, events: Kinds::ALL }, Some(PID), CorrelatorConfig::default());
    for r in etw_records(&events, 8) {
        c.push(r);
    }
    let (etw, etw_report, stats) = c.finish().expect("profile");
    assert_eq!(stats.decode_errors, 0);
    assert_eq!(stats.stacks.orphan_stacks, 0);
    assert_eq!(stats.stacks.bad_stacks, 0);

    // TraceEvent's baseline: 35,458 GC/AllocationTick (V3: one object each), 8 Contention/Stop.
    assert_eq!(total(&etw, kinds::ALLOC_COUNT), 35_458);
    assert_eq!(total(&etw, kinds::CONTENTION_COUNT), 8);
    assert!(total(&etw, kinds::ALLOC_BYTES) > 35_458 * 100_000);
    assert_eq!(canonical(&ep), canonical(&etw), "profiles differ");
    assert_eq!(ep_report.allocations, etw_report.allocations);
    assert_eq!(ep_report.contention, etw_report.contention);
    // The recording's MethodLoadVerbose events name some of the stack frames.
    let named = etw.frames().iter().filter(|f| f.kind == clrprobe_profile::FrameKind::Jit).count();
    assert!(named > 0, "no JIT frame named from MethodLoadVerbose");
}
