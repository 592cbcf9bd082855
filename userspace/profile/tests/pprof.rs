//! pprof: round trip through the crate's own reader, an independent wire-level decode, and
//! corrupt input.

mod common;


use std::collections::{HashMap, HashSet};
use std::io::Read;

use clrprobe_profile::{FrameKind, ProfileError, pprof};
use common::wire;

#[test]
fn round_trip_through_file_is_equal() {
    let p = common::known_profile();
    let dir = common::scratch("pprof-rt");
    let path = dir.join("profile.pb.gz");
    pprof::write_file(&p, &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzip magic");
    let back = pprof::read_file(&path).unwrap();
    // Markers and frame attributes are not pprof's (they go to the events file).
    assert_ne!(back, p);
    assert_eq!(back, common::as_pprof_keeps(&p));
    // Details the semantic equality relies on, spelled out: kinds travel in standard fields.
    let jit = back.frames().iter().find(|f| f.name == "Program.Main(string[])").unwrap();
    assert_eq!((jit.kind, jit.module.as_str()), (FrameKind::Jit, "app.dll"));
    for (name, kind) in [("System.String.Concat(string;string)", FrameKind::ReadyToRun), ("__memmove_avx", FrameKind::Native), ("ksys_read", FrameKind::Kernel)] {
        assert_eq!(back.frames().iter().find(|f| f.name == name).unwrap().kind, kind, "{name}");
    }
    assert_eq!(back.markers().len(), 0);
    assert_eq!(back.comments(), ["recorded by a test"]);
    assert_eq!(back.samples().filter(|s| s.timestamp_ns == Some(250_000_000)).count(), 1);
    let exc = back.label_sets().iter().find_map(|l| l.string("exception")).unwrap();
    assert_eq!(exc, "System.InvalidOperationException: bad; state");
}

#[test]
fn equality_sees_a_changed_value() {
    // Guard: the round-trip test must be able to fail.
    let p = common::known_profile();
    let mut b = clrprobe_profile::ProfileBuilder::from_profile(p.clone());
    let f = b.intern_frame(clrprobe_profile::Frame::new("x", "", FrameKind::Native)).unwrap();
    let s = b.intern_stack(&[f]).unwrap();
    let l = b.intern_labels(Default::default()).unwrap();
    b.add_sample(s, &[1, 0, 0, 0], l).unwrap();
    assert_ne!(b.build(), p);
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).unwrap();
    out
}

#[test]
fn independent_wire_decode_matches_profile_proto() {
    let p = common::known_profile();
    let mut gz = Vec::new();
    pprof::to_writer(&p, &mut gz).unwrap();
    let raw = gunzip(&gz);
    let top = wire::fields(&raw);

    // string_table = 6; [0] must be "".
    let strings: Vec<String> =
        wire::bytes(&top, 6).into_iter().map(|b| String::from_utf8(b.to_vec()).unwrap()).collect();
    assert_eq!(strings[0], "");
    let s = |i: u64| strings[i as usize].as_str();

    // sample_type = 1: ValueType { type = 1, unit = 2 }.
    let types: Vec<(String, String)> = wire::bytes(&top, 1)
        .into_iter()
        .map(|m| {
            let f = wire::fields(m);
            (s(wire::int(&f, 1)).to_owned(), s(wire::int(&f, 2)).to_owned())
        })
        .collect();
    let expected: Vec<(String, String)> =
        p.sample_types().iter().map(|t| (t.kind.clone(), t.unit.clone())).collect();
    assert_eq!(types, expected);
    // default_sample_type = 14 is the first kind; time_nanos = 9; duration_nanos = 10; period = 12.
    assert_eq!(s(wire::int(&top, 14)), "cpu");
    assert_eq!(wire::int(&top, 9), p.start_time_ns());
    assert_eq!(wire::int(&top, 10), p.duration_ns());
    assert_eq!(wire::int(&top, 12), 1_000_000);
    let period_type = wire::fields(wire::bytes(&top, 11)[0]);
    assert_eq!((s(wire::int(&period_type, 1)), s(wire::int(&period_type, 2))), ("cpu", "nanoseconds"));

    // mapping = 3: id = 1, filename = 5.
    let mappings: HashMap<u64, String> = wire::bytes(&top, 3)
        .into_iter()
        .map(|m| {
            let f = wire::fields(m);
            (wire::int(&f, 1), s(wire::int(&f, 5)).to_owned())
        })
        .collect();
    // Frames without a real mapping get their kind's pseudo mapping.
    for m in ["[native]", "[jit]", "[r2r]", "[kernel.kallsyms]"] {
        assert!(mappings.values().any(|x| x == m), "{m} missing: {mappings:?}");
    }
    // function = 5: id = 1, name = 2, system_name = 3, filename = 4.
    let functions: HashMap<u64, String> = wire::bytes(&top, 5)
        .into_iter()
        .map(|m| {
            let f = wire::fields(m);
            assert_eq!(wire::int(&f, 2), wire::int(&f, 3), "system_name = name");
            (wire::int(&f, 1), s(wire::int(&f, 2)).to_owned())
        })
        .collect();
    assert_eq!(functions.len(), 5);
    assert!(!functions.contains_key(&0), "function id 0 is reserved");
    // location = 4: id = 1, mapping_id = 2, address = 3, line = 4 { function_id = 1 }.
    let mut loc_fn: HashMap<u64, String> = HashMap::new();
    for m in wire::bytes(&top, 4) {
        let f = wire::fields(m);
        let id = wire::int(&f, 1);
        assert_ne!(id, 0, "location id 0 is reserved");
        let mapping = wire::int(&f, 2);
        assert!(mapping == 0 || mappings.contains_key(&mapping), "location {id} → unknown mapping {mapping}");
        let lines = wire::bytes(&f, 4);
        assert_eq!(lines.len(), 1);
        let func = wire::int(&wire::fields(lines[0]), 1);
        let name = functions.get(&func).unwrap_or_else(|| panic!("location {id} → unknown function {func}"));
        if name == "__memmove_avx" {
            assert_eq!(wire::int(&f, 3), 0x7f11_2233);
        }
        assert!(loc_fn.insert(id, name.clone()).is_none(), "duplicate location id {id}");
    }
    // sample = 2: location_id = 1 (leaf first), value = 2, label = 3 { key = 1, str = 2, num = 3 }.
    let samples = wire::bytes(&top, 2);
    assert_eq!(samples.len(), p.sample_count());
    let mut cpu_total = 0;
    let mut label_keys = HashSet::new();
    let mut saw_concat_stack = false;
    for m in samples {
        let f = wire::fields(m);
        let locs = wire::ints(&f, 1);
        let names: Vec<&str> = locs.iter().map(|l| loc_fn[l].as_str()).collect();
        assert_eq!(names.last(), Some(&"Program.Main(string[])"), "root last: {names:?}");
        if names[0] == "__memmove_avx" {
            assert_eq!(names, ["__memmove_avx", "System.String.Concat(string;string)", "Program.Work()", "Program.Main(string[])"]);
            saw_concat_stack = true;
        }
        let values = wire::ints(&f, 2);
        assert_eq!(values.len(), 4);
        cpu_total += values[0] as i64;
        for l in wire::bytes(&f, 3) {
            let lf = wire::fields(l);
            let key = s(wire::int(&lf, 1));
            label_keys.insert(key.to_owned());
            if key == "pid" {
                assert_eq!(wire::int(&lf, 3), 100);
            }
            if key == "thread_name" {
                assert!(["Main", "Worker"].contains(&s(wire::int(&lf, 2))));
            }
        }
    }
    assert!(saw_concat_stack);
    assert_eq!(cpu_total, p.total(0));
    for k in ["pid", "tid", "process_name", "thread_name", "exception", "gen", "clrprobe.timestamp_ns"] {
        assert!(label_keys.contains(k), "label {k} missing: {label_keys:?}");
    }
    // comment = 13: only the user's comment (no clrprobe extension comments).
    let comments: Vec<&str> = wire::ints(&top, 13).into_iter().map(s).collect();
    assert_eq!(comments, ["recorded by a test"]);
}

fn corrupt_message(err: ProfileError) -> String {
    assert!(matches!(err, ProfileError::CorruptPprof(_)), "{err:?}");
    err.to_string()
}

#[test]
fn corrupt_inputs_are_errors_naming_the_cause() {
    let p = common::known_profile();
    let raw = pprof::encode(&p).unwrap();

    // Truncated protobuf.
    let msg = corrupt_message(pprof::decode(&raw[..raw.len() - 1]).unwrap_err());
    assert!(msg.contains("protobuf"), "{msg}");
    // Truncated gzip.
    let mut gz = Vec::new();
    pprof::to_writer(&p, &mut gz).unwrap();
    let msg = corrupt_message(pprof::decode(&gz[..gz.len() - 20]).unwrap_err());
    assert!(msg.contains("gzip"), "{msg}");
    // Empty input has no string table.
    let msg = corrupt_message(pprof::decode(&[]).unwrap_err());
    assert!(msg.contains("string table"), "{msg}");
    // Random garbage, deterministic: never a panic.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for len in [1usize, 7, 64, 1000] {
        let junk: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(pprof::decode(&junk).is_err());
    }
}

/// Rewrite one varint field of the first sub-message in `field` of the top-level message.
fn patch(raw: &[u8], outer: u64, inner: u64, value: u64) -> Vec<u8> {
    use prost::encoding::{encode_key, encode_varint, WireType};
    let top = wire::fields(raw);
    let mut out = Vec::new();
    let mut done = false;
    for (f, v) in &top {
        match v {
            wire::Val::Bytes(b) if *f == outer && !done => {
                done = true;
                let mut sub = Vec::new();
                for (g, w) in wire::fields(b) {
                    match w {
                        wire::Val::Varint(_) if g == inner => {
                            encode_key(g as u32, WireType::Varint, &mut sub);
                            encode_varint(value, &mut sub);
                        }
                        wire::Val::Varint(x) => {
                            encode_key(g as u32, WireType::Varint, &mut sub);
                            encode_varint(x, &mut sub);
                        }
                        wire::Val::Bytes(x) => {
                            encode_key(g as u32, WireType::LengthDelimited, &mut sub);
                            encode_varint(x.len() as u64, &mut sub);
                            sub.extend_from_slice(x);
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                }
                encode_key(*f as u32, WireType::LengthDelimited, &mut out);
                encode_varint(sub.len() as u64, &mut out);
                out.extend_from_slice(&sub);
            }
            wire::Val::Varint(x) => {
                encode_key(*f as u32, WireType::Varint, &mut out);
                encode_varint(*x, &mut out);
            }
            wire::Val::Bytes(x) => {
                encode_key(*f as u32, WireType::LengthDelimited, &mut out);
                encode_varint(x.len() as u64, &mut out);
                out.extend_from_slice(x);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(done, "no field {outer}");
    out
}

#[test]
fn dangling_references_are_errors() {
    let raw = pprof::encode(&common::known_profile()).unwrap();
    // A function name beyond the string table.
    let msg = corrupt_message(pprof::decode(&patch(&raw, 5, 2, 9_999)).unwrap_err());
    assert!(msg.contains("function name string index 9999"), "{msg}");
    // A location pointing at a mapping that does not exist.
    let msg = corrupt_message(pprof::decode(&patch(&raw, 4, 2, 77)).unwrap_err());
    assert!(msg.contains("unknown mapping 77"), "{msg}");
    // A duplicate location id (the first location takes the second's id).
    let msg = corrupt_message(pprof::decode(&patch(&raw, 4, 1, 2)).unwrap_err());
    assert!(msg.contains("duplicate location id 2"), "{msg}");
    // A sample type unit beyond the string table.
    let msg = corrupt_message(pprof::decode(&patch(&raw, 1, 2, 1 << 40)).unwrap_err());
    assert!(msg.contains("sample unit"), "{msg}");
}

/// Hand-encoded protobuf for a profile another tool could have written: inlined lines, a
/// location without lines, a location without mapping, sparse ids.
mod foreign {
    use prost::encoding::{WireType, encode_key, encode_varint};

    pub enum F<'a> {
        V(u32, u64),
        M(u32, Vec<u8>),
        S(u32, &'a str),
    }

    pub fn msg(fields: &[F<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        for f in fields {
            match f {
                F::V(n, v) => {
                    encode_key(*n, WireType::Varint, &mut out);
                    encode_varint(*v, &mut out);
                }
                F::M(n, b) => {
                    encode_key(*n, WireType::LengthDelimited, &mut out);
                    encode_varint(b.len() as u64, &mut out);
                    out.extend_from_slice(b);
                }
                F::S(n, s) => {
                    encode_key(*n, WireType::LengthDelimited, &mut out);
                    encode_varint(s.len() as u64, &mut out);
                    out.extend_from_slice(s.as_bytes());
                }
            }
        }
        out
    }
}

#[test]
fn reads_foreign_pprof_with_inlining() {
    use foreign::{F::*, msg};
    let strings = ["", "cpu", "nanoseconds", "main", "inlined_helper", "leaf_fn", "/bin/app", "thread"];
    let mut fields: Vec<foreign::F<'_>> = strings.iter().map(|s| S(6, s)).collect();
    fields.push(M(1, msg(&[V(1, 1), V(2, 2)])));
    fields.push(M(3, msg(&[V(1, 7), V(5, 6)])));
    fields.push(M(5, msg(&[V(1, 1), V(2, 3)])));
    fields.push(M(5, msg(&[V(1, 2), V(2, 4)])));
    fields.push(M(5, msg(&[V(1, 3), V(2, 5)])));
    // Location 10: inlined_helper (innermost, listed first) inlined into main.
    fields.push(M(4, msg(&[V(1, 10), V(2, 7), V(3, 0x1000), M(4, msg(&[V(1, 2)])), M(4, msg(&[V(1, 1)]))])));
    fields.push(M(4, msg(&[V(1, 11), V(2, 7), V(3, 0x2000)])));
    fields.push(M(4, msg(&[V(1, 12), M(4, msg(&[V(1, 3)]))])));
    // Leaf first; a numeric label that is not one of ours.
    fields.push(M(2, msg(&[V(1, 12), V(1, 11), V(1, 10), V(2, 5), M(3, msg(&[V(1, 7), V(3, 3)]))])));
    fields.push(V(9, 42));
    let p = pprof::decode(&msg(&fields)).unwrap();

    assert_eq!(p.sample_types()[0].kind, "cpu");
    assert_eq!(p.start_time_ns(), 42);
    let s = p.samples().next().unwrap();
    assert_eq!(s.values, &[5]);
    let frames: Vec<(&str, &str, u64)> = p
        .stack(s.stack)
        .unwrap()
        .iter()
        .map(|f| {
            let f = p.frame(*f).unwrap();
            (f.name.as_str(), f.module.as_str(), f.address)
        })
        .collect();
    assert_eq!(
        frames,
        [("main", "/bin/app", 0x1000), ("inlined_helper", "/bin/app", 0x1000), ("0x2000", "/bin/app", 0x2000), ("leaf_fn", "", 0)]
    );
    // Code of a file mapping is native; a function without file or mapping is unknown.
    let kinds: Vec<FrameKind> = p.stack(s.stack).unwrap().iter().map(|f| p.frame(*f).unwrap().kind).collect();
    assert_eq!(kinds, [FrameKind::Native, FrameKind::Native, FrameKind::Native, FrameKind::Unknown]);
    // "thread" with a number is a free numeric label, not our thread name.
    assert_eq!(p.labels(s.labels).unwrap().numbers, [("thread".into(), 3)]);
}
