//! Writes a small demo profile in every format: `cargo run -p clrprobe-profile --example
//! write_all -- <out-dir>`.

use clrprobe_profile::folded::FoldedOptions;
use clrprobe_profile::speedscope::Grouping;
use clrprobe_profile::{
    Frame, FrameKind, LabelSet, Marker, Period, ProfileBuilder, ProfileError, SampleType, firefox, folded, kinds,
    pprof, speedscope, svg, units,
};

fn main() -> Result<(), ProfileError> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| ".".to_owned());
    let mut b = ProfileBuilder::new(vec![
        SampleType::new(kinds::CPU, units::SAMPLES),
        SampleType::new(kinds::ALLOC_BYTES, units::BYTES),
    ]);
    b.set_period(Period { sample_type: SampleType::new(kinds::CPU, units::NANOSECONDS), value: 1_000_000 });
    b.set_start_time_ns(1_700_000_000_000_000_000);
    b.set_duration_ns(1_000_000_000);
    let main = b.intern_frame(Frame::new("Program.Main(string[])", "app.dll", FrameKind::Jit))?;
    let hot = b.intern_frame(Frame::new("Program.HotA()", "app.dll", FrameKind::Jit).with_attr("tier", "Tier1"))?;
    let alloc = b.intern_frame(Frame::new("System.String.Concat(string,string)", "System.Private.CoreLib.dll", FrameKind::ReadyToRun))?;
    let gc = b.intern_frame(Frame::new("WKS::gc_heap::garbage_collect", "libcoreclr.so", FrameKind::Native))?;
    let sys = b.intern_frame(Frame::new("clear_page_erms", "[kernel]", FrameKind::Kernel))?;
    let s1 = b.intern_stack(&[main, hot])?;
    let s2 = b.intern_stack(&[main, alloc, gc, sys])?;
    let t = b.intern_labels(LabelSet { process_name: Some("app".into()), thread_name: Some("Main".into()), ..LabelSet::thread(42, 42) })?;
    b.add_sample(s1, &[75, 0], t)?;
    b.add_sample(s2, &[25, 1 << 20], t)?;
    b.add_marker(Marker { name: "GC".into(), start_ns: 200_000_000, end_ns: 230_000_000, pid: Some(42), tid: Some(42), data: vec![("generation".into(), "0".into())] });
    let p = b.build();
    let dir = std::path::Path::new(&dir);
    pprof::write_file(&p, dir.join("demo.pb.gz"))?;
    folded::write_all(&p, dir, "demo", &FoldedOptions::default())?;
    svg::write_file(&p, 0, "demo cpu", dir.join("demo.cpu.svg"))?;
    speedscope::write_file(&p, "demo", Grouping::PerThread, dir.join("demo.speedscope.json"))?;
    firefox::write_file(&p, 0, "clrprobe demo", dir.join("demo.firefox.json"))?;
    println!("wrote {}", dir.display());
    Ok(())
}
