//! Bad input: garbage, corrupted and truncated real recordings. Never a panic; typed errors
//! that name the cause; truncated streams give a subset of the events of the whole stream.

mod nettrace_support;

use clrprobe_eventpipe::nettrace::{NetTraceError, StreamStatus};
use nettrace_support::{ARRAYTYPES, CHECKPOINTS, OBJVER4, Rng, load, read_all};

#[test]
fn header_errors_are_typed_and_name_the_cause() {
    let err = |b: &[u8]| read_all(b).err().expect("must fail");
    assert!(matches!(err(b"hello world, not a trace"), NetTraceError::BadMagic(_)));
    assert!(matches!(err(b""), NetTraceError::TruncatedHeader { what: "magic", .. }));
    let mut netperf = 20i32.to_le_bytes().to_vec();
    netperf.extend_from_slice(b"!FastSerialization.1");
    assert!(matches!(err(&netperf), NetTraceError::UnsupportedNetPerf));
    let mut v = b"Nettrace".to_vec();
    v.extend_from_slice(&7u32.to_le_bytes());
    let e = err(&v);
    assert!(e.to_string().contains("stream header"), "{e}");
    let mut v7 = b"Nettrace".to_vec();
    for x in [0u32, 7, 0] {
        v7.extend_from_slice(&x.to_le_bytes());
    }
    assert!(matches!(err(&v7), NetTraceError::UnsupportedVersion(7)));
    // A real header with its pointer size corrupted.
    let mut b = load(CHECKPOINTS);
    let trace_fields = b.windows(5).position(|w| w == b"Trace").expect("Trace type name") + 6;
    b[trace_fields + 32] = 3; // PointerSize
    let e = err(&b);
    assert!(e.to_string().contains("pointer size"), "{e}");
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let real = load(CHECKPOINTS);
    for i in 0..3000 {
        let len = rng.below(2048) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        // A third keep a real header so the garbage reaches the block parsers.
        if i % 3 == 0 {
            let keep = 100.min(real.len());
            b.splice(0..0, real[..keep].iter().copied());
        }
        match read_all(&b) {
            Ok(r) => assert_ne!(r.status, StreamStatus::Reading),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}

/// Flipped bytes in real files: either events or a typed error, never a panic.
#[test]
fn corrupted_recordings_never_panic() {
    let small = load(CHECKPOINTS);
    for at in 0..small.len() {
        for v in [0x00, 0xff, 0x80, small[at] ^ 0x01] {
            let mut b = small.clone();
            b[at] = v;
            if let Ok(r) = read_all(&b) {
                assert_ne!(r.status, StreamStatus::Reading);
            }
        }
    }
    let big = load(ARRAYTYPES);
    let mut rng = Rng(42);
    let mut errors = 0;
    for _ in 0..300 {
        let mut b = big.clone();
        for _ in 0..4 {
            let at = rng.below(b.len() as u64) as usize;
            b[at] = rng.next() as u8;
        }
        match read_all(&b) {
            Ok(r) if r.error.is_some() => errors += 1,
            Ok(_) => {}
            Err(_) => errors += 1,
        }
    }
    assert!(errors > 0, "300 corrupted copies and never an error: corruption goes unnoticed");
}

/// Cuts of real recordings: the events before the cut, a subset of the whole stream's.
fn check_cuts(file: &str, cuts: impl Iterator<Item = usize>) {
    let bytes = load(file);
    let full = read_all(&bytes).expect("full");
    let mut full_sorted = full.events.clone();
    full_sorted.sort();
    let mut last = 0;
    for cut in cuts {
        let cut = cut.min(bytes.len());
        match read_all(&bytes[..cut]) {
            Err(NetTraceError::TruncatedHeader { .. }) => assert!(cut < 200, "{file}: header error at cut {cut}"),
            Err(e) => panic!("{file} cut {cut}: {e}"),
            Ok(r) => {
                assert!(r.error.is_none(), "{file} cut {cut}: {:?}", r.error);
                let want = if cut == bytes.len() { StreamStatus::Complete } else { StreamStatus::Truncated };
                assert_eq!(r.status, want, "{file} cut {cut}");
                assert!(r.events.len() >= last, "{file} cut {cut}: fewer events than a shorter cut");
                last = r.events.len();
                let mut got = r.events;
                got.sort();
                let mut it = full_sorted.iter();
                for e in &got {
                    assert!(it.any(|f| f == e), "{file} cut {cut}: event not in the whole stream");
                }
            }
        }
    }
}

#[test]
fn truncated_recordings_give_a_subset_of_events() {
    let n = load(CHECKPOINTS).len();
    check_cuts(CHECKPOINTS, 0..=n);
    let n = load(ARRAYTYPES).len();
    check_cuts(ARRAYTYPES, (0..4096).chain((4096..n).step_by(4099)).chain([n - 1, n]));
    let n = load(OBJVER4).len();
    check_cuts(OBJVER4, (0..n).step_by(n / 23).chain([n - 1, n]));
}

/// A cut inside an event block keeps the block's whole events: cutting in the middle of a
/// block gives more events than cutting just before it.
#[test]
fn events_of_a_cut_block_are_kept() {
    let bytes = load(OBJVER4);
    let full = read_all(&bytes).expect("full").events.len();
    // The EventBlock objects: "EventBlock" type name, EndObject, int32 size, padding, body.
    let name = b"EventBlock";
    let blocks: Vec<(usize, usize, usize)> = bytes
        .windows(name.len())
        .enumerate()
        .filter(|(_, w)| *w == name)
        .map(|(at, _)| {
            let size_at = at + name.len() + 1;
            let size = i32::from_le_bytes(bytes[size_at..size_at + 4].try_into().unwrap()) as usize;
            let body = (size_at + 4).next_multiple_of(4);
            // The object starts with BeginPrivateObject + 14-byte type header before the name.
            (at - 15, body, size)
        })
        .collect();
    assert!(blocks.len() > 10, "found {} event blocks", blocks.len());
    let (object_start, body, size) = blocks[blocks.len() / 2];
    let before = read_all(&bytes[..object_start]).expect("cut before the block");
    let inside = read_all(&bytes[..body + size / 2]).expect("cut inside the block");
    assert_eq!(before.status, StreamStatus::Truncated);
    assert_eq!(inside.status, StreamStatus::Truncated);
    assert!(
        before.events.len() < inside.events.len() && inside.events.len() < full,
        "before {} inside {} full {full}",
        before.events.len(),
        inside.events.len()
    );
}
