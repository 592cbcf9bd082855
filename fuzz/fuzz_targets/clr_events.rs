//! One event payload per input through the CLR event decoders (runtime, rundown, sample
//! profiler) or the EventSource field decoder: no panic, bounded memory, and a decoded event
//! prints. The input layout is in `fuzz/inputs/clr_events.rs`.
//!
//! The NetTrace stream around events is fuzzed by `userspace/eventpipe/fuzz` (nettrace_reader).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../inputs/clr_events.rs"]
mod input;

fuzz_target!(|data: &[u8]| input::run(data));
