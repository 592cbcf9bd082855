//! Streaming reader of the NetTrace format (EventPipe's serialization: V4, V5 and V6).
//!
//! Works on any `io::Read` (a diagnostics socket or a file) one block at a time. Events come
//! out in timestamp order within each sequence-point region; payloads are left undecoded.

mod bytes;
mod error;
mod event;
mod event_header;
mod input;
mod metadata;
mod reader;
mod region;
mod sequence;
mod stacks;
mod trace_info;
mod v6_tables;

pub use error::NetTraceError;
pub use event::EventRef;
pub use metadata::EventMetadata;
pub use reader::{NetTraceReader, ReaderStats, StreamStatus};
pub use trace_info::{FormatVersion, SyncTimeUtc, TraceInfo};
