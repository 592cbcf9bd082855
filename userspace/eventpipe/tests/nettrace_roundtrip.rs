//! Round trips through the test writer (tests/nettrace_support/writer.rs, written from the
//! format documents): V6 (no real V6 recording exists) and V4/V5 layouts the runtime never
//! writes (uncompressed headers, all compression flags, 4-byte pointers), plus truncation at
//! every offset and byte-at-a-time streaming.

mod nettrace_support;

use std::cell::Cell;
use std::io::{self, Read};
use std::rc::Rc;

use clr_events::schema::{Field, FieldType, TypeCode};
use clrprobe_eventpipe::nettrace::{FormatVersion, NetTraceError, NetTraceReader, StreamStatus};
use nettrace_support::writer::{Meta, Row, TraceParams, Ty, Writer};
use nettrace_support::{Ev, assert_in_memory_reads_like_a_stream, read_all};

const T1: u64 = 1001;
const T2: u64 = 1002;
const T3: u64 = 1003;

fn metas(v6: bool) -> Vec<Meta> {
    let mut prims = Meta::new(1, "Test-Provider", 10, "Prims");
    prims.fields = Some(vec![
        ("a".into(), Ty::Prim(9)),
        ("b".into(), Ty::Prim(18)),
        ("c".into(), Ty::Object(vec![("x".into(), Ty::Prim(12)), ("y".into(), Ty::Prim(14))])),
    ]);
    prims.keywords = 0xf0;
    prims.version = 2;
    prims.level = 4;
    let mut arrays = Meta::new(2, "Test-Provider", 11, "Arrays");
    arrays.fields = Some(vec![
        ("arr".into(), Ty::Array(Box::new(Ty::Prim(10)))),
        ("s".into(), Ty::Array(Box::new(Ty::Object(vec![("p".into(), Ty::Prim(6))])))),
    ]);
    arrays.opcode = 24;
    arrays.level = 5;
    let mut native = Meta::new(3, "Microsoft-Windows-DotNETRuntime", 80, "");
    native.fields = None;
    native.version = 1;
    let mut m = vec![prims, arrays, native];
    if v6 {
        let mut newer = Meta::new(4, "Test-Provider", 12, "V6Types");
        newer.fields = Some(vec![("v".into(), Ty::V6Only(20)), ("f".into(), Ty::Fixed(Box::new(Ty::Prim(6)), 4))]);
        m.push(newer);
    }
    m
}

fn guid(n: u8) -> [u8; 16] {
    [n; 16]
}

/// The writer-side thread value: OS id for V4, index for V6.
fn th(v6: bool, os: u64) -> u64 {
    if v6 { os - 1000 } else { os }
}

/// OS id the reader should report for a writer-side thread value.
fn os_of(v6: bool, t: u64) -> u64 {
    // V6 thread index 3 is declared without an OS thread id: the index is reported.
    if v6 { if t == 3 { 3 } else { t + 1000 } } else { t }
}

struct Scenario {
    bytes: Vec<u8>,
    expected: Vec<Ev>,
    /// The same events in the order they were written.
    file_order: Vec<Ev>,
    dropped: u64,
    params: TraceParams,
}

#[allow(clippy::too_many_arguments)]
fn row(v6: bool, meta: u32, seq: u32, thread: u64, stack: u32, ts: u64, act: u8, sorted: bool, payload: &[u8]) -> Row {
    Row {
        metadata_id: meta,
        seq,
        thread: th(v6, thread),
        capture_thread: th(v6, thread),
        processor: (thread % 4) as u32,
        stack_id: stack,
        timestamp: ts,
        activity_id: if v6 { [0; 16] } else { guid(act) },
        related_activity_id: if v6 || act == 0 { [0; 16] } else { guid(act + 100) },
        label_list: u32::from(act),
        sorted,
        payload: payload.to_vec(),
    }
}

/// Builds a stream with 3 regions and the events a correct reader must hand out.
fn scenario(v6: bool, pointer_size: u32) -> Scenario {
    let params = TraceParams { pointer_size, ..TraceParams::default() };
    let mut w = if v6 { Writer::v6(&params, &[("Custom", "yes")]) } else { Writer::v4(&params) };
    let metas = metas(v6);
    let big = |x: u64| if pointer_size == 8 { 0x7ff0_0000_0000 + x } else { 0x7000_0000 + x };
    let stacks1 = vec![vec![big(0x1000), big(0x2000)], vec![big(0x1234)], vec![]];
    let stacks2 = vec![vec![big(0xaaaa), big(0xbbbb), big(0xcccc)]];
    let mut regions: Vec<Vec<(Row, &Meta, Vec<u64>)>> = Vec::new();

    w.metadata(&metas[..2], true);
    w.metadata(&metas[2..], false);
    if v6 {
        w.threads(&[(1, Some(T1), Some(4242), "main"), (2, Some(T2), None, ""), (3, None, None, "anon")]);
        w.label_lists(1, &[(guid(1), guid(101)), (guid(2), guid(102))]);
        w.v6_block(0x30, &[1, 2, 3]); // unknown block kind: skipped
    }
    w.stacks(1, &stacks1);
    // Region 1: two blocks, threads interleaved out of time order, equal timestamps.
    let a = vec![
        row(v6, 1, 1, T1, 1, 100, 1, false, b"p1"),
        row(v6, 1, 2, T1, 1, 110, 1, false, b"p2"),
        row(v6, 2, 3, T1, 2, 120, 2, false, b"payload three"),
        row(v6, 3, 1, T2, 0, 105, 0, false, b""),
        row(v6, 3, 2, T2, 3, 100, 0, false, b"t2"),
    ];
    let b = vec![
        row(v6, 1, 1, T3, 2, 100, 2, false, b"t3 first"),
        row(v6, 2, 2, T3, 1, 140, 0, true, b"sorted"),
        row(v6, 1, 3, T3, 0, 150, 0, false, &[0u8; 300]),
    ];
    w.events(&a, true);
    w.events(&b, false);
    let region1: Vec<Vec<u64>> = vec![
        stacks1[0].clone(),
        stacks1[0].clone(),
        stacks1[1].clone(),
        vec![],
        stacks1[2].clone(),
        stacks1[1].clone(),
        stacks1[0].clone(),
        vec![],
    ];
    regions.push(
        a.iter()
            .chain(&b)
            .zip(region1)
            .map(|(r, s)| (r.clone(), &metas[r.metadata_id as usize - 1], s))
            .collect(),
    );
    // T2 logged up to 4: its events 3 and 4 were dropped.
    w.sequence_point(200, &[(th(v6, T1), 3), (th(v6, T2), 4)], 0);
    if !v6 {
        // An object type this reader does not know, framed like a block: skipped.
        w.v4_object("FutureBlock", &[9; 13]);
    }

    // Region 2: stack ids (and V6 label lists) restart at 1; T1 skips sequence number 5.
    w.stacks(1, &stacks2);
    if v6 {
        w.label_lists(1, &[(guid(1), guid(101))]);
    }
    let mut c = vec![
        row(v6, 1, 4, T1, 1, 300, 0, false, b"r2a"),
        row(v6, 2, 6, T1, 0, 250, 0, false, b"r2b"),
    ];
    if v6 {
        c.push(row(v6, 4, 1, 1003, 1, 260, 1, false, &[0x03, 1, 2, 3, 4]));
    }
    w.events(&c, true);
    regions.push(
        c.iter()
            .map(|r| (r.clone(), &metas[r.metadata_id as usize - 1], if r.stack_id == 1 { stacks2[0].clone() } else { vec![] }))
            .collect(),
    );
    let renamed;
    if v6 {
        w.remove_threads(&[(3, 1)]);
        // Flush metadata; id 1 is then redefined.
        w.sequence_point(400, &[(1, 6)], 2);
        let mut m = Meta::new(1, "Other-Provider", 99, "Renamed");
        m.fields = Some(vec![("z".into(), Ty::Prim(3))]);
        renamed = m;
        w.metadata(std::slice::from_ref(&renamed), true);
        let d = vec![row(v6, 1, 7, T1, 0, 500, 0, false, &[1, 0, 0, 0])];
        w.events(&d, false);
        regions.push(d.iter().map(|r| (r.clone(), &renamed, vec![])).collect());
    } else {
        w.sequence_point(400, &[(T1, 6)], 0);
        let d = vec![row(v6, 3, 7, T1, 0, 500, 0, true, b"last")];
        w.events(&d, true);
        regions.push(d.iter().map(|r| (r.clone(), &metas[2], vec![])).collect());
    }
    let bytes = w.finish();

    let mut expected = Vec::new();
    let mut file_order = Vec::new();
    for region in regions {
        let mut evs: Vec<Ev> = region
            .into_iter()
            .map(|(r, m, stack)| {
                let labels = [(guid(1), guid(101)), (guid(2), guid(102))];
                let (act, rel) = if v6 {
                    if r.label_list == 0 { ([0; 16], [0; 16]) } else { labels[r.label_list as usize - 1] }
                } else {
                    (r.activity_id, r.related_activity_id)
                };
                Ev {
                    timestamp: r.timestamp as i64,
                    provider: m.provider.clone(),
                    event_id: m.event_id,
                    version: m.version,
                    name: m.name.clone(),
                    opcode: m.opcode,
                    thread_id: os_of(v6, r.thread),
                    capture_thread_id: os_of(v6, r.capture_thread),
                    processor: r.processor,
                    sequence: r.seq,
                    activity_id: act,
                    related_activity_id: rel,
                    stack,
                    payload: r.payload.clone(),
                    time_ns: (r.timestamp as i64 - params.sync_qpc) * 1_000_000_000 / params.freq,
                }
            })
            .collect();
        file_order.extend(evs.iter().cloned());
        evs.sort_by_key(|e| e.timestamp); // stable
        expected.extend(evs);
    }
    // V4: T2 dropped 2, T1 dropped 1 (seq 5). V6: the same.
    Scenario { bytes, expected, file_order, dropped: 3, params }
}

fn check_roundtrip(v6: bool, pointer_size: u32) {
    let s = scenario(v6, pointer_size);
    let read = read_all(&s.bytes).expect("header");
    assert!(read.error.is_none(), "{:?}", read.error);
    assert_eq!(read.status, StreamStatus::Complete);
    let i = &read.info;
    assert_eq!(i.pointer_size, pointer_size);
    assert_eq!(i.process_id, Some(4242));
    assert_eq!(i.number_of_processors, Some(16));
    assert_eq!(i.sync_time_qpc, s.params.sync_qpc);
    assert_eq!(i.qpc_frequency, s.params.freq);
    assert_eq!(i.sync_time_utc.year, 2025);
    assert_eq!(i.sync_time_utc.millisecond, 250);
    if v6 {
        assert_eq!(i.format, FormatVersion::V6 { minor: 0 });
        assert!(i.key_values.contains(&("Custom".to_string(), "yes".to_string())));
    } else {
        assert_eq!(i.format, FormatVersion::V4);
    }
    assert_eq!(read.events.len(), s.expected.len());
    for (n, (got, want)) in read.events.iter().zip(&s.expected).enumerate() {
        assert_eq!(got, want, "event {n}");
    }
    assert_eq!(read.stats.dropped_events, s.dropped);
    assert_eq!(read.stats.unknown_metadata_events, 0);
    assert_eq!(read.stats.unknown_stack_ids, 0);
}

#[test]
fn v6_roundtrip_8_byte_pointers() {
    check_roundtrip(true, 8);
}

#[test]
fn v6_roundtrip_4_byte_pointers() {
    check_roundtrip(true, 4);
}

#[test]
fn v4_roundtrip_all_header_flags_uncompressed_and_4_byte_pointers() {
    check_roundtrip(false, 8);
    check_roundtrip(false, 4);
}

/// The scenarios read in place (`InMemory`) as read as a stream: whole, cut at every byte, and
/// with each byte corrupted (V6 threads, label lists and removals included).
#[test]
fn in_memory_reads_like_a_stream() {
    for (v6, ps) in [(false, 8), (false, 4), (true, 8), (true, 4)] {
        let s = scenario(v6, ps);
        let b = &s.bytes;
        assert_in_memory_reads_like_a_stream(b, &format!("v6 {v6} pointer {ps}"));
        for cut in 0..b.len() {
            assert_in_memory_reads_like_a_stream(&b[..cut], &format!("v6 {v6} pointer {ps} cut at {cut}"));
        }
        for at in 0..b.len() {
            for v in [0x00, 0xff, b[at] ^ 0x01] {
                let mut c = b.clone();
                c[at] = v;
                assert_in_memory_reads_like_a_stream(&c, &format!("v6 {v6} pointer {ps} byte {at} = {v:#x}"));
            }
        }
    }
}

/// Metadata decoded into the shared schema: V1 lists, V2Params arrays of structs, V6 field
/// descriptions, V6-only types (not expressible: `None`), optional metadata.
#[test]
fn metadata_schemas() {
    for v6 in [false, true] {
        let s = scenario(v6, 8);
        let mut r = NetTraceReader::new(&s.bytes[..]).expect("header");
        let mut seen = std::collections::BTreeMap::new();
        while let Some(e) = r.next_event().expect("event") {
            let m = e.metadata();
            seen.insert(m.name.clone(), (**m).clone());
        }
        let prims = &seen["Prims"];
        assert_eq!((prims.keywords, prims.version, prims.level, prims.opcode), (0xf0, 2, 4, 0));
        let schema = prims.schema.as_ref().expect("schema");
        assert_eq!(
            schema.fields,
            vec![
                Field { name: "a".into(), ty: FieldType::Primitive(TypeCode::Int32) },
                Field { name: "b".into(), ty: FieldType::Primitive(TypeCode::String) },
                Field {
                    name: "c".into(),
                    ty: FieldType::Struct(vec![
                        Field { name: "x".into(), ty: FieldType::Primitive(TypeCode::UInt64) },
                        Field { name: "y".into(), ty: FieldType::Primitive(TypeCode::Double) },
                    ])
                },
            ]
        );
        let arrays = &seen["Arrays"];
        assert_eq!((arrays.opcode, arrays.level), (24, 5));
        let f = &arrays.schema.as_ref().expect("schema").fields;
        assert_eq!(f[0].ty, FieldType::Array(Box::new(FieldType::Primitive(TypeCode::UInt32))));
        assert_eq!(
            f[1].ty,
            FieldType::Array(Box::new(FieldType::Struct(vec![Field {
                name: "p".into(),
                ty: FieldType::Primitive(TypeCode::Byte)
            }])))
        );
        let native = &seen[""];
        assert_eq!(native.schema.as_ref().expect("empty schema").fields, vec![]);
        if v6 {
            assert!(seen["V6Types"].schema.is_none());
            assert_eq!(seen["Renamed"].provider, "Other-Provider");
        }
    }
}

/// A stream cut at any offset: no panic; a cut inside the header is a typed error; otherwise
/// the events handed out are exactly the first events in stream order (a prefix: nothing
/// invented, nothing skipped), their number grows with the cut, and the status says Truncated
/// until the end marker is in.
#[test]
fn truncation_at_every_offset() {
    for v6 in [false, true] {
        let s = scenario(v6, 8);
        let full = read_all(&s.bytes).expect("full");
        let mut last_count = 0;
        let mut header_len = None;
        for cut in 0..=s.bytes.len() {
            match read_all(&s.bytes[..cut]) {
                Err(NetTraceError::TruncatedHeader { .. }) => {
                    assert!(header_len.is_none(), "header error after the header was readable (cut {cut})");
                }
                Err(e) => panic!("cut {cut}: unexpected error {e}"),
                Ok(read) => {
                    header_len.get_or_insert(cut);
                    assert!(read.error.is_none(), "cut {cut}: {:?}", read.error);
                    let want = if cut == s.bytes.len() { StreamStatus::Complete } else { StreamStatus::Truncated };
                    assert_eq!(read.status, want, "cut {cut}");
                    assert!(read.events.len() >= last_count, "cut {cut}: fewer events than a shorter cut");
                    last_count = read.events.len();
                    let mut got = read.events.clone();
                    got.sort();
                    let mut prefix = s.file_order[..got.len()].to_vec();
                    prefix.sort();
                    assert!(got == prefix, "cut {cut}: the {} events are not the stream's first ones", got.len());
                }
            }
        }
        assert_eq!(last_count, full.events.len());
        assert!(header_len.expect("some cut reads the header") > 8);
    }
}

/// A reader that hands out 1..=7 bytes per call.
struct Trickle<'a> {
    data: &'a [u8],
    n: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.n = self.n % 7 + 1;
        let k = self.n.min(buf.len()).min(self.data.len());
        buf[..k].copy_from_slice(&self.data[..k]);
        self.data = &self.data[k..];
        Ok(k)
    }
}

#[test]
fn tiny_reads_give_the_same_events() {
    for v6 in [false, true] {
        let s = scenario(v6, 8);
        let mut r = NetTraceReader::new(Trickle { data: &s.bytes, n: 0 }).expect("header");
        let mut n = 0;
        while let Some(e) = r.next_event().expect("event") {
            assert_eq!(e.timestamp(), s.expected[n].timestamp);
            assert_eq!(e.payload(), &s.expected[n].payload[..]);
            assert_eq!(e.stack(), &s.expected[n].stack[..]);
            n += 1;
        }
        assert_eq!(n, s.expected.len());
        assert_eq!(r.status(), StreamStatus::Complete);
    }
}

/// Serves bytes up to `limit`, then fails like a socket with nothing more to give.
struct Stall<'a> {
    data: &'a [u8],
    pos: usize,
    limit: usize,
    stalled: Rc<Cell<bool>>,
}

impl Read for Stall<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.limit {
            self.stalled.set(true);
            return Err(io::Error::other("no more data yet"));
        }
        let k = buf.len().min(self.limit - self.pos);
        buf[..k].copy_from_slice(&self.data[self.pos..self.pos + k]);
        self.pos += k;
        Ok(k)
    }
}

/// Events up to an IsSorted event are handed out as soon as its block is in, without waiting
/// for the sequence point (what makes live streaming low-latency).
#[test]
fn sorted_flag_releases_events_before_the_sequence_point() {
    let p = TraceParams::default();
    let mut w = Writer::v4(&p);
    w.metadata(&metas(false)[..1], true);
    let rows = vec![
        row(false, 1, 1, T1, 0, 10, 0, false, b"a"),
        row(false, 1, 1, T2, 0, 5, 0, false, b"b"),
        row(false, 1, 2, T1, 0, 20, 0, true, b"c"),
        row(false, 1, 2, T2, 0, 30, 0, false, b"d"),
    ];
    w.events(&rows, true);
    let limit = w.out.len() + 1; // the EventBlock and its EndObject tag
    w.sequence_point(100, &[], 0);
    let bytes = w.finish();
    let stalled = Rc::new(Cell::new(false));
    let mut r = NetTraceReader::new(Stall { data: &bytes, pos: 0, limit, stalled: stalled.clone() }).expect("header");
    let mut ts = Vec::new();
    let err = loop {
        match r.next_event() {
            Ok(Some(e)) => {
                ts.push(e.timestamp());
                if e.timestamp() <= 20 {
                    assert!(!stalled.get(), "event {} waited for data beyond its block", e.timestamp());
                }
            }
            Ok(None) => panic!("stream cannot end"),
            Err(e) => break e,
        }
    };
    assert_eq!(ts, [5, 10, 20, 30], "everything up to the sorted event, then the rest at the failure");
    assert!(matches!(err, NetTraceError::Io(_)), "{err}");
}
