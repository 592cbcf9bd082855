//! Any bytes into the perf-map parser, fed in chunks the input chooses: no panic, kept text
//! within the caps, every record readable, lookups in range.
#![no_main]

use clrprobe_symbolizer::perf_map::{MAX_RECORD, MAX_TEXT, PerfMap};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else { return };
    let step = usize::from(split).max(1);
    let mut m = PerfMap::new();
    for chunk in rest.chunks(step) {
        m.feed(chunk);
        if m.len() % 7 == 3 {
            m.index();
        }
    }
    m.finish();
    assert_eq!(m.consumed(), rest.len() as u64);
    assert!(m.len() <= rest.len() / 2 + 1 && rest.len() <= MAX_TEXT + MAX_RECORD);
    let starts: Vec<u64> = m.iter().map(|s| s.start).take(64).collect();
    for a in starts {
        if let Some(s) = m.lookup(a.wrapping_add(1)) {
            assert!(a.wrapping_add(1).wrapping_sub(s.start) < s.size.max(1));
        }
    }
    let _ = m.iter().map(|s| s.name.len() + s.tier.map_or(0, str::len)).sum::<usize>();
});
