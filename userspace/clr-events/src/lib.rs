//! Decoders of CoreCLR runtime event payloads, shared by the EventPipe and ETW sources.
//!
//! Nothing here does I/O or knows the transport: a source hands a [`RawEvent`] (provider,
//! id, version, payload bytes, pointer size) and gets typed events back.
pub mod alloc;
pub mod contention;
pub mod decode;
pub mod error;
pub mod eventsource;
pub mod exceptions;
pub mod gc;
pub mod gc_enums;
pub mod gc_history;
pub mod guid;
pub mod ids;
pub mod keywords;
pub mod methods;
pub mod modules;
pub mod reader;
pub mod schema;
pub mod threads;
pub mod utf16;

pub use decode::{ClrEvent, decode};
pub use error::DecodeError;
pub use eventsource::{Value, decode_fields};
pub use guid::Guid;
pub use utf16::Utf16Str;

/// One event as any transport delivers it, before decoding.
#[derive(Debug, Clone, Copy)]
pub struct RawEvent<'a> {
    /// Provider name, e.g. "Microsoft-Windows-DotNETRuntime".
    pub provider: &'a str,
    pub event_id: u16,
    pub version: u8,
    pub payload: &'a [u8],
    /// Size of a pointer in the target process (4 or 8).
    pub pointer_size: u8,
}

/// Provider names and GUIDs of the runtime providers.
pub mod providers {
    pub const RUNTIME: &str = "Microsoft-Windows-DotNETRuntime";
    pub const RUNTIME_GUID: &str = "e13c0d23-ccbc-4e12-931b-d9cc2eee27e4";
    pub const RUNDOWN: &str = "Microsoft-Windows-DotNETRuntimeRundown";
    pub const RUNDOWN_GUID: &str = "a669021c-c450-4609-a035-5af59af4df18";
    pub const PRIVATE: &str = "Microsoft-Windows-DotNETRuntimePrivate";
    pub const SAMPLE_PROFILER: &str = "Microsoft-DotNETCore-SampleProfiler";
    pub const EVENT_PIPE: &str = "Microsoft-DotNETCore-EventPipe";
}
