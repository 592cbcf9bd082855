//! Any bytes into the NetTrace reader twice, as a stream and in place (`InMemory`): no panic,
//! and the same events (every field, payload and stack), status, counters and error.
#![no_main]

use libfuzzer_sys::fuzz_target;

use clrprobe_eventpipe::nettrace::{InMemory, NetTraceReader};

fuzz_target!(|data: &[u8]| {
    let (a, b) = match (NetTraceReader::new(data), NetTraceReader::new(InMemory(data))) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(a), Err(b)) => {
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
            return;
        }
        (a, b) => panic!("stream {:?}, in place {:?}", a.err(), b.err()),
    };
    let (mut a, mut b) = (a, b);
    assert_eq!(a.trace_info(), b.trace_info());
    loop {
        match (a.next_event(), b.next_event()) {
            (Ok(Some(x)), Ok(Some(y))) => {
                assert_eq!(
                    (x.timestamp(), x.thread_id(), x.capture_thread_id(), x.processor_number(), x.sequence_number()),
                    (y.timestamp(), y.thread_id(), y.capture_thread_id(), y.processor_number(), y.sequence_number())
                );
                assert_eq!((x.activity_id(), x.related_activity_id()), (y.activity_id(), y.related_activity_id()));
                assert_eq!((x.stack(), x.payload()), (y.stack(), y.payload()));
                assert_eq!(**x.metadata(), **y.metadata());
            }
            (Ok(None), Ok(None)) => break,
            (Err(x), Err(y)) => {
                assert_eq!(format!("{x:?}"), format!("{y:?}"));
                break;
            }
            (x, y) => panic!("stream {:?}, in place {:?}", x.map(|e| e.is_some()), y.map(|e| e.is_some())),
        }
    }
    assert_eq!((a.status(), a.stats()), (b.status(), b.stats()));
});
