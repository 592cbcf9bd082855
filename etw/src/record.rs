//! The ETW-shaped record and its adapter to the transport-independent types: a
//! [`clr_events::RawEvent`] for decoding and a [`clrprobe_pipeline::EventInput`] for the pipeline.
//!
//! A record is what an `EVENT_RECORD` carries that clrprobe uses, copied out of the ETW buffer
//! (the buffer is only valid during the callback). The CLR payload layouts are the manifest's on
//! ETW and on EventPipe alike, so the bytes go to the decoders unchanged; only the provider is
//! named by GUID here and by string there ([`crate::providers::clr_provider_name`]).

use clr_events::{ClrEvent, Guid, RawEvent};
use clrprobe_pipeline::EventInput;

use crate::providers;

/// `EVENT_HEADER_FLAG_32_BIT_HEADER`: the event came from a 32-bit process.
pub const EVENT_HEADER_FLAG_32_BIT_HEADER: u16 = 0x0020;
/// `EVENT_HEADER_FLAG_64_BIT_HEADER`.
pub const EVENT_HEADER_FLAG_64_BIT_HEADER: u16 = 0x0040;

/// One ETW event, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtwRecord {
    pub provider: Guid,
    /// Manifest event id (0 for classic kernel events, which the opcode identifies).
    pub event_id: u16,
    pub opcode: u8,
    pub version: u8,
    /// Header process and thread ids (kernel events may carry -1/0 here; their payload says).
    pub pid: u32,
    pub tid: u32,
    /// Header timestamp as ProcessTrace delivers it: 100 ns units since 1601 (FILETIME).
    pub timestamp: i64,
    pub payload: Vec<u8>,
    /// Pointer size of the process that wrote the event (4 or 8).
    pub pointer_size: u8,
    /// A stack ETW captured itself (extended data STACK_TRACE32/64), leaf first.
    pub stack: Option<Vec<u64>>,
}

impl EtwRecord {
    /// Pointer size from `EVENT_HEADER.Flags`; 8 when neither bit is set.
    pub fn pointer_size_from_flags(flags: u16) -> u8 {
        if flags & EVENT_HEADER_FLAG_32_BIT_HEADER != 0 { 4 } else { 8 }
    }

    /// True for the three CLR providers.
    pub fn is_clr(&self) -> bool {
        providers::clr_provider_name(&self.provider).is_some()
    }

    /// The record as the CLR decoders take it; `None` for non-CLR providers.
    pub fn raw_event(&self) -> Option<RawEvent<'_>> {
        Some(RawEvent {
            provider: providers::clr_provider_name(&self.provider)?,
            event_id: self.event_id,
            version: self.version,
            payload: &self.payload,
            pointer_size: self.pointer_size,
        })
    }

    /// The header time in nanoseconds (the pipeline only uses differences).
    pub fn time_ns(&self) -> u64 {
        u64::try_from(self.timestamp).unwrap_or(0).saturating_mul(100)
    }

    /// The pipeline input for this record's decoded `event` with its `stack` (leaf first).
    pub fn event_input<'a, 'e>(&self, event: &'a ClrEvent<'e>, stack: &'a [u64]) -> EventInput<'a, 'e> {
        EventInput { pid: self.pid, tid: u64::from(self.tid), time_ns: self.time_ns(), event, stack }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clr_events::{decode, ids};

    fn rec(provider: Guid, id: u16, version: u8, payload: Vec<u8>) -> EtwRecord {
        EtwRecord {
            provider,
            event_id: id,
            opcode: 0,
            version,
            pid: 10,
            tid: 11,
            timestamp: 1_000,
            payload,
            pointer_size: 8,
            stack: None,
        }
    }

    #[test]
    fn clr_guids_become_the_eventpipe_provider_names() {
        // ContentionStop_V1: Flags u8, ClrInstanceID u16, DurationNs f64.
        let mut p = vec![0u8];
        p.extend_from_slice(&7u16.to_le_bytes());
        p.extend_from_slice(&1500.0f64.to_le_bytes());
        let r = rec(providers::RUNTIME, ids::runtime::CONTENTION_STOP, 1, p);
        let raw = r.raw_event().expect("runtime GUID maps");
        assert_eq!(raw.provider, clr_events::providers::RUNTIME);
        let ClrEvent::ContentionStop(s) = decode(&raw).expect("decodes") else { panic!("wrong event") };
        assert_eq!((s.clr_instance_id, s.duration_ns), (7, Some(1500.0)));
        let ev = ClrEvent::Unknown;
        let input = r.event_input(&ev, &[1, 2]);
        assert_eq!((input.pid, input.tid, input.time_ns, input.stack), (10, 11, 100_000, &[1u64, 2][..]));
    }

    #[test]
    fn other_providers_have_no_raw_event_and_flags_give_pointer_size() {
        assert!(rec(providers::KERNEL_PERF_INFO, 0, 2, vec![]).raw_event().is_none());
        assert_eq!(EtwRecord::pointer_size_from_flags(EVENT_HEADER_FLAG_32_BIT_HEADER), 4);
        assert_eq!(EtwRecord::pointer_size_from_flags(EVENT_HEADER_FLAG_64_BIT_HEADER), 8);
        let mut r = rec(providers::RUNTIME, 1, 0, vec![]);
        r.timestamp = -5;
        assert_eq!(r.time_ns(), 0);
    }
}
