//! `trace --dump --json` throughput next to the bare NetTrace reader, on the same bytes in the
//! same run (from memory, output to a sink). The dump must keep at least 25 % of the reader's
//! speed.
//!
//! `cargo bench -p clrprobe --bench dump`

use std::hint::black_box;
use std::path::PathBuf;

use clrprobe_eventpipe::nettrace::NetTraceReader;
use criterion::{Criterion, Throughput};

fn corpus(name: &str) -> Vec<u8> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/testdata/nettrace"));
    assert!(dir.is_dir(), "NetTrace corpus missing: {}", dir.display());
    std::fs::read(dir.join(name)).expect("corpus file")
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
            .wrapping_add(e.payload().len() as u64)
            .wrapping_add(u64::from(e.metadata().event_id));
    }
    acc
}

const FILES: &[&str] = &[
    // stack-heavy: 35k CPU samples with stacks, 105k events, runtime events of many kinds
    "perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace",
    // EventSource events with array fields, full rundown
    "perfview__eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace",
];

fn main() {
    let mut c = Criterion::default().sample_size(10).configure_from_args();
    for name in FILES {
        let bytes = corpus(name);
        let mut g = c.benchmark_group(name.split("__").last().unwrap_or(name));
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.bench_function("nettrace_reader", |b| b.iter(|| black_box(read_all(black_box(&bytes)))));
        g.bench_function("dump_json", |b| {
            b.iter(|| clrprobe::trace::dump_from(black_box(&bytes[..]), name, true, std::io::sink()).expect("dump"))
        });
        g.bench_function("dump_text", |b| {
            b.iter(|| clrprobe::trace::dump_from(black_box(&bytes[..]), name, false, std::io::sink()).expect("dump"))
        });
        g.finish();
    }
    c.final_summary();
}
