//! top_functions on the known profile.

mod common;

use clrprobe_profile::summary::top_functions;
use clrprobe_profile::{Frame, FrameKind, LabelSet, ProfileBuilder, SampleType};

#[test]
fn self_and_inclusive_values() {
    let p = common::known_profile();
    let top = top_functions(&p, 0, 10).unwrap();
    let rows: Vec<(&str, i64, i64)> = top.iter().map(|f| (f.name.as_str(), f.self_value, f.total_value)).collect();
    assert_eq!(
        rows,
        [
            ("__memmove_avx", 7, 7),
            ("Program.Work()", 4, 11),
            ("Program.Main(string[])", 0, 11),
            ("System.String.Concat(string;string)", 0, 7),
        ]
    );
    assert_eq!(top_functions(&p, 0, 1).unwrap().len(), 1);
    assert!(top_functions(&p, 4, 1).is_err());
}

#[test]
fn recursion_counts_once() {
    let mut b = ProfileBuilder::new(vec![SampleType::new("cpu", "samples")]);
    let f = b.intern_frame(Frame::new("fib", "m", FrameKind::Jit)).unwrap();
    let f2 = b.intern_frame(Frame::new("fib", "m", FrameKind::Jit).with_address(8)).unwrap();
    let s = b.intern_stack(&[f, f2, f, f2]).unwrap();
    let l = b.intern_labels(LabelSet::default()).unwrap();
    b.add_sample(s, &[3], l).unwrap();
    let top = top_functions(&b.build(), 0, 5).unwrap();
    assert_eq!(top.len(), 1);
    assert_eq!((top[0].self_value, top[0].total_value), (3, 3));
}
