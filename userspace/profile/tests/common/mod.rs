//! A small known profile used by several test files, and scratch-directory helpers.
#![allow(dead_code)]

pub mod wire;

use std::path::PathBuf;

use clrprobe_profile::{
    Frame, FrameKind, LabelSet, Marker, Period, Profile, ProfileBuilder, SampleType, kinds, units,
};

/// Four sample types; two threads of one process; a kernel, native, JIT and R2R frame; a name
/// with a semicolon; an exception label; a timed sample; two markers.
pub fn known_profile() -> Profile {
    let mut b = ProfileBuilder::new(vec![
        SampleType::new(kinds::CPU, units::SAMPLES),
        SampleType::new(kinds::ALLOC_BYTES, units::BYTES),
        SampleType::new(kinds::EXCEPTIONS, units::COUNT),
        SampleType::new(kinds::OFF_CPU, units::NANOSECONDS),
    ]);
    b.set_period(Period { sample_type: SampleType::new(kinds::CPU, units::NANOSECONDS), value: 1_000_000 });
    b.set_start_time_ns(1_700_000_000_000_000_000);
    b.set_duration_ns(2_000_000_000);
    b.add_comment("recorded by a test");
    let main = b.intern_frame(Frame::new("Program.Main(string[])", "app.dll", FrameKind::Jit).with_attr("tier", "Tier1")).unwrap();
    let work = b.intern_frame(Frame::new("Program.Work()", "app.dll", FrameKind::Jit).with_address(0x7f00_1000)).unwrap();
    let concat = b
        .intern_frame(Frame::new("System.String.Concat(string;string)", "System.Private.CoreLib.dll", FrameKind::ReadyToRun))
        .unwrap();
    let memmove = b.intern_frame(Frame::new("__memmove_avx", "libc.so.6", FrameKind::Native).with_address(0x7f11_2233)).unwrap();
    let read = b.intern_frame(Frame::new("ksys_read", "[kernel]", FrameKind::Kernel)).unwrap();

    let s_work = b.intern_stack(&[main, work]).unwrap();
    let s_concat = b.intern_stack(&[main, work, concat, memmove]).unwrap();
    let s_read = b.intern_stack(&[main, read]).unwrap();

    let t1 = LabelSet { process_name: Some("app".into()), thread_name: Some("Main".into()), ..LabelSet::thread(100, 100) };
    let t2 = LabelSet { process_name: Some("app".into()), thread_name: Some("Worker".into()), ..LabelSet::thread(100, 101) };
    let t1 = b.intern_labels(t1).unwrap();
    let t2_exc = b
        .intern_labels(t2.clone().with_string("exception", "System.InvalidOperationException: bad; state").with_number("gen", 0))
        .unwrap();
    let t2 = b.intern_labels(t2).unwrap();

    b.add_sample(s_work, &[3, 0, 0, 0], t1).unwrap();
    b.add_sample(s_concat, &[2, 4096, 0, 0], t1).unwrap();
    b.add_sample(s_work, &[1, 0, 0, 0], t1).unwrap(); // aggregates into the first
    b.add_sample(s_concat, &[5, 0, 0, 0], t2).unwrap();
    b.add_sample(s_work, &[0, 0, 1, 0], t2_exc).unwrap();
    b.add_timed_sample(s_read, &[0, 0, 0, 1_500_000], t2, 250_000_000).unwrap();
    b.add_marker(Marker {
        name: "GC".into(),
        start_ns: 100_000_000,
        end_ns: 130_000_000,
        pid: Some(100),
        tid: Some(101),
        data: vec![("generation".into(), "0".into()), ("reason".into(), "AllocSmall".into())],
    });
    b.add_marker(Marker { name: "Pause".into(), start_ns: 5, end_ns: 7, pid: Some(100), tid: None, data: vec![] });
    b.build()
}

/// A new private scratch directory under the system temp dir (see `clrprobe_tests::scratch_dir`).
pub fn scratch(name: &str) -> PathBuf {
    clrprobe_tests::scratch_dir(&format!("profile-{name}"))
}

/// `p` as a pprof file keeps it: no markers, no frame attributes other than `unnamed`.
pub fn as_pprof_keeps(p: &Profile) -> Profile {
    let mut b = ProfileBuilder::new(p.sample_types().to_vec());
    if let Some(period) = p.period() {
        b.set_period(period.clone());
    }
    b.set_start_time_ns(p.start_time_ns());
    b.set_duration_ns(p.duration_ns());
    for c in p.comments() {
        b.add_comment(c.clone());
    }
    for s in p.samples() {
        let ids: Vec<_> = p
            .stack(s.stack)
            .unwrap()
            .iter()
            .map(|f| {
                let mut f = p.frame(*f).unwrap().clone();
                f.attrs.retain(|(k, _)| k.as_str() == "unnamed");
                b.intern_frame(f).unwrap()
            })
            .collect();
        let stack = b.intern_stack(&ids).unwrap();
        let labels = b.intern_labels(p.labels(s.labels).unwrap().clone()).unwrap();
        match s.timestamp_ns {
            Some(t) => b.add_timed_sample(stack, s.values, labels, t).unwrap(),
            None => b.add_sample(stack, s.values, labels).unwrap(),
        }
    }
    b.build()
}
