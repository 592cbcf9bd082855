//! `trace --dump` (JSON and text) throughput next to the bare NetTrace reader, on the same bytes
//! in the same run (from memory, output to a sink). The dump must keep at least 25 % of the
//! reader's speed.
//!
//! `cargo bench -p clrprobe --bench dump`: criterion's groups, then a summary of interleaved
//! runs (best of each, wall and thread CPU time) with the dump/reader ratio and the load, and a
//! floor: the same JSON bytes written from a prebuilt buffer (what any dump must spend on its
//! output besides reading).

use std::hint::black_box;
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clrprobe_eventpipe::nettrace::NetTraceReader;
use criterion::{Criterion, Throughput};

fn corpus(name: &str) -> Vec<u8> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/testdata/nettrace"));
    assert!(dir.is_dir(), "NetTrace corpus missing: {}", dir.display());
    let bytes = std::fs::read(dir.join(name)).expect("corpus file");
    if !name.ends_with(".zip") {
        return bytes;
    }
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("zip");
    let mut f = zip.by_index(0).expect("entry");
    let mut out = Vec::new();
    f.read_to_end(&mut out).expect("unzip");
    out
}

/// What the reader alone does per event (as in the eventpipe crate's reader bench).
fn read_all(bytes: &[u8]) -> u64 {
    let mut r = NetTraceReader::new(bytes).expect("header");
    let mut acc = 0u64;
    while let Some(e) = r.next_event().expect("event") {
        acc = acc
            .wrapping_add(e.timestamp() as u64)
            .wrapping_add(e.thread_id())
            .wrapping_add(e.stack().len() as u64)
            .wrapping_add(e.stack().first().copied().unwrap_or(0))
            .wrapping_add(e.payload().len() as u64)
            .wrapping_add(u64::from(e.metadata().event_id));
    }
    acc
}

/// A sink that counts what it is given.
struct Count(u64);

impl std::io::Write for Count {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Output bytes of one dump (written to a counting sink).
fn dump(bytes: &[u8], json: bool) -> u64 {
    let mut out = Count(0);
    clrprobe::trace::dump_from(black_box(bytes), "bench", json, &mut out).expect("dump");
    out.0
}

/// The output's floor: the dump's finished bytes (made beforehand) put into a reused buffer of
/// the dump's chunk size and handed to the sink with `write_all`, as the dump does with the
/// bytes it formats. No dump can take less than the reader plus this.
fn write_floor(lines: &[u8]) -> u64 {
    use std::io::Write;
    const CHUNK: usize = 256 << 10;
    let mut out = Count(0);
    let mut buf = Vec::with_capacity(CHUNK);
    for chunk in black_box(lines).chunks(CHUNK) {
        buf.clear();
        buf.extend_from_slice(chunk);
        out.write_all(black_box(&buf)).expect("sink");
    }
    out.0
}

fn dump_bytes(bytes: &[u8], json: bool) -> Vec<u8> {
    let mut out = Vec::new();
    clrprobe::trace::dump_from(bytes, "bench", json, &mut out).expect("dump");
    out
}

const FILES: &[&str] = &[
    // stack-heavy: 35k CPU samples with stacks, 35k allocation ticks, 105k events
    "perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace",
    // event-heavy: ARM32, 29.6 MB, mostly rundown method events with names
    "perfview__speedscope__HeartRateMonitor.10068.nettrace.zip",
    // EventSource events with array fields, full rundown
    "perfview__eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace",
];

/// CPU time of this thread (time spent waiting for a core on a loaded machine is not counted).
#[cfg(target_os = "linux")]
fn thread_cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[cfg(not(target_os = "linux"))]
fn thread_cpu() -> Duration {
    Duration::ZERO
}

/// (wall, thread CPU) of one call.
fn timed(f: impl FnOnce()) -> (Duration, Duration) {
    let (t, c) = (Instant::now(), thread_cpu());
    f();
    (t.elapsed(), thread_cpu() - c)
}

fn best(a: (Duration, Duration), b: (Duration, Duration)) -> (Duration, Duration) {
    (a.0.min(b.0), a.1.min(b.1))
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// A filter (`cargo bench -p clrprobe --bench dump -- objver4`) also picks the summary's files.
fn picked(name: &str) -> bool {
    let filters: Vec<String> =
        std::env::args().skip(1).filter(|a| !a.starts_with('-') && a.parse::<f64>().is_err()).collect();
    filters.is_empty() || filters.iter().any(|f| name.contains(f.split('/').next().unwrap_or(f)))
}

fn main() {
    let data: Vec<(&str, Vec<u8>)> = FILES.iter().map(|f| (*f, corpus(f))).collect();
    // `DUMP_BENCH_LOOP=N`: only N JSON dumps of each file the filter picks, for a profiler
    // (`perf record`); `DUMP_BENCH_SUMMARY=1`: the summary without criterion's groups.
    if let Some(n) = std::env::var("DUMP_BENCH_LOOP").ok().and_then(|n| n.parse::<usize>().ok()) {
        for (name, bytes) in data.iter().filter(|(name, _)| picked(name)) {
            let out: u64 = (0..n).map(|_| dump(bytes, true)).sum();
            println!("{name}: {n} dumps, {out} bytes out");
        }
        return;
    }
    let mut c = Criterion::default().sample_size(10).configure_from_args();
    for (name, bytes) in data.iter().filter(|_| std::env::var_os("DUMP_BENCH_SUMMARY").is_none()) {
        let mut g = c.benchmark_group(name.split("__").last().unwrap_or(name));
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.bench_function("nettrace_reader", |b| b.iter(|| black_box(read_all(black_box(bytes)))));
        g.bench_function("dump_json", |b| b.iter(|| dump(bytes, true)));
        g.bench_function("dump_text", |b| b.iter(|| dump(bytes, false)));
        g.finish();
    }
    c.final_summary();

    const RUNS: usize = 20;
    println!("\nsummary (best of {RUNS} interleaved runs each, same process; load {} at start):", load());
    for (name, bytes) in data.iter().filter(|(name, _)| picked(name)) {
        let mb = bytes.len() as f64 / 1e6;
        let never = (Duration::MAX, Duration::MAX);
        let (mut read, mut json, mut text, mut floor) = (never, never, never, never);
        let (mut json_out, mut text_out) = (0, 0);
        let json_lines = dump_bytes(bytes, true);
        for _ in 0..RUNS {
            read = best(read, timed(|| {
                black_box(read_all(bytes));
            }));
            json = best(json, timed(|| json_out = dump(bytes, true)));
            text = best(text, timed(|| text_out = dump(bytes, false)));
            floor = best(floor, timed(|| {
                black_box(write_floor(&json_lines));
            }));
        }
        drop(json_lines);
        let short = name.split("__").last().unwrap_or(name);
        for (clock, pick) in [("wall", 0usize), ("thread CPU", 1)] {
            let t = |d: (Duration, Duration)| if pick == 0 { d.0 } else { d.1 }.as_secs_f64();
            let (r, j, x, f) = (t(read), t(json), t(text), t(floor));
            println!(
                "{short} ({clock}): {mb:.1} MB in; reader {:.2} ms ({:.0} MB/s); dump --json {:.2} ms ({:.0} MB/s, {:.1} MB out) \
                 = {:.1} % of the reader; text {:.2} ms ({:.1} MB out) = {:.1} % of the reader",
                r * 1e3,
                mb / r,
                j * 1e3,
                mb / j,
                json_out as f64 / 1e6,
                100.0 * r / j,
                x * 1e3,
                text_out as f64 / 1e6,
                100.0 * r / x,
            );
            println!(
                "{short} ({clock}): floor: the JSON bytes written from a prebuilt buffer {:.2} ms ({:.0} MB/s out); \
                 reader + floor {:.2} ms = at most {:.1} % of the reader; dump --json beyond reader + floor {:.2} ms",
                f * 1e3,
                json_out as f64 / 1e6 / f,
                (r + f) * 1e3,
                100.0 * r / (r + f),
                (j - r - f) * 1e3,
            );
        }
    }
    println!("load at end: {}", load());
}
