//! Replays the inputs that once crashed the jitdump fuzz target (`fuzz/regressions/jitdump`,
//! read and checked as the target does: `fuzz/inputs/jitdump.rs`).
use std::path::Path;

#[path = "../../fuzz/inputs/jitdump.rs"]
mod input;

#[test]
fn every_jitdump_regression_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/jitdump");
    let files: Vec<_> = std::fs::read_dir(&dir).expect("regressions").flatten().map(|e| e.path()).collect();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    for f in files {
        input::run(&std::fs::read(&f).expect("readable"));
    }
}
