//! Heap dump event decoders (clr_events::heap) against payloads built field by field from the
//! manifest templates, for 8- and 4-byte pointers; ids checked against the manifest.

use clr_events::RawEvent;
use clr_events::builder::Payload;
use clr_events::heap::{HeapEvent, RootKind, decode_heap, ids, root_flags};
use clr_events::providers::RUNTIME;

fn raw(id: u16, p: &Payload) -> RawEvent<'_> {
    RawEvent {
        provider: RUNTIME,
        event_id: id,
        version: 0,
        payload: &p.buf,
        pointer_size: p.pointer_size,
    }
}

/// Decodes the full payload, then checks every strict prefix is an error naming `layout`.
fn decode_all<'a>(id: u16, p: &'a Payload, layout: &str) -> HeapEvent<'a> {
    for n in 0..p.buf.len() {
        let r = RawEvent {
            payload: &p.buf[..n],
            ..raw(id, p)
        };
        match decode_heap(&r) {
            Err(e) => assert!(e.to_string().contains(layout), "{layout} at {n}: {e}"),
            Ok(ev) => panic!("{layout}: {n} of {} bytes decoded: {ev:?}", p.buf.len()),
        }
    }
    decode_heap(&raw(id, p)).unwrap().expect("a heap event")
}

#[test]
fn bulk_node_and_edge_for_both_pointer_sizes() {
    for ps in [8u8, 4] {
        let p = Payload::new(ps).u32(3).u32(2).u16(9);
        let p = p
            .ptr(0x1000)
            .u64(24)
            .u64(0xAA)
            .u64(2)
            .ptr(0x2000)
            .u64(32)
            .u64(0xBB)
            .u64(0);
        let HeapEvent::BulkNode(b) = decode_all(ids::GC_BULK_NODE, &p, "GCBulkNode") else {
            panic!()
        };
        assert_eq!((b.index, b.count, b.clr_instance_id), (Some(3), 2, 9));
        let nodes: Vec<_> = b.iter().collect();
        assert_eq!(nodes.len(), 2);
        assert_eq!(
            (
                nodes[0].address,
                nodes[0].size,
                nodes[0].type_id,
                nodes[0].edge_count
            ),
            (0x1000, 24, 0xAA, 2)
        );
        assert_eq!((nodes[1].address, nodes[1].edge_count), (0x2000, 0));

        let p = Payload::new(ps)
            .u32(0)
            .u32(2)
            .u16(9)
            .ptr(0x2000)
            .u32(7)
            .ptr(0x3000)
            .u32(8);
        let HeapEvent::BulkEdge(b) = decode_all(ids::GC_BULK_EDGE, &p, "GCBulkEdge") else {
            panic!()
        };
        let edges: Vec<_> = b
            .iter()
            .map(|e| (e.target, e.referencing_field_id))
            .collect();
        assert_eq!(edges, [(0x2000, 7), (0x3000, 8)]);
    }
}

#[test]
fn bulk_root_edge_is_packed() {
    for ps in [8u8, 4] {
        let p = Payload::new(ps).u32(0).u32(2).u16(1);
        let p = p
            .ptr(0x1000)
            .u8(2)
            .u32(root_flags::WEAK_REF)
            .ptr(0x77)
            .ptr(0x2000)
            .u8(0)
            .u32(0)
            .ptr(0x88);
        // Packed: 2 pointers + 1 + 4 bytes per element, no padding.
        assert_eq!(p.buf.len(), 10 + 2 * (2 * ps as usize + 5));
        let HeapEvent::BulkRootEdge(b) = decode_all(ids::GC_BULK_ROOT_EDGE, &p, "GCBulkRootEdge")
        else {
            panic!()
        };
        let r: Vec<_> = b.iter().collect();
        assert_eq!(
            (r[0].object, r[0].kind, r[0].is_weak(), r[0].root_id),
            (0x1000, RootKind::Handle, true, 0x77)
        );
        assert_eq!(
            (r[1].object, r[1].kind, r[1].is_weak()),
            (0x2000, RootKind::Stack, false)
        );
    }
}

#[test]
fn cwt_ccw_rcw() {
    let p = Payload::new(8)
        .u32(0)
        .u32(1)
        .u16(1)
        .ptr(0x10)
        .ptr(0x20)
        .ptr(0x30);
    let HeapEvent::BulkRootCwtElementEdge(b) = decode_all(
        ids::GC_BULK_ROOT_CWT_ELEMENT_EDGE,
        &p,
        "GCBulkRootConditionalWeakTableElementEdge",
    ) else {
        panic!()
    };
    let e = b.iter().next().unwrap();
    assert_eq!((e.key, e.value, e.root_id), (0x10, 0x20, 0x30));

    let p = Payload::new(4)
        .u32(1)
        .u16(1)
        .u64(1)
        .u64(0x40)
        .u64(0x50)
        .u64(0x60)
        .u32(2)
        .u32(1)
        .u32(3);
    let HeapEvent::BulkRootCcw(b) = decode_all(ids::GC_BULK_ROOT_CCW, &p, "GCBulkRootCCW") else {
        panic!()
    };
    let c = b.iter().next().unwrap();
    assert_eq!(
        (b.index, c.object, c.type_id, c.ref_count, c.flags),
        (None, 0x40, 0x50, 2, 3)
    );

    let p = Payload::new(8)
        .u32(1)
        .u16(1)
        .u64(0x40)
        .u64(0x50)
        .u64(0x60)
        .u64(0x70)
        .u32(4)
        .u32(0);
    let HeapEvent::BulkRcw(b) = decode_all(ids::GC_BULK_RCW, &p, "GCBulkRCW") else {
        panic!()
    };
    assert_eq!(b.iter().next().unwrap().vtable, 0x70);
}

#[test]
fn bulk_type_with_names_and_parameters() {
    let p = Payload::new(8).u32(2).u16(1);
    let p = p
        .u64(0xAA)
        .u64(0x1)
        .u32(0)
        .u32(0x8)
        .u8(0x1d)
        .str("System.Int32[]")
        .u32(1)
        .u64(0xCC);
    let p = p
        .u64(0xBB)
        .u64(0x1)
        .u32(0)
        .u32(0)
        .u8(0x12)
        .str("App.Node")
        .u32(0);
    let HeapEvent::BulkType(types) = decode_all(ids::BULK_TYPE, &p, "BulkType") else {
        panic!()
    };
    assert_eq!(types.len(), 2);
    assert_eq!(types[0].name.to_string_lossy(), "System.Int32[]");
    assert_eq!(
        (
            types[0].type_id,
            types[0].flags,
            types[0].type_parameters.clone()
        ),
        (0xAA, 0x8, vec![0xCC])
    );
    assert_eq!(
        (types[1].type_id, types[1].name.to_string_lossy().as_str()),
        (0xBB, "App.Node")
    );
}

#[test]
fn static_roots_name_their_field() {
    let p = Payload::new(8)
        .u32(1)
        .u64(0x1)
        .u16(1)
        .u64(0x500)
        .u64(0x1000)
        .u64(0xBB)
        .u32(0)
        .str("Head");
    let HeapEvent::BulkRootStaticVar(s) =
        decode_all(ids::GC_BULK_ROOT_STATIC_VAR, &p, "GCBulkRootStaticVar")
    else {
        panic!()
    };
    assert_eq!(
        (
            s[0].object,
            s[0].type_id,
            s[0].field_name.to_string_lossy().as_str()
        ),
        (0x1000, 0xBB, "Head")
    );
}

#[test]
fn impossible_counts_are_errors_not_allocations() {
    let p = Payload::new(8).u32(0).u32(u32::MAX).u16(1).u64(1);
    let err = decode_heap(&raw(ids::GC_BULK_NODE, &p)).unwrap_err();
    assert!(err.to_string().contains("GCBulkNode"), "{err}");
    let p = Payload::new(8).u32(u32::MAX).u16(1).u64(1);
    assert!(decode_heap(&raw(ids::BULK_TYPE, &p)).is_err());
    // Other events are not heap events.
    let p = Payload::new(8).u32(1);
    assert!(decode_heap(&raw(1, &p)).unwrap().is_none());
}

#[test]
fn ids_match_the_manifest() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/specs/ClrEtwAll.2016.man"
    );
    let man = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    for (id, symbol) in [
        (ids::BULK_TYPE, "BulkType"),
        (ids::GC_BULK_ROOT_EDGE, "GCBulkRootEdge"),
        (
            ids::GC_BULK_ROOT_CWT_ELEMENT_EDGE,
            "GCBulkRootConditionalWeakTableElementEdge",
        ),
        (ids::GC_BULK_NODE, "GCBulkNode"),
        (ids::GC_BULK_EDGE, "GCBulkEdge"),
        (ids::GC_BULK_ROOT_CCW, "GCBulkRootCCW"),
        (ids::GC_BULK_RCW, "GCBulkRCW"),
        (ids::GC_BULK_ROOT_STATIC_VAR, "GCBulkRootStaticVar"),
    ] {
        let found = man.split("<event ").skip(1).any(|e| {
            let e = &e[..e.find("/>").unwrap_or(e.len())];
            e.contains(&format!("value=\"{id}\"")) && e.contains(&format!("symbol=\"{symbol}\""))
        });
        assert!(found, "event {id} is not {symbol} in the manifest");
    }
}
