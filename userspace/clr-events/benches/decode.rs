//! Measures decoding cost on real events, and what producing owned `String`s for every string
//! field would add over the borrowed `Utf16Str` views the decoders return.
//!
//! `cargo bench -p clr-events --bench decode`

use std::hint::black_box;
use std::time::Instant;

use clr_events::{ClrEvent, RawEvent, decode, providers};
use clrprobe_eventpipe::nettrace::NetTraceReader;

struct Owned {
    provider: &'static str,
    event_id: u16,
    version: u8,
    pointer_size: u8,
    payload: Vec<u8>,
}

use clrprobe_tests::corpus::read as load;

fn collect(name: &str) -> Vec<Owned> {
    let bytes = load(name);
    let mut r = NetTraceReader::new(&bytes[..]).expect("reader");
    let mut out = Vec::new();
    while let Some(e) = r.next_event().expect("event") {
        let raw = e.raw_event();
        let provider = match raw.provider {
            p if p == providers::RUNTIME => providers::RUNTIME,
            p if p == providers::RUNDOWN => providers::RUNDOWN,
            p if p == providers::SAMPLE_PROFILER => providers::SAMPLE_PROFILER,
            _ => continue,
        };
        out.push(Owned {
            provider,
            event_id: raw.event_id,
            version: raw.version,
            pointer_size: raw.pointer_size,
            payload: raw.payload.to_vec(),
        });
    }
    out
}

/// Converts every string of the event to `String`, as an owning API would have to.
fn own_strings(ev: &ClrEvent<'_>) -> usize {
    let mut n = 0;
    let mut add = |s: &clr_events::Utf16Str<'_>| n += black_box(s.to_string_lossy()).len();
    match ev {
        ClrEvent::MethodLoadVerbose(m)
        | ClrEvent::MethodDcEndVerbose(m)
        | ClrEvent::MethodDcStartVerbose(m)
        | ClrEvent::MethodUnloadVerbose(m) => {
            for s in [&m.namespace, &m.name, &m.signature].into_iter().flatten() {
                add(s);
            }
        }
        ClrEvent::ModuleLoad(m) | ClrEvent::ModuleDcEnd(m) | ClrEvent::ModuleDcStart(m) => {
            add(&m.il_path);
            add(&m.native_path);
            for p in [&m.managed_pdb, &m.native_pdb].into_iter().flatten() {
                add(&p.build_path);
            }
        }
        ClrEvent::AllocationTick(t) => {
            if let Some(s) = &t.type_name {
                add(s);
            }
        }
        _ => {}
    }
    n
}

fn run(label: &str, events: &[Owned], rounds: usize) {
    let bytes: usize = events.iter().map(|e| e.payload.len()).sum();
    let raw: Vec<RawEvent<'_>> = events
        .iter()
        .map(|e| RawEvent {
            provider: e.provider,
            event_id: e.event_id,
            version: e.version,
            payload: &e.payload,
            pointer_size: e.pointer_size,
        })
        .collect();
    // Warm up.
    for r in &raw {
        black_box(decode(r).ok());
    }
    let t = Instant::now();
    for _ in 0..rounds {
        for r in &raw {
            black_box(decode(black_box(r)).expect("decodes"));
        }
    }
    let borrowed = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut chars = 0;
    for _ in 0..rounds {
        for r in &raw {
            let ev = decode(black_box(r)).expect("decodes");
            chars += own_strings(&ev);
        }
    }
    let owned = t.elapsed().as_secs_f64();
    black_box(chars);
    let n = (events.len() * rounds) as f64;
    println!(
        "{label}: {} events, {:.1} MB payload; borrowed {:.1} ns/event ({:.0} MB/s); \
         +String for every string {:.1} ns/event ({:.0} MB/s), x{:.2}",
        events.len(),
        bytes as f64 / 1e6,
        borrowed * 1e9 / n,
        (bytes * rounds) as f64 / borrowed / 1e6,
        owned * 1e9 / n,
        (bytes * rounds) as f64 / owned / 1e6,
        owned / borrowed
    );
}

fn main() {
    let objver4 = collect("perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace");
    run("objver4 (.NET Core 3.0, GC/alloc/samples)", &objver4, 20);
    let hrm = collect("perfview__speedscope__HeartRateMonitor.10068.nettrace.zip");
    run("HeartRateMonitor (ARM32, ~107k rundown methods)", &hrm, 10);
    let methods: Vec<Owned> = hrm
        .into_iter()
        .filter(|e| e.provider == providers::RUNDOWN && e.event_id == 144)
        .collect();
    run("MethodDCEndVerbose only", &methods, 10);
}
