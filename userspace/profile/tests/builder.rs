//! Builder behaviour: interning, aggregation, validation, merging.

mod common;

use clrprobe_profile::{Frame, FrameKind, LabelSet, ProfileBuilder, ProfileError, SampleType, kinds, units};

#[test]
fn aggregates_identical_stack_and_labels() {
    let p = common::known_profile();
    // 6 add calls, one of which aggregated.
    assert_eq!(p.sample_count(), 5);
    assert_eq!(p.total(0), 3 + 2 + 1 + 5);
    let first = p.samples().next().unwrap();
    assert_eq!(first.values, &[4, 0, 0, 0]);
    assert_eq!(p.frames().len(), 5);
    assert_eq!(p.stack_count(), 3);
}

#[test]
fn interning_returns_same_ids() {
    let mut b = ProfileBuilder::new(vec![SampleType::new(kinds::CPU, units::SAMPLES)]);
    let a = b.intern_frame(Frame::new("f", "m", FrameKind::Native)).unwrap();
    let a2 = b.intern_frame(Frame::new("f", "m", FrameKind::Native)).unwrap();
    let c = b.intern_frame(Frame::new("f", "m", FrameKind::Jit)).unwrap();
    assert_eq!(a, a2);
    assert_ne!(a, c);
    let s1 = b.intern_stack(&[a, c]).unwrap();
    let s2 = b.intern_stack(&[a, c]).unwrap();
    let s3 = b.intern_stack(&[c, a]).unwrap();
    assert_eq!(s1, s2);
    assert_ne!(s1, s3);
    let l1 = b.intern_labels(LabelSet::thread(1, 2)).unwrap();
    let l2 = b.intern_labels(LabelSet::thread(1, 2)).unwrap();
    assert_eq!(l1, l2);
}

#[test]
fn rejects_wrong_value_count_and_foreign_ids() {
    let mut other = ProfileBuilder::new(vec![SampleType::new(kinds::CPU, units::SAMPLES)]);
    let f = other.intern_frame(Frame::new("x", "", FrameKind::Native)).unwrap();
    let f2 = other.intern_frame(Frame::new("y", "", FrameKind::Native)).unwrap();
    other.intern_stack(&[f]).unwrap();
    let foreign_stack = other.intern_stack(&[f, f2]).unwrap(); // id 1: out of range in `b`

    let mut b = ProfileBuilder::new(vec![SampleType::new(kinds::CPU, units::SAMPLES)]);
    let g = b.intern_frame(Frame::new("g", "", FrameKind::Native)).unwrap();
    let stack = b.intern_stack(&[g]).unwrap();
    let labels = b.intern_labels(LabelSet::default()).unwrap();
    let err = b.add_sample(stack, &[1, 2], labels).unwrap_err();
    assert!(matches!(err, ProfileError::ValueCount { expected: 1, got: 2 }), "{err}");
    // A frame id the builder never handed out.
    let err = b.intern_stack(&[g, f2]).unwrap_err();
    assert!(err.to_string().contains("unknown frame id 1"), "{err}");
    let err = b.add_sample(foreign_stack, &[1], labels).unwrap_err();
    assert!(err.to_string().contains("unknown stack id"), "{err}");
}

#[test]
fn merge_matches_kinds_and_appends_new_ones() {
    let a = common::known_profile();
    let mut b = ProfileBuilder::new(vec![
        SampleType::new(kinds::CONTENTION_NS, units::NANOSECONDS),
        SampleType::new(kinds::CPU, units::SAMPLES),
    ]);
    b.set_start_time_ns(a.start_time_ns() - 1_000_000_000); // starts 1 s earlier
    b.set_duration_ns(500_000_000);
    let f = b.intern_frame(Frame::new("Program.Work()", "app.dll", FrameKind::Jit).with_address(0x7f00_1000)).unwrap();
    let lock = b.intern_frame(Frame::new("Monitor.Enter", "System.Private.CoreLib.dll", FrameKind::ReadyToRun)).unwrap();
    let s = b.intern_stack(&[f, lock]).unwrap();
    let l = b.intern_labels(LabelSet::thread(100, 101)).unwrap();
    b.add_sample(s, &[7_000, 2], l).unwrap();
    b.add_timed_sample(s, &[1, 0], l, 10).unwrap();
    let other = b.build();

    let mut m = ProfileBuilder::from_profile(a.clone());
    m.merge(&other).unwrap();
    let m = m.build();
    let kinds: Vec<_> = m.sample_types().iter().map(|t| t.kind.as_str()).collect();
    assert_eq!(kinds, ["cpu", "alloc-bytes", "exceptions", "off-cpu", "contention-ns"]);
    assert_eq!(m.total(0), a.total(0) + 2);
    assert_eq!(m.total(4), 7_001);
    assert_eq!(m.total(1), a.total(1));
    // Clock: merged start is the earlier one; the old profile's times move 1 s later.
    assert_eq!(m.start_time_ns(), other.start_time_ns());
    assert_eq!(m.duration_ns(), 1_000_000_000 + a.duration_ns());
    assert_eq!(m.markers()[0].start_ns, a.markers()[0].start_ns + 1_000_000_000);
    let timed: Vec<u64> = m.samples().filter_map(|s| s.timestamp_ns).collect();
    assert_eq!(timed, [250_000_000 + 1_000_000_000, 10]);
    // "Program.Work()" with the same address is one frame in both.
    assert_eq!(m.frames().len(), a.frames().len() + 1);

    // Merging twice doubles the aggregated values.
    let mut twice = ProfileBuilder::from_profile(a.clone());
    twice.merge(&a).unwrap();
    let twice = twice.build();
    assert_eq!(twice.total(0), 2 * a.total(0));
    assert_eq!(twice.sample_count(), a.sample_count() + 1, "only the timed sample is not aggregated");
}

#[test]
fn merge_rejects_unit_mismatch() {
    let a = common::known_profile();
    let b = ProfileBuilder::new(vec![SampleType::new(kinds::CPU, units::NANOSECONDS)]).build();
    let mut m = ProfileBuilder::from_profile(a);
    let err = m.merge(&b).unwrap_err();
    assert!(matches!(err, ProfileError::UnitMismatch { .. }), "{err}");
}

#[test]
fn equal_strings_share_one_allocation() {
    let mut b = ProfileBuilder::new(vec![SampleType::new(kinds::CPU, units::SAMPLES)]);
    let a = b.intern_frame(Frame::new("A", String::from("System.Private.CoreLib.dll"), FrameKind::Jit)).unwrap();
    let c = b.intern_frame(Frame::new("B", String::from("System.Private.CoreLib.dll"), FrameKind::Jit)).unwrap();
    let l = b.intern_labels(LabelSet::default().with_string("System.Private.CoreLib.dll", "A")).unwrap();
    assert_eq!(b.string_count(), 3, "A, B and the module");
    let (fa, fc) = (b.frame(a).unwrap().module.clone(), b.frame(c).unwrap().module.clone());
    assert!(clrprobe_profile::Str::ptr_eq(&fa, &fc));
    let p = b.build();
    let key = &p.labels(l).unwrap().strings[0].0;
    assert!(clrprobe_profile::Str::ptr_eq(key, &fa));
    // A profile read back (or merged) shares again.
    let back = ProfileBuilder::from_profile(clrprobe_profile::pprof::decode(&clrprobe_profile::pprof::encode(&p).unwrap()).unwrap());
    assert_eq!(back.string_count(), 3);
}
