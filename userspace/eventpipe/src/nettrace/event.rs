//! The event handed out by the reader: a view into the reader's buffers.

use std::sync::Arc;

use clr_events::RawEvent;

use super::metadata::EventMetadata;
use super::region::Pending;
use super::trace_info::TraceInfo;

/// One event. Borrowed from the reader; valid until the next `next_event` call.
#[derive(Clone, Copy)]
pub struct EventRef<'a> {
    pub(crate) rec: &'a Pending,
    /// (activity, related activity) ids.
    pub(crate) activity: &'a ([u8; 16], [u8; 16]),
    pub(crate) metadata: &'a Arc<EventMetadata>,
    pub(crate) payload: &'a [u8],
    pub(crate) stack: &'a [u64],
    pub(crate) info: &'a TraceInfo,
}

impl<'a> EventRef<'a> {
    pub fn metadata(&self) -> &'a Arc<EventMetadata> {
        self.metadata
    }
    /// OS thread the event is about.
    pub fn thread_id(&self) -> u64 {
        self.rec.thread_id
    }
    /// OS thread that recorded the event (sequence numbers are per capture thread).
    pub fn capture_thread_id(&self) -> u64 {
        self.rec.capture_thread_id
    }
    pub fn processor_number(&self) -> u32 {
        self.rec.processor_number
    }
    /// Timestamp in QPC ticks.
    pub fn timestamp(&self) -> i64 {
        self.rec.timestamp
    }
    /// Nanoseconds since the session start (the trace's sync time).
    pub fn time_ns(&self) -> i64 {
        self.info.ticks_to_ns(self.rec.timestamp)
    }
    pub fn activity_id(&self) -> [u8; 16] {
        self.activity.0
    }
    pub fn related_activity_id(&self) -> [u8; 16] {
        self.activity.1
    }
    pub fn sequence_number(&self) -> u32 {
        self.rec.sequence_number
    }
    /// Raw instruction pointers, innermost first; empty when the event has no stack.
    pub fn stack(&self) -> &'a [u64] {
        self.stack
    }
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
    /// The transport-independent form the decoders in `clr_events` take.
    pub fn raw_event(&self) -> RawEvent<'a> {
        let m = self.metadata;
        RawEvent {
            provider: &m.provider,
            event_id: u16::try_from(m.event_id).unwrap_or(u16::MAX),
            version: u8::try_from(m.version).unwrap_or(u8::MAX),
            payload: self.payload,
            pointer_size: u8::try_from(self.info.pointer_size).unwrap_or(8),
        }
    }
}

impl std::fmt::Debug for EventRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRef")
            .field("provider", &self.metadata.provider)
            .field("event_id", &self.metadata.event_id)
            .field("name", &self.metadata.name)
            .field("timestamp", &self.rec.timestamp)
            .field("thread_id", &self.rec.thread_id)
            .field("sequence_number", &self.rec.sequence_number)
            .field("payload_len", &self.payload.len())
            .field("stack_len", &self.stack.len())
            .finish()
    }
}
