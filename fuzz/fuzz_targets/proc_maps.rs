//! Any text as /proc/PID/maps: no panic; found mappings hold the address; merging a newer
//! reading keeps lookups consistent.
#![no_main]

use clrprobe_symbolizer::maps::Maps;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mid = (0..=text.len() / 2).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    let (a, b) = text.split_at(mid);
    let (Ok(mut old), Ok(new)) = (Maps::parse(&text), Maps::parse(b.trim_start_matches(|c| c != '\n'))) else {
        let _ = Maps::parse(a);
        return;
    };
    let addrs: Vec<u64> = old.mappings.iter().take(64).flat_map(|m| [m.start, m.end.saturating_sub(1)]).collect();
    for &a in &addrs {
        if let Some(m) = old.find(a) {
            assert!(m.start <= a && a < m.end.max(m.start + 1));
            let _ = (m.file_offset(a), m.module_name(), m.path());
        }
    }
    old.update(new);
    for &a in &addrs {
        if let Some(m) = old.find(a) {
            assert!(m.start <= a && a < m.end.max(m.start + 1));
        }
    }
});
