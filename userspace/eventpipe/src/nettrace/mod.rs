//! Streaming reader of the NetTrace format (EventPipe's serialization: V4, V5 and V6).
//!
//! Works on any `io::Read` (a diagnostics socket or a file) one block at a time, or on bytes
//! already in memory ([`InMemory`]: blocks and payloads read in place, not copied). Events come
//! out in timestamp order within each sequence-point region; payloads are left undecoded.
//!
//! ```no_run
//! use clrprobe_eventpipe::nettrace::{NetTraceReader, StreamStatus};
//!
//! let file = std::fs::File::open("trace.nettrace")?;
//! let mut reader = NetTraceReader::new(file)?;
//! let pointer_size = reader.trace_info().pointer_size;
//! while let Some(event) = reader.next_event()? {
//!     let m = event.metadata();
//!     println!("{} {} {} ns, {} frames", m.provider, m.event_id, event.time_ns(), event.stack().len());
//!     let _raw = event.raw_event(); // for clr_events decoders
//! }
//! if reader.status() == StreamStatus::Truncated {
//!     eprintln!("trace cut short; {} events dropped by the runtime", reader.stats().dropped_events);
//! }
//! # let _ = pointer_size;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Ordering and latency: events are buffered per sequence-point region and released in
//! (timestamp, stream order) as soon as an IsSorted event proves nothing earlier can follow,
//! so a live session with steady traffic (e.g. CPU samples) delivers within ~one runtime flush
//! period; a quiet session's last burst waits for the next batch or the sequence point.
//! Memory: one region's events and payloads are kept until released (the runtime bounds a
//! region by its ~10 MB sequence-point budget).
//!
//! Layout: `input` (byte source), `bytes` (bounds-checked cursor), `trace_info` (header),
//! `metadata`, `event_header`, `stacks`, `sequence` (dropped events), `v6_tables` (threads,
//! label lists), `region` (buffering and sorting), `read_ahead` (prefetch of blocks read in
//! place), `event` (the handed-out view), `reader` (framing and dispatch).

mod bytes;
mod error;
mod event;
mod event_header;
mod id_hash;
mod input;
mod keep;
mod merge;
mod metadata;
mod read_ahead;
mod reader;
mod region;
mod sequence;
mod stacks;
mod trace_info;
mod v6_tables;

pub use error::NetTraceError;
pub use event::EventRef;
pub use input::{InMemory, Source};
pub use metadata::EventMetadata;
pub use reader::{NetTraceReader, ReaderStats, StreamStatus};
pub use trace_info::{FormatVersion, SyncTimeUtc, TraceInfo};
