//! Event samples (allocations, exceptions, lock waits) keep their times: from a real recording
//! (.NET Core 3.0: 35,458 allocation ticks, 8 lock waits), each event becomes a sample at its
//! time on the profile clock, adding up to the aggregated values; without a clock the samples
//! stay aggregated.

use clr_events::{ClrEvent, decode, providers};
use clrprobe_eventpipe::nettrace::NetTraceReader;
use clrprobe_pipeline::{EventInput, EventProfiles, FrameSource, Kinds};
use clrprobe_profile::{Frame, Profile, ProfileBuilder};

struct NoFrames;

impl FrameSource for NoFrames {
    fn frames(&mut self, _pid: u32, stack: &[u64]) -> Vec<Frame> {
        stack.iter().rev().map(|a| Frame::new(format!("{a:#x}"), "", clrprobe_profile::FrameKind::Native)).collect()
    }
}

/// The events, and the times of the allocation ticks and contention starts (source clock).
fn profiles() -> (EventProfiles, Vec<u64>, Vec<u64>) {
    let bytes = clrprobe_tests::corpus::read("perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace");
    let mut reader = NetTraceReader::new(&bytes[..]).expect("header");
    let ps = reader.trace_info().pointer_size as u8;
    let mut p = EventProfiles::new(Kinds::ALL);
    let (mut ticks, mut waits) = (Vec::new(), Vec::new());
    while let Some(e) = reader.next_event().expect("stream") {
        let mut raw = e.raw_event();
        if raw.provider != providers::RUNTIME {
            continue;
        }
        raw.pointer_size = ps;
        let Ok(ev) = decode(&raw) else { continue };
        let t = e.time_ns().max(0) as u64;
        match ev {
            ClrEvent::AllocationTick(_) => ticks.push(t),
            ClrEvent::ContentionStart(_) => waits.push(t),
            _ => {}
        }
        p.on_event(EventInput { pid: 1, tid: e.thread_id(), time_ns: t, event: &ev, stack: e.stack() });
    }
    (p, ticks, waits)
}

fn build(p: &EventProfiles, start: Option<i64>) -> Profile {
    let mut b = ProfileBuilder::new(Kinds::ALL.sample_types());
    p.write_into_at(&mut b, &mut NoFrames, start).unwrap();
    b.build()
}

fn column(p: &Profile, kind: &str) -> usize {
    p.sample_types().iter().position(|t| t.kind == kind).unwrap()
}

#[test]
fn each_event_sample_sits_at_its_time_and_the_totals_agree() {
    let (mut p, ticks, waits) = profiles();
    assert_eq!((ticks.len(), waits.len()), (35458, 8));
    let aggregated = build(&p, Some(0));
    assert!(aggregated.samples().all(|s| s.timestamp_ns.is_none()), "no clock: aggregated");
    // The source clock's 0 is 5 s after the recording's start on the host clock.
    p.clock = Some((5_000_000_000, 0));
    assert!(p.has_times());
    let timed = build(&p, Some(0));
    for kind in ["alloc-bytes", "alloc-count", "exceptions", "contention-ns", "contention-count"] {
        let (a, t) = (column(&aggregated, kind), column(&timed, kind));
        let sum = |p: &Profile, i: usize| p.samples().map(|s| s.values[i]).sum::<i64>();
        assert_eq!(sum(&aggregated, a), sum(&timed, t), "{kind} totals");
    }
    assert!(timed.samples().all(|s| s.timestamp_ns.is_some()));
    let bytes = column(&timed, "alloc-bytes");
    let mut alloc_times: Vec<u64> = timed.samples().filter(|s| s.values[bytes] != 0).map(|s| s.timestamp_ns.unwrap()).collect();
    let mut want: Vec<u64> = ticks.iter().map(|t| t + 5_000_000_000).collect();
    alloc_times.sort_unstable();
    want.sort_unstable();
    assert_eq!(alloc_times, want, "one sample per tick, at its time");
    // A lock wait sits at its start (ContentionStart), lasting its duration.
    let ns = column(&timed, "contention-ns");
    let mut wait_times: Vec<u64> = timed.samples().filter(|s| s.values[ns] != 0).map(|s| s.timestamp_ns.unwrap()).collect();
    let mut want: Vec<u64> = waits.iter().map(|t| t + 5_000_000_000).collect();
    wait_times.sort_unstable();
    want.sort_unstable();
    assert_eq!(wait_times, want);
    // Times before the profile's start are clamped to it.
    let late = build(&p, Some(i64::MAX / 2));
    assert!(late.samples().all(|s| s.timestamp_ns == Some(0)));
}
