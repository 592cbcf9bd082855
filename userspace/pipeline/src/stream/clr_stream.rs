//! A process's EventPipe stream as records: every event undecoded, its time moved onto the
//! host's monotonic clock (on Linux the runtime's QPC clock is CLOCK_MONOTONIC, so the
//! session's sync time is its origin). The agent's live source and replay read through it.
use std::{io::Read, sync::Arc};

use clrprobe_eventpipe::nettrace::{NetTraceError, NetTraceReader, ReaderStats, StreamStatus};

use super::records::ClrRecord;

pub struct ClrStream<R: Read> {
    pid: u32,
    reader: NetTraceReader<R>,
    origin_ns: i64,
    pointer_size: u8,
    /// Provider names repeat: one allocation per provider.
    providers: Vec<Arc<str>>,
}

impl<R: Read> ClrStream<R> {
    /// Reads the stream's header.
    pub fn new(pid: u32, stream: R) -> Result<Self, NetTraceError> {
        let reader = NetTraceReader::new(stream)?;
        let info = reader.trace_info();
        let pointer_size = u8::try_from(info.pointer_size).unwrap_or(8);
        let origin_ns = (i128::from(info.sync_time_qpc) * 1_000_000_000 / i128::from(info.qpc_frequency.max(1)))
            .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        Ok(Self { pid, reader, origin_ns, pointer_size, providers: Vec::new() })
    }

    /// The next event, None at the end of the stream.
    pub fn next_record(&mut self) -> Result<Option<ClrRecord>, NetTraceError> {
        let Some(ev) = self.reader.next_event()? else { return Ok(None) };
        let raw = ev.raw_event();
        let provider = match self.providers.iter().find(|p| ***p == *raw.provider) {
            Some(p) => p.clone(),
            None => {
                self.providers.push(Arc::from(raw.provider));
                self.providers.last().expect("pushed").clone()
            }
        };
        Ok(Some(ClrRecord {
            pid: self.pid,
            tid: ev.thread_id(),
            time_ns: self.origin_ns.saturating_add(ev.time_ns()).max(0) as u64,
            provider,
            event_id: raw.event_id,
            version: raw.version,
            pointer_size: self.pointer_size,
            payload: raw.payload.into(),
            stack: Arc::from(ev.stack()),
        }))
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Events read and dropped (by the runtime) so far.
    pub fn stats(&self) -> ReaderStats {
        self.reader.stats()
    }

    pub fn status(&self) -> StreamStatus {
        self.reader.status()
    }
}
