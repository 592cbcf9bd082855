//! A live source reads a stream a batch at a time (payloads sharing one buffer): the items are
//! those read one at a time, in the same order, field for field.

use clrprobe_pipeline::stream::{ClrStream, Payload, Record, StreamItem};

fn item(i: StreamItem) -> Record {
    match i {
        StreamItem::Clr(r) => Record::Clr(r),
        StreamItem::Counter { name, value } => Record::Counter { pid: 7, name: name.into(), value },
    }
}

#[test]
fn batches_give_the_items_read_one_at_a_time() {
    for file in ["perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace", "perfview__speedscope__only_managed_samples.nettrace"] {
        let bytes = clrprobe_tests::corpus::read(file);
        let mut one = ClrStream::new(7, &bytes[..]).expect("header");
        let mut singles = Vec::new();
        while let Some(i) = one.next_item().expect("stream") {
            singles.push(item(i));
        }
        for max in [1, 3, 256] {
            let mut batched = ClrStream::new(7, &bytes[..]).expect("header");
            let (mut got, mut items, mut batches) = (Vec::new(), Vec::new(), 0);
            loop {
                let more = batched.next_items_tapped(&mut |_| {}, &mut items, max).expect("stream");
                assert!(items.len() <= max);
                batches += 1;
                got.extend(items.drain(..).map(item));
                if !more {
                    break;
                }
            }
            assert!(!singles.is_empty(), "{file}");
            assert_eq!(got.len(), singles.len(), "{file}, batches of {max}");
            assert!(got == singles, "{file}, batches of {max}");
            if max == 256 {
                assert!(batches < singles.len() / 4, "{file}: {batches} batches for {} items", singles.len());
            }
        }
    }
}

/// A batch's records share one payload buffer, handed over without a copy; once they are
/// dropped the buffer comes back whole and holds the next batch's payloads.
#[test]
fn a_batch_buffer_comes_back_and_is_filled_again() {
    let bytes = clrprobe_tests::corpus::read("perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace");
    let mut s = ClrStream::new(7, &bytes[..]).expect("header");
    let (mut records, mut counters) = (Vec::new(), Vec::new());
    while records.len() < 2 {
        records.clear();
        assert!(s.next_batch_tapped(&mut |_| {}, &mut records, &mut counters, 64).expect("stream"), "a batch of 2 events or more");
    }
    let bytes_of = |r: &clrprobe_pipeline::stream::ClrRecord| r.payload.as_ptr_range();
    let (lo, hi) = (bytes_of(&records[0]).start, bytes_of(&records[records.len() - 1]).end);
    for w in records.windows(2) {
        assert_eq!(bytes_of(&w[0]).end, bytes_of(&w[1]).start, "payloads laid end to end in one buffer");
    }
    assert!(s.wants_buffer(), "the buffer went with the records");
    let first = records[0].payload.clone();
    assert!(records[1].payload.clone().into_buffer().is_none(), "shared: not given back");
    assert!(Payload::let_go(records.iter_mut().map(|r| &mut r.payload)).is_none(), "`first` still holds it");
    assert!(records.iter().all(|r| r.payload.is_empty()), "let go");
    records.clear();
    let buf = first.into_buffer().expect("the last holder gets the buffer");
    assert_eq!(buf.as_ptr_range().start, lo);
    assert!(buf.len() >= hi as usize - lo as usize);
    let at = buf.as_ptr();
    s.reuse_buffer(buf);
    assert!(!s.wants_buffer());
    records.clear();
    while records.is_empty() {
        assert!(s.next_batch_tapped(&mut |_| {}, &mut records, &mut counters, 1).expect("stream"));
    }
    assert_eq!(records[0].payload.as_ptr(), at, "the next batch's payloads in the buffer given back");
}

/// A record's time is the session's origin plus the event's own time (`EventRef::time_ns`),
/// at least 0, whatever the stream's tick: recordings from Windows (QPC ticks of 100 ns or
/// less even) and Linux (1 ns), read side by side with the reader alone.
#[test]
fn record_times_are_the_origin_plus_the_event_time() {
    use clrprobe_eventpipe::nettrace::NetTraceReader;
    let mut freqs = Vec::new();
    for file in [
        "perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace",
        "perfview__eventpipe-dotnetcore6.0-win-x64-executioncheckpoints.nettrace",
        "perfview__speedscope__only_managed_samples.nettrace",
        "perfview__speedscope__HeartRateMonitor.10068.nettrace.zip",
    ] {
        let bytes = clrprobe_tests::corpus::read(file);
        let mut s = ClrStream::new(7, &bytes[..]).expect("header");
        let mut reader = NetTraceReader::new(&bytes[..]).expect("header");
        freqs.push(reader.trace_info().qpc_frequency);
        let origin = s.origin_ns();
        let mut n = 0;
        while let Some(r) = s.next_record().expect("stream") {
            let ev = reader.next_event().expect("stream").expect("as many events");
            assert_eq!(r.time_ns, origin.saturating_add(ev.time_ns()).max(0) as u64, "{file}, event {n}");
            n += 1;
        }
        assert!(reader.next_event().expect("stream").is_none(), "{file}: as many events");
        assert!(n > 0, "{file}: no events");
    }
    // Both of the reader's ways to a time were taken: a tick of whole ns and one that is not.
    assert!(freqs.iter().any(|f| 1_000_000_000 % f == 0) && freqs.iter().any(|f| 1_000_000_000 % f != 0), "{freqs:?}");
}
