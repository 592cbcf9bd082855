//! The streaming aggregator driven by records alone, without root or a live process: counters
//! equal the events fed, GC CPU on user threads comes from timed samples inside pauses,
//! exited processes' series end, and the same records give byte-identical profiles.
use std::sync::Arc;

use clr_events::{builder::Payload, ids::runtime as id, providers::RUNTIME};
use clrprobe_pipeline::stream::{Aggregator, AggregatorConfig, ClrRecord, Namer, ProcessInfo, ProfileKind, Record, StackRecord};
use clrprobe_profile::{Frame, FrameKind, pprof};

const PID: u32 = 4242;
const MS: u64 = 1_000_000;
const T0: u64 = 1_000_000 * MS;

struct Names;

impl Namer for Names {
    fn stack(&mut self, _pid: u32, kernel: &[u64], user: &[u64]) -> Vec<Frame> {
        kernel.iter().chain(user.iter()).rev().map(|a| Frame::new(format!("f_{a:x}"), "m", FrameKind::Jit).with_address(*a)).collect()
    }
    fn process_name(&mut self, pid: u32) -> String {
        format!("proc{pid}")
    }
}

fn clr(tid: u64, t: u64, event_id: u16, version: u8, p: Payload, stack: &[u64]) -> Record {
    Record::Clr(ClrRecord {
        pid: PID,
        tid,
        time_ns: t,
        provider: Arc::from(RUNTIME),
        event_id,
        version,
        pointer_size: 8,
        payload: p.buf.into(),
        stack: Arc::from(stack),
    })
}

fn exception(tid: u64, t: u64, ty: &str) -> Record {
    let p = Payload::new(8).str(ty).str("msg").ptr(0x5000).u32(0x8013_1509).u16(0x10).u16(0);
    clr(tid, t, id::EXCEPTION_THROWN, 1, p, &[0x5000, 0x6000])
}

/// A blocking GC of `gen` driven by `tid` from `t` for `ms` milliseconds.
fn gc(index: u32, gen_: u32, tid: u64, t: u64, ms: u64) -> Vec<Record> {
    vec![
        clr(tid, t, id::GC_SUSPEND_EE_BEGIN, 1, Payload::new(8).u32(1).u32(index).u16(0), &[]),
        clr(tid, t + 1, id::GC_START, 1, Payload::new(8).u32(index).u32(gen_).u32(1).u32(0).u16(0), &[]),
        clr(tid, t + ms * MS - 1, id::GC_END, 1, Payload::new(8).u32(index).u32(gen_).u16(0), &[]),
        clr(tid, t + ms * MS, id::GC_RESTART_EE_END, 1, Payload::new(8).u16(0), &[]),
    ]
}

fn cpu(tid: u32, t: u64, user: &[u64]) -> Record {
    Record::Cpu(StackRecord { pid: PID, tid, comm: Arc::from("worker"), time_ns: t, kernel: Arc::from(vec![]), user: Arc::from(user), count: 1 })
}

fn records() -> Vec<Record> {
    let mut r = vec![Record::Started(ProcessInfo { pid: PID, name: "app".into(), container_id: String::new(), runtime_version: "8.0.4".into() })];
    for i in 0..7 {
        r.push(exception(11, T0 + i * MS, "System.InvalidOperationException"));
    }
    for i in 0..5 {
        r.push(exception(12, T0 + 10 * MS + i * MS, "System.ArgumentException"));
    }
    for i in 0..3 {
        r.push(exception(11, T0 + 20 * MS + i * MS, "System.FormatException"));
    }
    // Three gen-0 GCs and two gen-2 ones on thread 11, each 10 ms; 4 samples of thread 11
    // inside the first pause, one outside, one of another thread inside it.
    for (i, (g, at)) in [(0, 100), (0, 200), (2, 300), (0, 400), (2, 500)].into_iter().enumerate() {
        r.extend(gc(i as u32 + 1, g, 11, T0 + at * MS, 10));
    }
    for k in 0..4 {
        r.push(cpu(11, T0 + 102 * MS + k * MS, &[0x5100, 0x6000]));
    }
    r.push(cpu(11, T0 + 150 * MS, &[0x5200, 0x6000]));
    r.push(cpu(12, T0 + 103 * MS, &[0x5300]));
    r.push(Record::ThreadCpu { pid: PID, tid: 30, comm: Arc::from(".NET BGC"), cpu_ns: 1_000 * MS });
    r.push(Record::ThreadCpu { pid: PID, tid: 30, comm: Arc::from(".NET BGC"), cpu_ns: 1_250 * MS });
    r.push(Record::ProcessCpu { pid: PID, user_ns: 3_000 * MS, system_ns: 500 * MS });
    r.push(Record::Lost { pid: Some(PID), source: "eventpipe", count: 2 });
    r.push(Record::Tick { time_ns: T0 + 7_000 * MS });
    r
}

fn fed(records: Vec<Record>) -> Aggregator {
    let mut a = Aggregator::new(AggregatorConfig { freq_hz: 100, unix_offset_ns: 1_700_000_000_000_000_000, ..AggregatorConfig::default() });
    for r in records {
        a.absorb(r);
    }
    a
}

fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no line {prefix} in\n{text}"))
}

const LABELS: &str = r#"pid="4242",process_name="app",container_id="",runtime_version="8.0.4""#;

#[test]
fn counters_are_the_events_exactly() {
    let text = fed(records()).metrics_text();
    for (ty, n) in [("System.InvalidOperationException", 7), ("System.ArgumentException", 5), ("System.FormatException", 3)] {
        assert_eq!(line(&text, &format!("dotnet_exceptions_total{{{LABELS},error_type=\"{ty}\"}}")).rsplit(' ').next(), Some(&*n.to_string()));
    }
    assert!(text.contains(&format!("dotnet_gc_collections_total{{{LABELS},gc_heap_generation=\"gen0\"}} 3\n")), "{text}");
    assert!(text.contains(&format!("dotnet_gc_collections_total{{{LABELS},gc_heap_generation=\"gen2\"}} 2\n")), "{text}");
    assert!(!text.contains("gen1"), "no gen-1 GC was fed");
    assert!(text.contains(&format!("dotnet_gc_pause_time_seconds_total{{{LABELS}}} 0.05\n")), "{text}");
    assert!(text.contains(&format!("clrprobe_gc_pause_seconds_count{{{LABELS}}} 5\n")), "{text}");
    assert!(text.contains(&format!("clrprobe_gc_pause_seconds_bucket{{{LABELS},le=\"0.01\"}} 5\n")), "{text}");
    assert!(text.contains(&format!("clrprobe_gc_pause_seconds_bucket{{{LABELS},le=\"0.005\"}} 0\n")), "{text}");
    // 4 samples of the suspending thread inside its pause, at 100 Hz: 40 ms.
    assert!(text.contains(&format!("clrprobe_gc_cpu_seconds_total{{{LABELS},thread_kind=\"user_threads\"}} 0.04\n")), "{text}");
    assert!(text.contains(&format!("clrprobe_gc_cpu_seconds_total{{{LABELS},thread_kind=\"gc_threads\"}} 0.25\n")), "{text}");
    assert!(text.contains(&format!("dotnet_process_cpu_time_seconds_total{{{LABELS},cpu_mode=\"user\"}} 3\n")), "{text}");
    assert!(text.contains(&format!("clrprobe_dropped_events_total{{{LABELS}}} 2\n")), "{text}");
    assert!(text.contains("# TYPE dotnet_exceptions_total counter\n"));
}

#[test]
fn exited_processes_end_their_series_after_the_grace() {
    let mut a = fed(records());
    a.absorb(Record::Exited { pid: PID, time_ns: T0 + 8_000 * MS });
    a.absorb(Record::Tick { time_ns: T0 + 9_000 * MS });
    assert!(a.metrics_text().contains("dotnet_exceptions_total{"), "still there inside the grace period");
    a.absorb(Record::Tick { time_ns: T0 + 40_000 * MS });
    let text = a.metrics_text();
    assert!(!text.contains("dotnet_exceptions_total{"), "{text}");
    assert!(text.contains("clrprobe_processes 0\n"));
}

#[test]
fn same_records_give_byte_identical_profiles() {
    for kind in [ProfileKind::Cpu, ProfileKind::Exceptions, ProfileKind::Allocs, ProfileKind::Mutex, ProfileKind::Block] {
        let a = pprof::encode(&fed(records()).profile(kind, None, 0, &mut Names).unwrap()).unwrap();
        let b = pprof::encode(&fed(records()).profile(kind, None, 0, &mut Names).unwrap()).unwrap();
        assert_eq!(a, b, "{kind:?}");
    }
}

#[test]
fn profiles_have_go_sample_types_and_the_fed_values() {
    let a = fed(records());
    let p = a.profile(ProfileKind::Exceptions, Some(PID), 0, &mut Names).unwrap();
    assert_eq!(p.sample_types().iter().map(|t| format!("{}/{}", t.kind, t.unit)).collect::<Vec<_>>(), ["exceptions/count"]);
    assert_eq!(p.total(0), 15);
    let cpu = a.profile(ProfileKind::Cpu, None, 0, &mut Names).unwrap();
    assert_eq!(cpu.sample_types().iter().map(|t| t.kind.as_str()).collect::<Vec<_>>(), ["samples", "cpu"]);
    assert_eq!(cpu.total(0), 6);
    assert_eq!(cpu.total(1), 6 * 10 * MS as i64);
    // A window after the samples has none; another pid's filter none either.
    assert_eq!(a.profile(ProfileKind::Cpu, None, T0 + 2_000 * MS, &mut Names).unwrap().total(0), 0);
    assert_eq!(a.profile(ProfileKind::Exceptions, Some(1), 0, &mut Names).unwrap().total(0), 0);
}

#[test]
fn timed_samples_in_any_order_meet_the_pauses_that_arrive_after_them() {
    let mut a = Aggregator::new(AggregatorConfig { freq_hz: 100, ..AggregatorConfig::default() });
    a.absorb(Record::Started(ProcessInfo { pid: PID, ..ProcessInfo::default() }));
    // Samples first (a drain, newest first), then the GC events of their time.
    for k in (0..4).rev() {
        a.absorb(cpu(11, T0 + 102 * MS + k * MS, &[0x5100]));
    }
    a.absorb(cpu(11, T0 + 900 * MS, &[0x5100]));
    a.absorb(Record::Tick { time_ns: T0 + 500 * MS });
    for r in gc(1, 0, 11, T0 + 100 * MS, 10) {
        a.absorb(r);
    }
    // The newest event says little of later samples: the one at 900 ms waits.
    a.absorb(clr(11, T0 + 400 * MS, id::GC_RESTART_EE_END, 1, Payload::new(8).u16(0), &[]));
    a.absorb(Record::Tick { time_ns: T0 + 1_000 * MS });
    let text = a.metrics_text();
    assert!(text.contains("thread_kind=\"user_threads\"} 0.04\n"), "{text}");
}

/// A long blocking GC: its GCStart/GCEnd arrive (and pass the event lag) long before its
/// restart; the samples inside it wait for the restart instead of being judged outside it.
#[test]
fn samples_inside_a_pause_not_yet_ended_wait_for_its_end() {
    let mut a = Aggregator::new(AggregatorConfig { freq_hz: 100, ..AggregatorConfig::default() });
    a.absorb(Record::Started(ProcessInfo { pid: PID, ..ProcessInfo::default() }));
    let mut pause = gc(1, 2, 11, T0, 600);
    let restart = pause.pop().expect("restart");
    for r in pause {
        a.absorb(r);
    }
    for k in 0..5 {
        a.absorb(cpu(11, T0 + 50 * MS + k * 100 * MS, &[0x5100]));
    }
    a.absorb(Record::Tick { time_ns: T0 + 700 * MS });
    a.absorb(restart);
    a.absorb(exception(12, T0 + 1_000 * MS, "System.FormatException"));
    a.absorb(Record::Tick { time_ns: T0 + 1_700 * MS });
    let text = a.metrics_text();
    assert!(text.contains("thread_kind=\"user_threads\"} 0.05\n"), "{text}");
}

/// A slow drain: the pause ended and later events arrived before the samples of the pause
/// were drained. The pause stays until a tick says every sample before it has been sent.
#[test]
fn pauses_stay_until_the_samples_of_their_time_are_drained() {
    let mut a = Aggregator::new(AggregatorConfig { freq_hz: 100, ..AggregatorConfig::default() });
    a.absorb(Record::Started(ProcessInfo { pid: PID, ..ProcessInfo::default() }));
    a.absorb(Record::Tick { time_ns: T0 });
    for r in gc(1, 0, 11, T0 + 100 * MS, 10) {
        a.absorb(r);
    }
    a.absorb(exception(12, T0 + 2_000 * MS, "System.FormatException"));
    // A tick whose drain started before the pause: nothing of the pause's time drained yet.
    a.absorb(Record::Tick { time_ns: T0 + 50 * MS });
    for k in 0..3 {
        a.absorb(cpu(11, T0 + 102 * MS + k * MS, &[0x5100]));
    }
    a.absorb(Record::Tick { time_ns: T0 + 2_100 * MS });
    let text = a.metrics_text();
    assert!(text.contains("thread_kind=\"user_threads\"} 0.03\n"), "{text}");
}

#[test]
fn events_after_the_recordings_end_make_no_samples_but_gcs_still_count() {
    // The end falls between the third and fourth ArgumentException.
    let cfg = AggregatorConfig { freq_hz: 100, events_end_ns: Some(T0 + 12 * MS), keep_gc_history: true, ..AggregatorConfig::default() };
    let mut a = Aggregator::new(cfg);
    for r in records() {
        a.absorb(r);
    }
    let reports = a.event_reports();
    let by_type = &reports[0].1.exceptions_by_type;
    assert_eq!(by_type, &[("System.InvalidOperationException".to_string(), 7), ("System.ArgumentException".to_string(), 3)]);
    assert_eq!(a.profile(ProfileKind::Exceptions, Some(PID), 0, &mut Names).unwrap().total(0), 10);
    // The GC report is the whole stream's, as the live recording's is.
    assert_eq!(reports[0].1.gc.collections, 5);
}

/// A loaded host: another thread's events (flushed from its own buffer) run far ahead of the
/// GC thread's, whose pause arrives after ticks past it. The samples inside the pause wait
/// for their own thread's events, not the process's newest.
#[test]
fn samples_wait_for_their_own_threads_events_not_another_threads() {
    let mut a = Aggregator::new(AggregatorConfig { freq_hz: 100, ..AggregatorConfig::default() });
    a.absorb(Record::Started(ProcessInfo { pid: PID, ..ProcessInfo::default() }));
    for k in 0..3 {
        a.absorb(cpu(11, T0 + 102 * MS + k * MS, &[0x5100]));
    }
    a.absorb(exception(12, T0 + 5_000 * MS, "System.FormatException"));
    a.absorb(Record::Tick { time_ns: T0 + 5_100 * MS });
    a.absorb(Record::Tick { time_ns: T0 + 6_100 * MS });
    for r in gc(1, 0, 11, T0 + 100 * MS, 10) {
        a.absorb(r);
    }
    a.absorb(Record::Tick { time_ns: T0 + 7_100 * MS });
    let text = a.metrics_text();
    assert!(text.contains("thread_kind=\"user_threads\"} 0.03\n"), "{text}");
}

/// An AllocationTick (V4) of `amount` bytes of `ty` objects of `size` bytes.
fn alloc_tick(tid: u64, t: u64, amount: u64, ty: &str, size: u64) -> Record {
    let p = Payload::new(8).u32(amount as u32).u32(0).u16(0).u64(amount).ptr(0x7000).str(ty).u32(0).ptr(0x9000).u64(size);
    clr(tid, t, id::GC_ALLOCATION_TICK, 4, p, &[0x5400, 0x6000])
}

#[test]
fn allocations_sampled_in_slices_are_scaled_to_the_time_followed_and_bytes_come_from_the_counter() {
    let mut a = Aggregator::new(AggregatorConfig { freq_hz: 100, alloc_bytes_from_counters: true, ..AggregatorConfig::default() });
    a.absorb(Record::Started(ProcessInfo { pid: PID, name: "app".into(), container_id: String::new(), runtime_version: "8.0.4".into() }));
    // Slices of 1 s every 5 s from T0: three closed ones (3 s) over 12 s, then one open for 0.5 s
    // at 15 s: 3.5 s covered of 15.5 s followed since the first slice.
    for k in 0..3u64 {
        let start = T0 + k * 5_000 * MS;
        a.absorb(Record::AllocSampling { pid: PID, time_ns: start, on: true });
        for i in 0..10 {
            a.absorb(alloc_tick(11, start + 50 * MS + i * 90 * MS, 100_000, "One", 24));
        }
        a.absorb(Record::AllocSampling { pid: PID, time_ns: start + 1_000 * MS, on: false });
        a.absorb(Record::Tick { time_ns: start + 1_000 * MS });
    }
    a.absorb(Record::AllocSampling { pid: PID, time_ns: T0 + 15_000 * MS, on: true });
    a.absorb(Record::Counter { pid: PID, name: Arc::from("alloc-rate"), value: 4_000_000_123 });
    a.absorb(Record::Counter { pid: PID, name: Arc::from("alloc-rate"), value: 877 });
    a.absorb(Record::Tick { time_ns: T0 + 15_500 * MS });
    let p = a.profile(ProfileKind::Allocs, Some(PID), 0, &mut Names).unwrap();
    let scale = 15_500.0 / 3_500.0;
    let bytes = p.total(1) as f64;
    assert!((bytes / (30.0 * 100_000.0 * scale) - 1.0).abs() < 1e-6, "{bytes} bytes for 30 ticks of 100 KB scaled by {scale}");
    let objects = p.total(0) as f64;
    assert!((objects / (30.0 * 100_000.0 / 24.0 * scale) - 1.0).abs() < 1e-3, "{objects} objects");
    // Exact bytes: the counter's increments, not the sampled ticks.
    let text = a.metrics_text();
    assert!(text.contains(&format!("dotnet_gc_heap_total_allocated_bytes_total{{{LABELS}}} 4000001000\n")), "{text}");
    let ratio: f64 = line(&text, "clrprobe_alloc_sampled_ratio{").rsplit(' ').next().unwrap().parse().unwrap();
    assert!((ratio - 3_500.0 / 15_500.0).abs() < 1e-9, "{ratio}");
    // Without slices nothing is scaled; without the counter the ticks are summed.
    let mut b = Aggregator::new(AggregatorConfig { freq_hz: 100, ..AggregatorConfig::default() });
    b.absorb(Record::Started(ProcessInfo { pid: PID, name: "app".into(), container_id: String::new(), runtime_version: "8.0.4".into() }));
    b.absorb(alloc_tick(11, T0, 100_000, "One", 24));
    b.absorb(Record::Tick { time_ns: T0 + 10_000 * MS });
    assert_eq!(b.profile(ProfileKind::Allocs, Some(PID), 0, &mut Names).unwrap().total(1), 100_000);
    assert!(b.metrics_text().contains(&format!("dotnet_gc_heap_total_allocated_bytes_total{{{LABELS}}} 100000\n")));
}

/// Counts how many kernel stacks were noted before the first was named.
#[derive(Default)]
struct Noting {
    noted: usize,
    noted_before_first_name: Option<usize>,
}

impl Namer for Noting {
    fn stack(&mut self, pid: u32, kernel: &[u64], user: &[u64]) -> Vec<Frame> {
        self.noted_before_first_name.get_or_insert(self.noted);
        Names.stack(pid, kernel, user)
    }
    fn process_name(&mut self, pid: u32) -> String {
        Names.process_name(pid)
    }
    fn note_kernel(&mut self, _kernel: &[u64]) {
        self.noted += 1;
    }
}

#[test]
fn every_kernel_stack_of_a_profile_is_noted_before_the_first_is_named() {
    let mut r = records();
    r.push(Record::OffCpu(StackRecord { pid: PID, tid: 11, comm: Arc::from("worker"), time_ns: T0, kernel: Arc::from(vec![0xffff_0001]), user: Arc::from(vec![0x5000]), count: 5 * MS }));
    r.push(Record::OffCpu(StackRecord { pid: PID, tid: 12, comm: Arc::from("worker"), time_ns: T0, kernel: Arc::from(vec![0xffff_0002]), user: Arc::from(vec![0x5000]), count: 7 * MS }));
    let a = fed(r);
    let mut n = Noting::default();
    a.profile(ProfileKind::Cpu, None, 0, &mut n).unwrap();
    // Six samples on three distinct (thread, stack) keys.
    assert_eq!((n.noted, n.noted_before_first_name), (3, Some(3)));
    let mut n = Noting::default();
    a.profile(ProfileKind::Block, None, 0, &mut n).unwrap();
    assert_eq!((n.noted, n.noted_before_first_name), (2, Some(2)));
}
