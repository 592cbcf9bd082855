//! Replays the inputs that once crashed the clr_events fuzz target (`fuzz/regressions/clr_events`,
//! read as the target reads them: `fuzz/inputs/clr_events.rs`).
use std::path::Path;

use clr_events::DecodeError;

#[path = "../../../fuzz/inputs/clr_events.rs"]
mod input;

fn regression(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/clr_events").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_regression_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/clr_events");
    let files: Vec<_> = std::fs::read_dir(&dir).expect("regressions").flatten().map(|e| e.path()).collect();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    for f in files {
        input::run(&std::fs::read(&f).expect("readable"));
    }
}

/// 4 KiB: an array of 2048 arrays of 65535 empty structs each. Decoding gave 134 M values
/// (over 2 GiB); now it stops at 256 bytes of values per payload byte (plus 64 KiB).
#[test]
fn nested_arrays_of_empty_structs_are_capped() {
    let data = regression("eventsource-nested-empty-arrays");
    let (schema, payload) = input::eventsource(&data).expect("an EventSource input");
    let err = clr_events::decode_fields(&schema, payload).expect_err("capped");
    assert!(
        matches!(err, DecodeError::DecodedTooLarge { max, .. } if max == payload.len() * 256 + (64 << 10)),
        "{err}"
    );
}
