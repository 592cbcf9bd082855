//! Any bytes as an ECMA-335 metadata root (BSJB): streams, tables, heaps. No panic; names of
//! every type and method row resolve or are None.
#![no_main]

use clrprobe_symbolizer::metadata::Metadata;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(md) = Metadata::parse(data) else { return };
    for rid in 0..=256u32 {
        let _ = md.type_name(rid).map(|n| n.len());
        let _ = md.method_name(rid).map(|n| n.len());
        let _ = md.owner_of_method(rid);
    }
    for rid in [u32::MAX, u32::MAX - 1, 1 << 24, (1 << 24) - 1] {
        let _ = (md.type_name(rid), md.method_name(rid), md.owner_of_method(rid));
    }
});
