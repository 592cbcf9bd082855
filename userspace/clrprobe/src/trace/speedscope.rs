//! `trace --format speedscope`: the sample profiler's stacks of a NetTrace file
//! (`Microsoft-DotNETCore-SampleProfiler` ThreadSample events, one per thread about every
//! millisecond) as a speedscope file, one evented profile per thread at the samples' real
//! times. Frames are named from the trace's own method events (MethodLoadVerbose and the
//! rundown's MethodDC*Verbose); addresses no method covers stay hexadecimal.
use std::path::Path;

use clr_events::{ClrEvent, decode};
use clrprobe_eventpipe::nettrace::NetTraceReader;
use clrprobe_profile::{Frame, FrameKind, LabelSet, Period, ProfileBuilder, SampleType, kinds, speedscope, units};

use super::dump::DumpError;

const SAMPLE_PROFILER: &str = "Microsoft-DotNETCore-SampleProfiler";
/// The sample profiler's default interval.
const SAMPLE_INTERVAL_NS: i64 = 1_000_000;

/// Converts `nettrace` to speedscope JSON at `out`; returns the number of stack samples.
pub fn to_speedscope(nettrace: &Path, out: &Path) -> Result<u64, DumpError> {
    let p = nettrace.display().to_string();
    let file = std::fs::File::open(nettrace).map_err(|source| DumpError::Open { path: p.clone(), source })?;
    let mut reader = NetTraceReader::new(std::io::BufReader::with_capacity(1 << 20, file))
        .map_err(|source| DumpError::Read { path: p.clone(), source })?;
    let info = reader.trace_info().clone();
    let pid = info.process_id.unwrap_or(0) as u32;
    // (start, end, name) of each method; (time ns, thread, stack leaf first).
    let mut methods: Vec<(u64, u64, String)> = Vec::new();
    let mut samples: Vec<(u64, u64, Vec<u64>)> = Vec::new();
    loop {
        let ev = match reader.next_event() {
            Ok(Some(ev)) => ev,
            Ok(None) => break,
            // A cut stream still converts up to the cut.
            Err(_) if !samples.is_empty() => break,
            Err(source) => return Err(DumpError::Read { path: p, source }),
        };
        let md = ev.metadata();
        if md.provider == SAMPLE_PROFILER {
            if !ev.stack().is_empty() {
                samples.push((ev.time_ns().max(0) as u64, ev.thread_id(), ev.stack().to_vec()));
            }
            continue;
        }
        let mut raw = ev.raw_event();
        raw.pointer_size = info.pointer_size as u8;
        if let Ok(ClrEvent::MethodLoadVerbose(m) | ClrEvent::MethodDcStartVerbose(m) | ClrEvent::MethodDcEndVerbose(m)) =
            decode(&raw)
            && m.start_address != 0
            && m.size != 0
        {
            let ns = m.namespace.map(|s| s.to_string_lossy()).unwrap_or_default();
            let name = m.name.map(|s| s.to_string_lossy()).unwrap_or_default();
            let full = if ns.is_empty() { name } else { format!("{ns}::{name}") };
            methods.push((m.start_address, m.start_address + u64::from(m.size), full));
        }
    }
    methods.sort();
    let lookup = |addr: u64| -> Frame {
        let i = methods.partition_point(|m| m.0 <= addr);
        match i.checked_sub(1).map(|i| &methods[i]) {
            Some((start, end, name)) if addr < *end && addr >= *start => Frame::new(name.as_str(), "", FrameKind::Jit),
            _ => Frame::new(format!("{addr:#x}"), "", FrameKind::Unknown).with_address(addr),
        }
    };
    let mut b = ProfileBuilder::new(vec![SampleType::new(kinds::CPU, units::SAMPLES)]);
    b.set_period(Period { sample_type: SampleType::new(kinds::CPU, units::NANOSECONDS), value: SAMPLE_INTERVAL_NS });
    let end = samples.iter().map(|s| s.0).max().unwrap_or(0);
    b.set_duration_ns(end);
    let n = samples.len() as u64;
    for (t, tid, stack) in samples {
        let mut ids = Vec::with_capacity(stack.len());
        for (i, &a) in stack.iter().enumerate().rev() {
            // Return addresses: look up the call instruction.
            let a = if i == 0 { a } else { a.saturating_sub(1) };
            ids.push(b.intern_frame(lookup(a))?);
        }
        let stack = b.intern_stack(&ids)?;
        let labels = b.intern_labels(LabelSet::thread(pid, tid as u32))?;
        b.add_timed_sample(stack, &[1], labels, t)?;
    }
    let profile = b.build();
    let title = nettrace.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    speedscope::write_file(&profile, &title, speedscope::Grouping::PerThread, out)?;
    Ok(n)
}
