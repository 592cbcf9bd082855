//! NetTrace reader throughput on corpus recordings (the largest, a stack-heavy one and a small
//! one; read from memory: headers, stacks and metadata decoded, payloads left for on-demand
//! decoding), next to a memcpy of the same bytes measured in the same run.
//!
//! `cargo bench -p clrprobe-eventpipe --bench reader`

use std::hint::black_box;
use std::time::{Duration, Instant};

use clrprobe_eventpipe::nettrace::NetTraceReader;
use criterion::{Criterion, Throughput};

use clrprobe_tests::corpus::read as corpus;

/// Reads every event, touching what a profiler needs per event. Returns the event count.
fn read_all(bytes: &[u8]) -> u64 {
    let mut r = NetTraceReader::new(bytes).expect("header");
    let mut n = 0u64;
    let mut acc = 0u64;
    while let Some(e) = r.next_event().expect("event") {
        n += 1;
        acc = acc
            .wrapping_add(e.timestamp() as u64)
            .wrapping_add(e.thread_id())
            .wrapping_add(e.stack().len() as u64)
            .wrapping_add(e.stack().first().copied().unwrap_or(0))
            .wrapping_add(e.payload().len() as u64)
            .wrapping_add(u64::from(e.metadata().event_id));
    }
    black_box(acc);
    n
}

/// CPU time of this thread (time spent waiting for a core on a loaded machine is not counted).
fn thread_cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The least (wall, thread CPU) time of one call over `runs` calls.
fn best_of(runs: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    let (mut wall, mut cpu) = (Duration::MAX, Duration::MAX);
    for _ in 0..runs {
        let (t, c) = (Instant::now(), thread_cpu());
        f();
        cpu = cpu.min(thread_cpu() - c);
        wall = wall.min(t.elapsed());
    }
    (wall, cpu)
}

const FILES: &[&str] = &[
    // the largest recording: ARM32, 29.6 MB, mostly rundown method events
    "perfview__speedscope__HeartRateMonitor.10068.nettrace.zip",
    // stack-heavy: 35k CPU samples with stacks, 105k events
    "perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace",
    // small (0.5 MB, 2k events): an EventSource with array fields and full rundown, V5
    "perfview__eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace",
];

fn main() {
    let mut c = Criterion::default().sample_size(10).configure_from_args();
    // READER_BENCH_FILES=objver4: only the files whose name contains it.
    let only = std::env::var("READER_BENCH_FILES").unwrap_or_default();
    let data: Vec<(&str, Vec<u8>)> = FILES.iter().filter(|f| f.contains(&only)).map(|f| (*f, corpus(f))).collect();
    for (name, bytes) in &data {
        let mut g = c.benchmark_group(name.split("__").last().unwrap_or(name));
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.bench_function("nettrace_reader", |b| b.iter(|| read_all(black_box(bytes))));
        let mut dst = vec![0u8; bytes.len()];
        g.bench_function("memcpy", |b| {
            b.iter(|| {
                dst.copy_from_slice(black_box(bytes));
                black_box(&dst);
            })
        });
        g.finish();
    }
    c.final_summary();

    // READER_BENCH_RUNS=1 for a run under a profiler or valgrind.
    let runs: usize = std::env::var("READER_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    println!(
        "\nsummary (best of {runs} interleaved runs each, same process; wall time, then thread CPU time; load {} at start):",
        load()
    );
    for (name, bytes) in &data {
        let mb = bytes.len() as f64 / 1e6;
        let mut events = 0;
        let mut dst = vec![0u8; bytes.len()];
        let (mut read, mut copy) = ((Duration::MAX, Duration::MAX), (Duration::MAX, Duration::MAX));
        for _ in 0..runs {
            let r = best_of(1, || events = read_all(bytes));
            let c = best_of(1, || {
                dst.copy_from_slice(black_box(bytes));
                black_box(&dst);
            });
            read = (read.0.min(r.0), read.1.min(r.1));
            copy = (copy.0.min(c.0), copy.1.min(c.1));
        }
        let line = |what: &str, read: Duration, copy: Duration| {
            let read_mbs = mb / read.as_secs_f64();
            let copy_mbs = mb / copy.as_secs_f64();
            println!(
                "{name} ({what}): {mb:.1} MB, {events} events: reader {:.2} ms = {:.2} M events/s, {read_mbs:.0} MB/s; \
                 memcpy {copy_mbs:.0} MB/s; reader/memcpy = {:.1} %",
                read.as_secs_f64() * 1e3,
                events as f64 / read.as_secs_f64() / 1e6,
                100.0 * read_mbs / copy_mbs
            );
        };
        line("wall", read.0, copy.0);
        line("thread CPU", read.1, copy.1);
    }
    println!("load at end: {}", load());
}

/// The 1, 5 and 15 minute load averages (ratios are only comparable at a similar load).
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}
