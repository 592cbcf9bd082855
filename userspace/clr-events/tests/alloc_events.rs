//! Allocation event decoders.

mod common;

use clr_events::ClrEvent;
use clr_events::alloc::HeapKind;
use clr_events::ids::runtime as id;
use clr_events::providers::RUNTIME;
use common::{Payload, check_event};

fn tick(ps: u8, version: u8) -> Payload {
    // Values of the objver4 baseline's AllocationTick example (kind changed per test below).
    let mut p = Payload::new(ps).u32(0x196A0).u32(2);
    if version >= 1 {
        p = p.u16(3);
    }
    if version >= 2 {
        p = p
            .u64(104_096)
            .ptr(0x7FFE_A911_EA28 & if ps == 4 { 0xFFFF_FFFF } else { u64::MAX })
            .str("System.Object[]")
            .u32(0);
    }
    if version >= 3 {
        p = p.ptr(0x0000_019A_0001_7FE8 & if ps == 4 { 0xFFFF_FFFF } else { u64::MAX });
    }
    if version >= 4 {
        p = p.u64(104);
    }
    p
}

#[test]
fn allocation_tick_all_versions_both_pointer_sizes() {
    let layouts = [
        "GCAllocationTick",
        "GCAllocationTick_V1",
        "GCAllocationTick_V2",
        "GCAllocationTick_V3",
        "GCAllocationTick_V4",
    ];
    for ps in [8u8, 4] {
        let mask = if ps == 4 { 0xFFFF_FFFF } else { u64::MAX };
        for version in 0..=4u8 {
            let p = tick(ps, version);
            check_event(
                RUNTIME,
                id::GC_ALLOCATION_TICK,
                version,
                &p,
                layouts[version as usize],
                |ev| {
                    let ClrEvent::AllocationTick(t) = ev else {
                        panic!("{ev:?}")
                    };
                    assert_eq!(t.allocation_amount, 0x196A0);
                    assert_eq!(t.kind, HeapKind::Poh);
                    assert_eq!(t.kind.name(), "Pinned");
                    assert_eq!(t.clr_instance_id.is_some(), version >= 1);
                    if version >= 2 {
                        assert_eq!(t.amount(), 104_096);
                        assert_eq!(t.type_id, Some(0x7FFE_A911_EA28 & mask));
                        assert!(t.type_name.unwrap() == "System.Object[]");
                        assert_eq!(t.heap_index, Some(0));
                    } else {
                        assert_eq!(t.amount(), 0x196A0);
                        assert_eq!(t.type_name, None);
                    }
                    assert_eq!(
                        t.address,
                        (version >= 3).then_some(0x0000_019A_0001_7FE8 & mask)
                    );
                    assert_eq!(t.object_size, (version >= 4).then_some(104));
                },
            );
        }
    }
}

#[test]
fn heap_kinds() {
    assert_eq!(HeapKind::from_allocation_kind(0), HeapKind::Soh);
    assert_eq!(HeapKind::from_allocation_kind(1), HeapKind::Loh);
    assert_eq!(HeapKind::from_allocation_kind(2), HeapKind::Poh);
    assert_eq!(HeapKind::from_allocation_kind(7), HeapKind::Other(7));
}

#[test]
fn allocation_sampled_real_bytes_from_runtime_pr() {
    // The user_events dump quoted in clr-events.md (dotnet/runtime PR #117686), 64-bit.
    let mut bytes = vec![
        0x01, 0, 0, 0, 0, 0, 0xf8, 0x20, 0x4e, 0x79, 0xff, 0x7f, 0, 0,
    ];
    for u in "System.Byte[]".encode_utf16() {
        bytes.extend_from_slice(&u.to_le_bytes());
    }
    bytes.extend_from_slice(&[0, 0]);
    bytes.extend_from_slice(&[0x80, 0x00, 0xd0, 0x62, 0xbf, 0x7f, 0, 0]);
    bytes.extend_from_slice(&[0x18, 0x00, 0x10, 0, 0, 0, 0, 0]);
    bytes.extend_from_slice(&[0x85, 0xd0, 0, 0, 0, 0, 0, 0]);
    let p = Payload {
        buf: bytes,
        pointer_size: 8,
    };
    check_event(
        RUNTIME,
        id::ALLOCATION_SAMPLED,
        0,
        &p,
        "AllocationSampled",
        |ev| {
            let ClrEvent::AllocationSampled(a) = ev else {
                panic!("{ev:?}")
            };
            assert_eq!(a.kind, HeapKind::Loh);
            assert_eq!(a.clr_instance_id, 0);
            assert_eq!(a.type_id, 0x7fff_794e_20f8);
            assert_eq!(a.type_name.to_string(), "System.Byte[]");
            assert_eq!(a.address, 0x7fbf_62d0_0080);
            assert_eq!(a.object_size, 1_048_600);
            assert_eq!(a.sampled_byte_offset, 53_381);
        },
    );
}

#[test]
fn allocation_sampled_built_32_bit() {
    let p = Payload::new(4)
        .u32(0)
        .u16(1)
        .ptr(0xDEAD_BEEF)
        .str("System.String")
        .ptr(0x1234_5000)
        .u64(104)
        .u64(8192);
    check_event(
        RUNTIME,
        id::ALLOCATION_SAMPLED,
        0,
        &p,
        "AllocationSampled",
        |ev| {
            let ClrEvent::AllocationSampled(a) = ev else {
                panic!("{ev:?}")
            };
            assert_eq!(
                (a.kind, a.clr_instance_id, a.type_id),
                (HeapKind::Soh, 1, 0xDEAD_BEEF)
            );
            assert!(a.type_name == "System.String");
            assert_eq!(
                (a.address, a.object_size, a.sampled_byte_offset),
                (0x1234_5000, 104, 8192)
            );
        },
    );
}

#[test]
fn sampled_object_allocation_high_low() {
    let p = Payload::new(8)
        .ptr(0x1000)
        .ptr(0x2000)
        .u32(3)
        .u64(96)
        .u16(1);
    check_event(
        RUNTIME,
        id::GC_SAMPLED_OBJECT_ALLOCATION_HIGH,
        0,
        &p,
        "GCSampledObjectAllocation",
        |ev| {
            let ClrEvent::SampledObjectAllocationHigh(s) = ev else {
                panic!("{ev:?}")
            };
            assert_eq!(
                (
                    s.address,
                    s.type_id,
                    s.object_count_for_type_sample,
                    s.total_size_for_type_sample
                ),
                (0x1000, 0x2000, 3, 96)
            );
        },
    );
    check_event(
        RUNTIME,
        id::GC_SAMPLED_OBJECT_ALLOCATION_LOW,
        0,
        &p,
        "GCSampledObjectAllocation",
        |ev| {
            assert!(
                matches!(ev, ClrEvent::SampledObjectAllocationLow(s) if s.clr_instance_id == 1)
            );
        },
    );
}
