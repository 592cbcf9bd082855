//! Any text as /proc/kallsyms: no panic; a found symbol starts at or below the address.
#![no_main]

use clrprobe_symbolizer::KernelSymbolizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let k = KernelSymbolizer::parse(&String::from_utf8_lossy(data));
    let _ = k.len();
    for a in [0u64, 1, 0xffff_ffff_8100_0000, 0xffff_ffff_ffff_ffff, 0x8000_0000_0000_0000] {
        if let Some(s) = k.lookup(a) {
            let _ = s.name.len();
        }
    }
    for line in data.split(|&b| b == b'\n').take(64) {
        let hex = line.split(|&b| b == b' ').next().unwrap_or_default();
        if let Ok(a) = u64::from_str_radix(&String::from_utf8_lossy(hex), 16)
            && let Some(s) = k.lookup(a)
        {
            let _ = s.name.len();
        }
    }
});
