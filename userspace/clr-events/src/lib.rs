//! Decoders of CoreCLR runtime event payloads, shared by the EventPipe and ETW sources.
//!
//! Nothing here does I/O or knows the transport: a source hands a [`RawEvent`] (provider,
//! id, version, payload bytes, pointer size) and gets typed events back.
//!
//! ```
//! use clr_events::{ClrEvent, RawEvent, decode, ids, providers};
//!
//! // GCStart_V2: Count, Depth, Reason, Type (u32 each), ClrInstanceID (u16), ClientSequenceNumber (u64).
//! let mut payload = Vec::new();
//! for v in [7u32, 2, 1, 0] {
//!     payload.extend_from_slice(&v.to_le_bytes());
//! }
//! payload.extend_from_slice(&3u16.to_le_bytes());
//! payload.extend_from_slice(&0u64.to_le_bytes());
//! let raw = RawEvent {
//!     provider: providers::RUNTIME,
//!     event_id: ids::runtime::GC_START,
//!     version: 2,
//!     payload: &payload,
//!     pointer_size: 8,
//! };
//! let ClrEvent::GcStart(gc) = decode(&raw)? else { unreachable!() };
//! assert_eq!((gc.count, gc.depth, gc.reason.name()), (7, Some(2), "Induced"));
//! // One byte short is an error naming the layout and the field.
//! let short = RawEvent { payload: &payload[..25], ..raw };
//! assert!(decode(&short).unwrap_err().to_string().contains("GCStart_V2"));
//! # Ok::<(), clr_events::DecodeError>(())
//! ```
//!
//! Decoded events (provider: R = runtime, D = rundown, S = SampleProfiler):
//!
//! | events | ids | versions |
//! |---|---|---|
//! | GCStart, GCEnd, GCHeapStats, GCSuspendEEBegin | R 1, 2, 4, 9 | 0–2, 0–1, 0–2, 0–1 |
//! | GCSuspendEEEnd, GCRestartEEBegin/End, GCTriggered | R 8, 7, 3, 35 | 0–1 |
//! | GCPerHeapHistory, GCGlobalHeapHistory | R 204, 205 | 3, 2–4 |
//! | GCAllocationTick, AllocationSampled, GCSampledObjectAllocationHigh/Low | R 10, 303, 20/32 | 0–4, 0, 0 |
//! | ExceptionThrown, Catch/Finally/FilterStart (+Stop), ExceptionThrownStop | R 80, 250–255, 256 | 1, 0 |
//! | ContentionStart, ContentionStop, ContentionLockCreated | R 81, 91, 90 | 0–2, 0–1, 0 |
//! | MethodLoad/Unload(Verbose) | R 141–144 | 0–2 |
//! | ModuleLoad/Unload | R 152/153 | 0–2 |
//! | ThreadCreated | R 85 | 0 |
//! | MethodDCStart/DCEnd(Verbose), ModuleDCStart/DCEnd, ThreadDC, DC{Start,End}{Init,Complete} | D 141–148, 153/154, 159 | 0–2 |
//! | ThreadSample | S 0 | 0 |
//!
//! A version newer than the newest listed is decoded with the newest layout (runtime versions
//! only append fields); bytes after the layout are ignored; a shorter or corrupt payload is a
//! [`DecodeError`]. Other events, and old versions without a template (ExceptionThrown V0,
//! GCPerHeapHistory before V3), decode to [`ClrEvent::Unknown`]. Strings are borrowed
//! [`Utf16Str`] views: on the real traces, decoding with owned `String`s for every string costs
//! 3–5× more (`benches/decode.rs`).
pub mod alloc;
pub mod builder;
pub mod contention;
pub mod decode;
pub mod direct_json;
pub mod error;
pub mod event_json;
pub mod eventsource;
pub mod eventsource_json;
pub mod exceptions;
pub mod gc;
pub mod gc_enums;
pub mod gc_history;
pub mod guid;
pub mod heap;
pub mod ids;
pub mod json;
pub mod keywords;
pub mod methods;
pub mod modules;
pub mod reader;
pub mod schema;
pub mod threads;
pub mod utf16;

pub use decode::{ClrEvent, Family, decode, decode_as};
pub use error::DecodeError;
pub use eventsource::{Value, decode_fields};
pub use eventsource_json::write_fields_json;
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
