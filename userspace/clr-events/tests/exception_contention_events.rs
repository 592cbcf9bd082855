//! Exception and contention event decoders.

mod common;

use clr_events::ClrEvent;
use clr_events::contention::ContentionKind;
use clr_events::ids::runtime as id;
use clr_events::providers::RUNTIME;
use common::{Payload, check_event, raw};

#[test]
fn exception_thrown_v1_both_pointer_sizes() {
    for ps in [8u8, 4] {
        let eip = if ps == 8 {
            0x7FFE_1234_5678
        } else {
            0x1234_5678
        };
        let p = Payload::new(ps)
            .str("System.InvalidOperationException")
            .str("boom — ünïcode")
            .ptr(eip)
            .u32(0x8013_1509)
            .u16(0x10 | 0x4)
            .u16(3);
        check_event(
            RUNTIME,
            id::EXCEPTION_THROWN,
            1,
            &p,
            "ExceptionThrown_V1",
            |ev| {
                let ClrEvent::ExceptionThrown(e) = ev else {
                    panic!("{ev:?}")
                };
                assert!(e.exception_type == "System.InvalidOperationException");
                assert_eq!(e.message.to_string_checked().unwrap(), "boom — ünïcode");
                assert_eq!(e.eip, eip);
                assert_eq!(e.hresult, 0x8013_1509);
                assert!(e.flags.cls_compliant() && e.flags.rethrown());
                assert!(
                    !e.flags.nested()
                        && !e.flags.has_inner_exception()
                        && !e.flags.corrupted_state()
                );
                assert_eq!(e.clr_instance_id, 3);
            },
        );
    }
    // V0 has no template: not decoded.
    assert_eq!(
        clr_events::decode(&raw(RUNTIME, id::EXCEPTION_THROWN, 0, 8, &[])).unwrap(),
        ClrEvent::Unknown
    );
}

#[test]
fn exception_handling_clauses() {
    // EntryEIP and MethodID are UInt64 even on 32-bit targets.
    for ps in [8u8, 4] {
        let p = Payload::new(ps)
            .u64(0x7FFE_0000_1000)
            .u64(0x7FFE_0000_2000)
            .str("Program.Main")
            .u16(3);
        for (event_id, layout) in [
            (id::EXCEPTION_CATCH_START, "ExceptionCatchStart"),
            (id::EXCEPTION_FINALLY_START, "ExceptionFinallyStart"),
            (id::EXCEPTION_FILTER_START, "ExceptionFilterStart"),
        ] {
            check_event(RUNTIME, event_id, 0, &p, layout, |ev| {
                let h = match ev {
                    ClrEvent::ExceptionCatchStart(h) if event_id == id::EXCEPTION_CATCH_START => h,
                    ClrEvent::ExceptionFinallyStart(h)
                        if event_id == id::EXCEPTION_FINALLY_START =>
                    {
                        h
                    }
                    ClrEvent::ExceptionFilterStart(h) if event_id == id::EXCEPTION_FILTER_START => {
                        h
                    }
                    other => panic!("{layout}: {other:?}"),
                };
                assert_eq!(
                    (h.entry_eip, h.method_id, h.clr_instance_id),
                    (0x7FFE_0000_1000, 0x7FFE_0000_2000, 3)
                );
                assert!(h.method_name == "Program.Main");
            });
        }
    }
    for (event_id, want) in [
        (id::EXCEPTION_CATCH_STOP, ClrEvent::ExceptionCatchStop),
        (id::EXCEPTION_FINALLY_STOP, ClrEvent::ExceptionFinallyStop),
        (id::EXCEPTION_FILTER_STOP, ClrEvent::ExceptionFilterStop),
        (id::EXCEPTION_THROWN_STOP, ClrEvent::ExceptionThrownStop),
    ] {
        assert_eq!(
            clr_events::decode(&raw(RUNTIME, event_id, 0, 8, &[])).unwrap(),
            want
        );
        assert_eq!(
            clr_events::decode(&raw(RUNTIME, event_id, 0, 8, &[1, 2, 3])).unwrap(),
            want
        );
    }
}

#[test]
fn contention_start_v1_v2() {
    let p = Payload::new(8).u8(0).u16(3);
    assert_eq!(p.buf.len(), 3);
    check_event(
        RUNTIME,
        id::CONTENTION_START,
        1,
        &p,
        "ContentionStart_V1",
        |ev| {
            let ClrEvent::ContentionStart(s) = ev else {
                panic!("{ev:?}")
            };
            assert_eq!(s.kind, ContentionKind::Managed);
            assert_eq!(s.clr_instance_id, Some(3));
            assert_eq!(
                (s.lock_id, s.associated_object_id, s.lock_owner_thread_id),
                (None, None, None)
            );
        },
    );
    for ps in [8u8, 4] {
        let (lock, obj) = if ps == 8 {
            (0x7F00_0000_1000, 0x7F00_0000_2000)
        } else {
            (0x1000, 0x2000)
        };
        let p = Payload::new(ps).u8(1).u16(3).ptr(lock).ptr(obj).u64(4242);
        check_event(
            RUNTIME,
            id::CONTENTION_START,
            2,
            &p,
            "ContentionStart_V2",
            |ev| {
                let ClrEvent::ContentionStart(s) = ev else {
                    panic!("{ev:?}")
                };
                assert_eq!(s.kind, ContentionKind::Native);
                assert_eq!(s.lock_id, Some(lock));
                assert_eq!(s.associated_object_id, Some(obj));
                assert_eq!(s.lock_owner_thread_id, Some(4242));
            },
        );
    }
    // V0 has no payload.
    let ev = clr_events::decode(&raw(RUNTIME, id::CONTENTION_START, 0, 8, &[])).unwrap();
    assert!(matches!(ev, ClrEvent::ContentionStart(s) if s.clr_instance_id.is_none()));
}

#[test]
fn contention_stop_v0_v1_and_lock_created() {
    let p = Payload::new(8).u8(0).u16(3);
    check_event(
        RUNTIME,
        id::CONTENTION_STOP,
        0,
        &p,
        "ContentionStop",
        |ev| {
            let ClrEvent::ContentionStop(s) = ev else {
                panic!("{ev:?}")
            };
            assert_eq!(
                (s.kind, s.clr_instance_id, s.duration_ns),
                (ContentionKind::Managed, 3, None)
            );
        },
    );
    let p = Payload::new(8).u8(0).u16(3).f64(137_400_255.241_591);
    assert_eq!(p.buf.len(), 11);
    check_event(
        RUNTIME,
        id::CONTENTION_STOP,
        1,
        &p,
        "ContentionStop_V1",
        |ev| {
            let ClrEvent::ContentionStop(s) = ev else {
                panic!("{ev:?}")
            };
            assert_eq!(s.duration_ns, Some(137_400_255.241_591));
        },
    );
    for ps in [8u8, 4] {
        let p = Payload::new(ps).ptr(0xAAAA).ptr(0xBBBB).u16(7);
        check_event(
            RUNTIME,
            id::CONTENTION_LOCK_CREATED,
            0,
            &p,
            "ContentionLockCreated",
            |ev| {
                let ClrEvent::ContentionLockCreated(l) = ev else {
                    panic!("{ev:?}")
                };
                assert_eq!(
                    (l.lock_id, l.associated_object_id, l.clr_instance_id),
                    (0xAAAA, 0xBBBB, 7)
                );
            },
        );
    }
}
