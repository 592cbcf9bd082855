//! Any bytes into the jitdump reader, whole and in chunks the input chooses: no panic, the
//! same records either way, lookups in range.
#![no_main]

use clrprobe_symbolizer::jitdump::{JitDump, parse_jitdump};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else { return };
    let whole = parse_jitdump(rest);
    let mut j = JitDump::new();
    let mut failed = false;
    // At most 64 feeds: each feed re-reads the unfinished record, so byte-sized steps over a
    // big record would spend the run copying.
    for chunk in rest.chunks(usize::from(split).max(rest.len() / 64).max(1)) {
        if j.feed(chunk).is_err() {
            failed = true;
            break;
        }
    }
    if let (Ok((records, _)), false) = (&whole, failed) {
        assert_eq!(records.len(), j.len());
    }
    for r in j.records().iter().take(64) {
        if let Some(hit) = j.lookup(r.addr) {
            assert!(r.addr - hit.addr < hit.size.max(1));
        }
    }
});
