//! Any bytes as a ReadyToRun PE image: PE headers, the CLR header, ECMA metadata, the R2R
//! header, native-format hashtables and method signatures. No panic; every lookup in range.
#![no_main]

use clrprobe_symbolizer::r2r::R2rImage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(img) = R2rImage::parse(data) else { return };
    let _ = (img.runtime_function_count(), img.unclaimed_runtime_functions());
    let mut rvas = Vec::new();
    for m in img.methods.iter().take(256) {
        for (begin, end) in img.code_ranges(m) {
            rvas.push(begin);
            rvas.push(end.saturating_sub(1));
        }
    }
    for rva in rvas {
        if let Some(hit) = img.lookup_rva(rva) {
            let _ = hit.name.len();
        }
    }
    for off in (0..data.len() as u64).step_by(4093).take(64) {
        let _ = img.lookup_file_offset(off);
    }
});
