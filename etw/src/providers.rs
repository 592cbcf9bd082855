//! Provider GUIDs an ETW session sees, and the names `clr_events::decode` expects for them.
//!
//! On ETW a record names its provider only by GUID; EventPipe names it by string. The CLR
//! providers are mapped to the EventPipe names so the same decoders and pipeline run on both.

use clr_events::{Guid, providers};

/// Microsoft-Windows-DotNETRuntime.
pub const RUNTIME: Guid = guid(0xe13c0d23, 0xccbc, 0x4e12, [0x93, 0x1b, 0xd9, 0xcc, 0x2e, 0xee, 0x27, 0xe4]);
/// Microsoft-Windows-DotNETRuntimeRundown.
pub const RUNDOWN: Guid = guid(0xa669021c, 0xc450, 0x4609, [0xa0, 0x35, 0x5a, 0xf5, 0x9a, 0xf4, 0xdf, 0x18]);
/// Microsoft-Windows-DotNETRuntimePrivate.
pub const PRIVATE: Guid = guid(0x763fd754, 0x7086, 0x4dfe, [0x95, 0xeb, 0xc0, 0x1a, 0x46, 0xfa, 0xf4, 0xca]);
/// Kernel PerfInfo (SampledProfile is opcode 46).
pub const KERNEL_PERF_INFO: Guid = guid(0xce1dbfb4, 0x137e, 0x4da6, [0x87, 0xb0, 0x3f, 0x59, 0xaa, 0x10, 0x2c, 0xbc]);
/// Kernel StackWalk (Stack is opcode 32).
pub const KERNEL_STACK_WALK: Guid = guid(0xdef2fe46, 0x7bd6, 0x4b80, [0xbd, 0x94, 0xf5, 0x7f, 0xe2, 0x0d, 0x0c, 0xe3]);
/// Kernel Image (Load 10, Unload 2, DCStart 3, DCEnd 4).
pub const KERNEL_IMAGE: Guid = guid(0x2cb15d1d, 0x5fc1, 0x11d2, [0xab, 0xe1, 0x00, 0xa0, 0xc9, 0x11, 0xf5, 0x18]);

const fn guid(data1: u32, data2: u16, data3: u16, data4: [u8; 8]) -> Guid {
    Guid { data1, data2, data3, data4 }
}

/// The provider name `clr_events::decode` dispatches on, for a CLR provider GUID.
pub fn clr_provider_name(g: &Guid) -> Option<&'static str> {
    if *g == RUNTIME {
        Some(providers::RUNTIME)
    } else if *g == RUNDOWN {
        Some(providers::RUNDOWN)
    } else if *g == PRIVATE {
        Some(providers::PRIVATE)
    } else {
        None
    }
}

/// Parses the hyphenated text form (`e13c0d23-ccbc-4e12-931b-d9cc2eee27e4`, braces optional).
pub fn parse_guid(s: &str) -> Option<Guid> {
    let s = s.trim().trim_start_matches('{').trim_end_matches('}');
    let parts: Vec<&str> = s.split('-').collect();
    let [a, b, c, d, e] = parts.as_slice() else { return None };
    if a.len() != 8 || b.len() != 4 || c.len() != 4 || d.len() != 4 || e.len() != 12 {
        return None;
    }
    let hex = |t: &str| u64::from_str_radix(t, 16).ok();
    let tail = hex(d)? << 48 | hex(e)?;
    Some(Guid {
        data1: u32::try_from(hex(a)?).ok()?,
        data2: u16::try_from(hex(b)?).ok()?,
        data3: u16::try_from(hex(c)?).ok()?,
        data4: tail.to_be_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_match_the_text_guids_of_clr_events() {
        assert_eq!(parse_guid(providers::RUNTIME_GUID), Some(RUNTIME));
        assert_eq!(parse_guid(providers::RUNDOWN_GUID), Some(RUNDOWN));
        assert_eq!(RUNTIME.to_string(), providers::RUNTIME_GUID);
        assert_eq!(parse_guid("{A669021C-C450-4609-A035-5AF59AF4DF18}"), Some(RUNDOWN));
        assert_eq!(parse_guid("def2fe46-7bd6-4b80-bd94-f57fe20d0ce3"), Some(KERNEL_STACK_WALK));
    }

    #[test]
    fn maps_clr_guids_to_eventpipe_names_only() {
        assert_eq!(clr_provider_name(&RUNTIME), Some("Microsoft-Windows-DotNETRuntime"));
        assert_eq!(clr_provider_name(&RUNDOWN), Some("Microsoft-Windows-DotNETRuntimeRundown"));
        assert_eq!(clr_provider_name(&KERNEL_PERF_INFO), None);
    }

    #[test]
    fn rejects_malformed_text() {
        for bad in ["", "e13c0d23-ccbc-4e12-931b", "e13c0d23-ccbc-4e12-931b-d9cc2eee27eZ", "e13c0d2-3ccbc-4e12-931b-d9cc2eee27e4"] {
            assert_eq!(parse_guid(bad), None, "{bad}");
        }
    }
}
