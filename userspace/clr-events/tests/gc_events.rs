//! GC event decoders against payloads built field by field from the manifest templates.

mod common;

use clr_events::ClrEvent;
use clr_events::gc_enums::{CondemnCondition, GcReason, GcType, SuspendReason};
use clr_events::ids::runtime as id;
use clr_events::providers::RUNTIME;
use common::{Payload, check_event};

#[test]
fn gc_start_v0_v1_v2() {
    let p = Payload::new(8).u32(7).u32(1);
    check_event(RUNTIME, id::GC_START, 0, &p, "GCStart", |ev| {
        let ClrEvent::GcStart(s) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (s.count, s.reason, s.depth, s.gc_type),
            (7, GcReason::Induced, None, None)
        );
    });
    let p = Payload::new(8).u32(12).u32(2).u32(4).u32(1).u16(3);
    check_event(RUNTIME, id::GC_START, 1, &p, "GCStart_V1", |ev| {
        let ClrEvent::GcStart(s) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(s.count, 12);
        assert_eq!(s.depth, Some(2));
        assert_eq!(s.reason, GcReason::AllocLarge);
        assert_eq!(s.gc_type, Some(GcType::Background));
        assert_eq!(s.clr_instance_id, Some(3));
        assert_eq!(s.client_sequence_number, None);
    });
    let p = Payload::new(8)
        .u32(1)
        .u32(0)
        .u32(0)
        .u32(0)
        .u16(3)
        .u64(0x1122_3344_5566_7788);
    assert_eq!(p.buf.len(), 26, "GCStart_V2 is 26 bytes per spec");
    check_event(RUNTIME, id::GC_START, 2, &p, "GCStart_V2", |ev| {
        let ClrEvent::GcStart(s) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(s.reason.name(), "AllocSmall");
        assert_eq!(s.gc_type, Some(GcType::NonConcurrent));
        assert_eq!(s.client_sequence_number, Some(0x1122_3344_5566_7788));
    });
    // A future version is read with the newest known layout.
    check_event(RUNTIME, id::GC_START, 3, &p, "GCStart_V2", |ev| {
        assert!(matches!(ev, ClrEvent::GcStart(s) if s.client_sequence_number.is_some()));
    });
}

#[test]
fn gc_end_v0_v1() {
    let p = Payload::new(8).u32(5).u16(2);
    check_event(RUNTIME, id::GC_END, 0, &p, "GCEnd", |ev| {
        let ClrEvent::GcEnd(e) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!((e.count, e.depth, e.clr_instance_id), (5, 2, None));
    });
    let p = Payload::new(8).u32(478).u32(1).u16(3);
    assert_eq!(p.buf.len(), 10);
    check_event(RUNTIME, id::GC_END, 1, &p, "GCEnd_V1", |ev| {
        let ClrEvent::GcEnd(e) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!((e.count, e.depth, e.clr_instance_id), (478, 1, Some(3)));
    });
}

fn heap_stats_v1(p: Payload) -> Payload {
    // Values of the objver4 baseline's HeapStats example.
    p.u64(0x18)
        .u64(0x2AD90)
        .u64(0x331C8)
        .u64(0)
        .u64(0x18)
        .u64(0)
        .u64(0x8CB0)
        .u64(0)
        .u64(0)
        .u64(0)
        .u32(2)
        .u32(14)
        .u32(55)
}

#[test]
fn gc_heap_stats_v0_v1_v2() {
    let p = heap_stats_v1(Payload::new(8));
    check_event(RUNTIME, id::GC_HEAP_STATS, 0, &p, "GCHeapStats", |ev| {
        let ClrEvent::GcHeapStats(h) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(h.clr_instance_id, None);
        assert_eq!(h.gc_handle_count, 55);
    });
    let p = heap_stats_v1(Payload::new(8)).u16(3);
    assert_eq!(p.buf.len(), 94);
    check_event(RUNTIME, id::GC_HEAP_STATS, 1, &p, "GCHeapStats_V1", |ev| {
        let ClrEvent::GcHeapStats(h) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(h.generation_size, [0x18, 0x331C8, 0x18, 0x8CB0]);
        assert_eq!(h.total_promoted_size, [0x2AD90, 0, 0, 0]);
        assert_eq!(
            (h.pinned_object_count, h.sink_block_count, h.gc_handle_count),
            (2, 14, 55)
        );
        assert_eq!(h.clr_instance_id, Some(3));
        assert_eq!(h.poh_size, None);
        assert_eq!(h.total_heap_size(), 0x3BEA8, "baseline TotalHeapSize");
    });
    let p = heap_stats_v1(Payload::new(8)).u16(3).u64(0x1000).u64(0x20);
    assert_eq!(p.buf.len(), 110);
    check_event(RUNTIME, id::GC_HEAP_STATS, 2, &p, "GCHeapStats_V2", |ev| {
        let ClrEvent::GcHeapStats(h) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (h.poh_size, h.poh_promoted_size),
            (Some(0x1000), Some(0x20))
        );
        assert_eq!(h.total_heap_size(), 0x3BEA8 + 0x1000);
    });
}

#[test]
fn suspend_and_restart() {
    let p = Payload::new(8).u16(1);
    check_event(
        RUNTIME,
        id::GC_SUSPEND_EE_BEGIN,
        0,
        &p,
        "GCSuspendEEBegin",
        |ev| {
            let ClrEvent::GcSuspendEeBegin(s) = ev else {
                panic!("{ev:?}")
            };
            assert_eq!((s.reason, s.count), (SuspendReason::ForGc, None));
        },
    );
    let p = Payload::new(8).u32(0).u32(0xFFFF_FFFF).u16(3);
    check_event(
        RUNTIME,
        id::GC_SUSPEND_EE_BEGIN,
        1,
        &p,
        "GCSuspendEEBegin_V1",
        |ev| {
            let ClrEvent::GcSuspendEeBegin(s) = ev else {
                panic!("{ev:?}")
            };
            assert_eq!(s.reason, SuspendReason::SuspendOther);
            assert_eq!(s.reason.name(), "SuspendOther");
            assert_eq!(s.count, Some(u32::MAX));
            assert_eq!(s.clr_instance_id, Some(3));
        },
    );
    let p = Payload::new(8).u16(9);
    for (event_id, layout) in [
        (id::GC_SUSPEND_EE_END, "GCSuspendEEEnd"),
        (id::GC_RESTART_EE_BEGIN, "GCRestartEEBegin"),
        (id::GC_RESTART_EE_END, "GCRestartEEEnd"),
    ] {
        check_event(RUNTIME, event_id, 1, &p, layout, |ev| match ev {
            ClrEvent::GcSuspendEeEnd { clr_instance_id }
            | ClrEvent::GcRestartEeBegin { clr_instance_id }
            | ClrEvent::GcRestartEeEnd { clr_instance_id } => assert_eq!(*clr_instance_id, Some(9)),
            other => panic!("{layout}: {other:?}"),
        });
        // V0 has no payload at all.
        let ev = clr_events::decode(&common::raw(RUNTIME, event_id, 0, 8, &[])).unwrap();
        assert_ne!(ev, ClrEvent::Unknown);
    }
}

#[test]
fn gc_triggered() {
    let p = Payload::new(8).u32(10).u16(3);
    check_event(RUNTIME, id::GC_TRIGGERED, 0, &p, "GCTriggered", |ev| {
        let ClrEvent::GcTriggered(t) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(t.reason, GcReason::InducedCompacting);
    });
}

fn per_heap_history(ps: u8, count: u32) -> Payload {
    let mut p = Payload::new(ps)
        .u16(3)
        .ptr(10)
        .ptr(11)
        .ptr(12)
        .ptr(13)
        .ptr(14)
        .ptr(15)
        .u32(16)
        .u32(1 | (1 << 2)) // initial gen 1, final gen 1
        .u32(1 << 3) // very_high_mem
        .u32(0x8000_0002)
        .u32(0)
        .u32(1)
        .ptr(3_005_960)
        .u32(count);
    for g in 0..u64::from(count) {
        for f in 0..10u64 {
            p = p.ptr(g * 100 + f);
        }
    }
    p
}

#[test]
fn per_heap_history_v3_both_pointer_sizes() {
    for ps in [8u8, 4] {
        let p = per_heap_history(ps, 5);
        assert_eq!(
            p.buf.len(),
            2 + 6 * ps as usize + 6 * 4 + ps as usize + 4 + 5 * 10 * ps as usize
        );
        check_event(
            RUNTIME,
            id::GC_PER_HEAP_HISTORY,
            3,
            &p,
            "GCPerHeapHistory_V3",
            |ev| {
                let ClrEvent::GcPerHeapHistory(h) = ev else {
                    panic!("{ev:?}")
                };
                assert_eq!(h.clr_instance_id, 3);
                assert_eq!(
                    [
                        h.free_list_allocated,
                        h.free_list_rejected,
                        h.end_of_seg_allocated,
                        h.condemned_allocated
                    ],
                    [10, 11, 12, 13]
                );
                assert_eq!((h.pinned_allocated, h.pinned_allocated_advance), (14, 15));
                assert_eq!(h.running_free_list_efficiency, 16);
                assert_eq!(h.condemn_reasons.initial_generation(), 1);
                assert_eq!(h.condemn_reasons.final_generation_per_heap(), 1);
                assert!(h.condemn_reasons.has(CondemnCondition::VeryHighMemory));
                assert_eq!(h.condemn_reasons.conditions().count(), 1);
                assert_eq!(h.compact_mechanisms, 0x8000_0002);
                assert_eq!(h.heap_index, 1);
                assert_eq!(h.extra_gen0_commit, 3_005_960);
                assert_eq!(h.generations.len(), 5);
                assert_eq!(h.generations[0].size_before, 0);
                assert_eq!(h.generations[0].new_allocation, 9);
                assert_eq!(h.generations[4].in_bytes, 406);
                assert_eq!(h.generations[4].non_pinned_surv, 408);
            },
        );
    }
}

#[test]
fn per_heap_history_rejects_huge_count_without_allocating() {
    let p = per_heap_history(8, 0);
    let mut buf = p.buf.clone();
    let n = buf.len();
    buf[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    let err =
        clr_events::decode(&common::raw(RUNTIME, id::GC_PER_HEAP_HISTORY, 3, 8, &buf)).unwrap_err();
    assert!(
        matches!(
            err,
            clr_events::DecodeError::CountTooLarge {
                count: 0xFFFF_FFFF,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("Values"), "{err}");
}

fn global_v2(p: Payload) -> Payload {
    p.u64(0x358F40)
        .i32(1)
        .u32(0)
        .u32(0)
        .u32(0)
        .u32(0b10110)
        .u16(3)
        .u32(1)
        .u32(0)
}

#[test]
fn global_heap_history_v2_v3_v4() {
    let p = global_v2(Payload::new(8));
    check_event(
        RUNTIME,
        id::GC_GLOBAL_HEAP_HISTORY,
        2,
        &p,
        "GCGlobalHeapHistory_V2",
        |ev| {
            let ClrEvent::GcGlobalHeapHistory(g) = ev else {
                panic!("{ev:?}")
            };
            assert_eq!(g.final_youngest_desired, 0x358F40);
            assert_eq!(g.num_heaps, 1);
            assert_eq!(g.reason, GcReason::AllocSmall);
            assert_eq!(g.global_mechanisms, 0b10110);
            assert_eq!(g.clr_instance_id, 3);
            assert_eq!((g.pause_mode, g.memory_pressure), (Some(1), Some(0)));
            assert_eq!(g.condemn_reasons, None);
            assert_eq!(g.times, None);
        },
    );
    let p = global_v2(Payload::new(8)).u32(2 | (2 << 2)).u32(1 << 15);
    check_event(
        RUNTIME,
        id::GC_GLOBAL_HEAP_HISTORY,
        3,
        &p,
        "GCGlobalHeapHistory_V3",
        |ev| {
            let ClrEvent::GcGlobalHeapHistory(g) = ev else {
                panic!("{ev:?}")
            };
            let r = g.condemn_reasons.expect("V3 has condemn reasons");
            assert_eq!(
                (r.initial_generation(), r.final_generation_per_heap()),
                (2, 2)
            );
            assert_eq!(
                r.conditions().collect::<Vec<_>>(),
                vec![CondemnCondition::BeforeBgc]
            );
        },
    );
    let p = global_v2(Payload::new(8))
        .u32(0)
        .u32(0)
        .u32(3)
        .u32(100)
        .u32(200)
        .u32(300);
    check_event(
        RUNTIME,
        id::GC_GLOBAL_HEAP_HISTORY,
        4,
        &p,
        "GCGlobalHeapHistory_V4",
        |ev| {
            let ClrEvent::GcGlobalHeapHistory(g) = ev else {
                panic!("{ev:?}")
            };
            assert_eq!(g.times.as_deref(), Some(&[100u32, 200, 300][..]));
        },
    );
}
