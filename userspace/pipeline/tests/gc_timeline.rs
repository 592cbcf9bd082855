//! The GC timeline from a real recording (.NET Core 3.0, Windows x64: 478 GCs, checked against
//! TraceEvent's baseline in shared/testdata/nettrace/baselines).

use clr_events::{ClrEvent, decode, providers};
use clrprobe_eventpipe::nettrace::NetTraceReader;
use clrprobe_pipeline::{EventInput, EventProfiles, Kinds};

use clrprobe_tests::corpus::read as trace;

fn profiles_of(name: &str) -> EventProfiles {
    let bytes = trace(name);
    let mut reader = NetTraceReader::new(&bytes[..]).expect("header");
    let ps = reader.trace_info().pointer_size as u8;
    let mut p = EventProfiles::new(Kinds::ALL);
    while let Some(e) = reader.next_event().expect("stream") {
        let mut raw = e.raw_event();
        if raw.provider != providers::RUNTIME {
            continue;
        }
        raw.pointer_size = ps;
        let Ok(ev) = decode(&raw) else { continue };
        if ev == ClrEvent::Unknown {
            continue;
        }
        p.on_event(EventInput { pid: 1, tid: e.thread_id(), time_ns: e.time_ns().max(0) as u64, event: &ev, stack: e.stack() });
    }
    p
}

#[test]
fn core30_timeline_has_every_gc_with_history_heap_stats_and_pause() {
    let p = profiles_of("perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace");
    let r = p.report().gc;
    // Baseline: 478 GC/Start, GC/Stop, GC/HeapStats, GC/PerHeapHistory, GC/GlobalHeapHistory.
    assert_eq!(r.collections, 478);
    assert_eq!(r.per_generation.iter().sum::<u64>(), 478);
    let first = &r.timeline[0];
    // Baseline's first GC/Start: Count 1, AllocSmall, Depth 0, NonConcurrentGC, TID 12272.
    assert_eq!((first.index, first.generation, first.reason.as_str(), first.gc_type.as_str(), first.tid), (1, 0, "AllocSmall", "NonConcurrentGC", 12272));
    // Its HeapStats: TotalHeapSize 0x3BEA8, TotalPromoted 0x2AD90; PerHeapHistory Gen0 SizeBefore 3,154,608.
    assert_eq!(first.heap_stats_size, Some(0x3BEA8));
    assert_eq!(first.promoted_bytes, Some(0x2AD90));
    assert!(first.heap_before.unwrap() >= 3_154_608);
    assert_eq!(first.heaps, 1);
    assert_eq!(first.global_condemned_generation, Some(0));
    // GC/Stop 20.0 ms after GC/Start (5475.9763 - 5455.9407 ms).
    let took = first.end_ns.unwrap() - first.start_ns;
    assert!((took as i64 - 20_035_600).abs() < 2_000, "GC 1 took {took} ns");
    for g in &r.timeline {
        assert!(g.end_ns.is_some() && g.heap_stats_size.is_some() && g.heaps == 1, "GC {} incomplete: {g:?}", g.index);
        assert_eq!(g.global_condemned_generation, Some(g.generation), "GC {}: GlobalHeapHistory vs GCStart depth", g.index);
        assert_eq!(g.final_generation.map(u32::from), Some(g.generation), "GC {}: condemned generation vs depth", g.index);
        // Each blocking GC lies inside its suspension.
        assert_eq!(g.pauses.len(), 1, "GC {} pauses {:?}", g.index, g.pauses);
        let (s, e) = g.pauses[0];
        assert!(s <= g.start_ns && g.end_ns.unwrap() <= e, "GC {} outside its pause: {g:?}", g.index);
    }
    assert!(r.pause_max_ms >= r.pause_p99_ms && r.pause_p99_ms > 0.0);
    assert!(r.paused_percent > 0.0 && r.paused_percent < 100.0);
    let text = r.text(1, 5);
    assert!(text.contains("478 collections") && text.contains("... 473 more"), "{text}");
}
