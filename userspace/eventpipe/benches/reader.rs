//! NetTrace reader throughput on corpus recordings (the largest, a stack-heavy one and a small
//! one; read from memory: headers, stacks and metadata decoded, payloads left for on-demand
//! decoding), next to a memcpy of the same bytes measured in the same run. Both inputs: the
//! bytes as a stream (`&[u8]` as `io::Read`: blocks copied into the reader's buffers, as from
//! a socket) and in place (`InMemory`: blocks decoded where they are).
//!
//! `cargo bench -p clrprobe-eventpipe --bench reader`

use std::hint::black_box;
use std::time::{Duration, Instant};

use clrprobe_eventpipe::nettrace::{InMemory, NetTraceReader, Source};
use criterion::{Criterion, Throughput};

use clrprobe_tests::corpus::read as corpus;

/// Reads every event of the bytes as a stream. (Not inlined, nor `read_slice`: a profiler's
/// `--toggle-collect` counts one of them.)
#[inline(never)]
fn read_all(bytes: &[u8]) -> u64 {
    read_events(bytes)
}

/// Reads every event of the bytes in place.
#[inline(never)]
fn read_slice(bytes: &[u8]) -> u64 {
    read_events(InMemory(bytes))
}

/// Reads every event, touching what a profiler needs per event. Returns the event count.
fn read_events<S: Source>(input: S) -> u64 {
    let mut r = NetTraceReader::new(input).expect("header");
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
        g.bench_function("nettrace_reader_slice", |b| b.iter(|| read_slice(black_box(bytes))));
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
        let (mut read, mut slice, mut copy) = ((Duration::MAX, Duration::MAX), (Duration::MAX, Duration::MAX), (Duration::MAX, Duration::MAX));
        assert_eq!(read_slice(bytes), read_all(bytes), "{name}: in place and as a stream");
        // The same recording's blocks WARM_COPIES times in one stream (V4 only): one reader
        // reads them all, as the pipeline keeps one reader per stream.
        // READER_BENCH_WARM=0: not (under a profiler).
        let long = if std::env::var("READER_BENCH_WARM").as_deref() == Ok("0") { None } else { repeated(bytes, WARM_COPIES) };
        if let Some(long) = &long {
            assert_eq!(read_all(long), WARM_COPIES as u64 * read_all(bytes), "{name}: the repeated stream");
        }
        for _ in 0..runs {
            let r = best_of(1, || events = read_all(bytes));
            let s = best_of(1, || events = read_slice(bytes));
            let c = best_of(1, || {
                dst.copy_from_slice(black_box(bytes));
                black_box(&dst);
            });
            read = (read.0.min(r.0), read.1.min(r.1));
            slice = (slice.0.min(s.0), slice.1.min(s.1));
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
        line("in place, wall", slice.0, copy.0);
        line("in place, thread CPU", slice.1, copy.1);
        if let Some(long) = &long {
            // What a copy after the first costs (the buffers grown, the allocator settled)
            // next to a new reader's read, in a loop of their own: the long stream evicts the
            // bytes the memcpy above reads from the caches (it ran at half speed beside it).
            let (mut fresh, mut all) = (Duration::MAX, Duration::MAX);
            for _ in 0..runs {
                fresh = fresh.min(best_of(1, || events = read_all(bytes)).1);
                all = all.min(
                    best_of(1, || {
                        black_box(read_all(long));
                    })
                    .1,
                );
            }
            let warm = all.saturating_sub(fresh) / (WARM_COPIES as u32 - 1);
            println!(
                "{name} (thread CPU, one reader per read vs one reader over {WARM_COPIES} copies): new reader {:.2} ms, \
                 each copy after the first {:.2} ms ({:+.1} %)",
                fresh.as_secs_f64() * 1e3,
                warm.as_secs_f64() * 1e3,
                100.0 * (warm.as_secs_f64() / fresh.as_secs_f64() - 1.0)
            );
        }
    }
    println!("load at end: {}", load());
}

/// Copies of a recording in the stream [`repeated`] makes.
const WARM_COPIES: usize = 5;

/// A V4/V5 stream holding the objects of `bytes` (a V4/V5 recording whose last object is a
/// sequence point) `copies` times, each copy at the offset modulo 4 of the first (blocks are
/// aligned on stream offsets): between copies, an object of a type the reader skips, sized
/// to restore the alignment. `None` for other recordings.
fn repeated(bytes: &[u8], copies: usize) -> Option<Vec<u8>> {
    // Magic, FastSerialization header, then the Trace object (tag, type header with "Trace",
    // its fields, EndObject): 102 bytes; the stream ends with NullReference.
    const HEADER: usize = 102;
    if bytes.len() <= HEADER + 1 || bytes[8..12] != 20i32.to_le_bytes() || &bytes[47..52] != b"Trace" || bytes.last() != Some(&1) {
        return None;
    }
    let body = &bytes[HEADER..bytes.len() - 1];
    let mut out = bytes[..HEADER].to_vec();
    for k in 0..copies {
        if k > 0 {
            // tag, type header (BeginPrivateObject, NullReference, version 0, min version 0,
            // name length 1), name, EndObject, size, padding to 4, body, EndObject.
            let at = out.len();
            let mut filler = vec![5u8, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, b'X', 6];
            let pad = (4 - (at + filler.len() + 4) % 4) % 4;
            // The next copy must start where the first did, modulo 4.
            let len_without_body = filler.len() + 4 + pad + 1;
            let size = (HEADER + 4 * 4 - (at + len_without_body) % 4) % 4;
            filler.extend_from_slice(&(size as i32).to_le_bytes());
            filler.extend(std::iter::repeat_n(0u8, pad + size));
            filler.push(6);
            out.extend_from_slice(&filler);
            assert_eq!(out.len() % 4, HEADER % 4, "repeated: copy misaligned");
        }
        out.extend_from_slice(body);
    }
    out.push(1);
    Some(out)
}

/// The 1, 5 and 15 minute load averages (ratios are only comparable at a similar load).
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}
