//! The reader over bytes in memory (`InMemory`: blocks decoded in place) against the same bytes
//! read as a stream: every corpus recording whole, cut and corrupted, and random garbage behind
//! a real header, give the same events, status, counters and errors (the same offsets).

mod nettrace_support;

use nettrace_support::{ARRAYTYPES, CHECKPOINTS, OBJVER4, Rng, assert_in_memory_reads_like_a_stream as same, corpus_dir, load};

#[test]
fn every_corpus_recording_reads_the_same() {
    let mut n = 0;
    for entry in std::fs::read_dir(corpus_dir()).expect("corpus") {
        let name = entry.expect("entry").file_name().to_string_lossy().into_owned();
        if name.ends_with(".nettrace") || name.ends_with(".netperf") || name.ends_with(".nettrace.zip") {
            same(&load(&name), &name);
            n += 1;
        }
    }
    assert!(n >= 5, "{n} recordings");
}

#[test]
fn cut_recordings_read_the_same() {
    let small = load(CHECKPOINTS);
    for cut in 0..=small.len() {
        same(&small[..cut], &format!("{CHECKPOINTS} cut at {cut}"));
    }
    // Fewer cuts of the larger file (each read is 10 times longer).
    for (file, cuts) in [(ARRAYTYPES, 97), (OBJVER4, 23)] {
        let b = load(file);
        let n = b.len();
        for cut in (0..2048).chain((2048..n).step_by(n / cuts)).chain([n - 1]) {
            same(&b[..cut], &format!("{file} cut at {cut}"));
        }
    }
}

#[test]
fn corrupted_recordings_read_the_same() {
    let small = load(CHECKPOINTS);
    for at in 0..small.len() {
        for v in [0x00, 0xff, 0x80, small[at] ^ 0x01] {
            let mut b = small.clone();
            b[at] = v;
            same(&b, &format!("{CHECKPOINTS} byte {at} = {v:#x}"));
        }
    }
    let mut rng = Rng(7);
    for (file, copies) in [(ARRAYTYPES, 60), (OBJVER4, 15)] {
        let big = load(file);
        for i in 0..copies {
            let mut b = big.clone();
            for _ in 0..1 + i % 4 {
                let at = rng.below(b.len() as u64) as usize;
                b[at] = rng.next() as u8;
            }
            // Some cut too, so that a corrupt length meets the end of the input.
            if i % 3 == 0 {
                b.truncate(rng.below(b.len() as u64) as usize);
            }
            same(&b, &format!("{file} corrupted copy {i}"));
        }
    }
}

#[test]
fn garbage_behind_a_real_header_reads_the_same() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let real = load(CHECKPOINTS);
    for i in 0..2000 {
        let len = rng.below(2048) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if i % 2 == 0 {
            let keep = 100.min(real.len());
            b.splice(0..0, real[..keep].iter().copied());
        }
        same(&b, &format!("garbage {i}"));
    }
}
