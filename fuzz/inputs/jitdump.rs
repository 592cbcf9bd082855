//! What one input of the jitdump fuzz target means and checks, shared by the target
//! (`fuzz/fuzz_targets/jitdump.rs`) and the test that replays `fuzz/regressions/jitdump`
//! (`symbolizer/tests/fuzz_regressions.rs`).
//!
//! Byte 0 chooses the feed step, the rest is the file: read whole and in chunks, no panic, the
//! same records either way, lookups in range.

use clrprobe_symbolizer::jitdump::{JitDump, parse_jitdump};

/// Runs one input through the reader.
pub fn run(data: &[u8]) {
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
}
