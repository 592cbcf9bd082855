//! Any bytes into the NetTrace reader: no panic, no unbounded allocation. Read everything,
//! touching every accessor of every event.
#![no_main]

use libfuzzer_sys::fuzz_target;

use clrprobe_eventpipe::nettrace::NetTraceReader;

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = NetTraceReader::new(data) else {
        return;
    };
    let mut sink = 0u64;
    loop {
        match r.next_event() {
            Ok(Some(e)) => {
                sink = sink
                    .wrapping_add(e.timestamp() as u64)
                    .wrapping_add(e.time_ns() as u64)
                    .wrapping_add(e.thread_id())
                    .wrapping_add(e.capture_thread_id())
                    .wrapping_add(u64::from(e.processor_number()))
                    .wrapping_add(u64::from(e.sequence_number()))
                    .wrapping_add(e.stack().iter().fold(0u64, |a, &ip| a.wrapping_add(ip)))
                    .wrapping_add(e.payload().len() as u64)
                    .wrapping_add(u64::from(e.activity_id()[0]))
                    .wrapping_add(e.raw_event().payload.len() as u64)
                    .wrapping_add(e.metadata().provider.len() as u64);
            }
            Ok(None) | Err(_) => break,
        }
    }
    let _ = (r.status(), r.stats(), std::hint::black_box(sink));
});
