//! NetTrace reader throughput on the largest corpus recording (read from memory: headers,
//! stacks and metadata decoded, payloads left for on-demand decoding), next to a memcpy of the
//! same bytes measured in the same run.
//!
//! `cargo bench -p clrprobe-eventpipe --bench reader`

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

fn best_of(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .expect("runs > 0")
}

const FILES: &[&str] = &[
    // the largest recording: ARM32, 29.6 MB, mostly rundown method events
    "perfview__speedscope__HeartRateMonitor.10068.nettrace.zip",
    // stack-heavy: 35k CPU samples with stacks, 105k events
    "perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace",
];

fn main() {
    let mut c = Criterion::default().sample_size(10).configure_from_args();
    let data: Vec<(&str, Vec<u8>)> = FILES.iter().map(|f| (*f, corpus(f))).collect();
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

    println!("\nsummary (best of 10 runs each, same process):");
    for (name, bytes) in &data {
        let mb = bytes.len() as f64 / 1e6;
        let mut events = 0;
        let t_read = best_of(10, || events = read_all(bytes));
        let mut dst = vec![0u8; bytes.len()];
        let t_copy = best_of(10, || {
            dst.copy_from_slice(black_box(bytes));
            black_box(&dst);
        });
        let read_mbs = mb / t_read.as_secs_f64();
        let copy_mbs = mb / t_copy.as_secs_f64();
        println!(
            "{name}: {mb:.1} MB, {events} events: reader {:.1} ms = {:.2} M events/s, {read_mbs:.0} MB/s; \
             memcpy {copy_mbs:.0} MB/s; reader/memcpy = {:.1} %",
            t_read.as_secs_f64() * 1e3,
            events as f64 / t_read.as_secs_f64() / 1e6,
            100.0 * read_mbs / copy_mbs
        );
    }
}
