//! Any bytes into the jitdump reader, whole and in chunks the input chooses (see
//! `fuzz/inputs/jitdump.rs`): no panic, the same records either way, lookups in range.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../inputs/jitdump.rs"]
mod input;

fuzz_target!(|data: &[u8]| input::run(data));
