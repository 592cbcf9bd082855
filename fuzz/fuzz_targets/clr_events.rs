//! Any bytes as a NetTrace stream whose events go through the CLR event decoders (runtime,
//! rundown, sample profiler) and the EventSource field decoder: no panic.
#![no_main]

use clrprobe_eventpipe::nettrace::NetTraceReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = NetTraceReader::new(data) else { return };
    let mut n = 0usize;
    while let Ok(Some(ev)) = r.next_event() {
        let raw = ev.raw_event();
        if let Ok(e) = clr_events::decode(&raw) {
            n += format!("{e:?}").len();
        }
        // Every event again as each runtime provider, to reach every decoder with real bytes.
        for provider in [clr_events::providers::RUNTIME, clr_events::providers::RUNDOWN] {
            let as_runtime = clr_events::RawEvent { provider, ..raw };
            if let Ok(e) = clr_events::decode(&as_runtime) {
                n += format!("{e:?}").len();
            }
        }
        if let Some(schema) = ev.metadata().schema.as_ref() {
            let _ = clr_events::decode_fields(schema, ev.payload()).map(|f| n += f.len());
        }
    }
    std::hint::black_box(n);
});
