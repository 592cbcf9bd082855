//! Any bytes as a pprof file (gzipped when they start with the gzip magic): no panic, and
//! what decodes stays within the decode cap; a decoded profile re-encodes and reads back.
#![no_main]

use clrprobe_profile::pprof;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = pprof::decode(data) else { return };
    let bytes = pprof::encode(&p).expect("a decoded profile encodes");
    let again = pprof::decode(&bytes).expect("what we wrote reads back");
    assert_eq!(again.sample_types().len(), p.sample_types().len());
});
