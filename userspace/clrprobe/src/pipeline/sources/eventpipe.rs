//! One EventPipe session per .NET process, read on its own thread; every event goes to the
//! aggregator undecoded, its time moved onto the host's monotonic clock (on Linux the
//! runtime's QPC clock is CLOCK_MONOTONIC in ns, so the session's sync time is its origin).
use std::{sync::Arc, thread::JoinHandle};

use clr_events::eventsource::Value;
use clrprobe_eventpipe::{
    ipc::{Client, IpcError, Level, ProviderConfig, SessionConfig, StopHandle},
    nettrace::{EventMetadata, NetTraceReader},
};
use clrprobe_pipeline::stream::{ClrRecord, Record};
use crossbeam_channel::Sender;

use crate::record::clr_session::SessionError;

pub struct EventPipeSource {
    pid: u32,
    stop: StopHandle,
    thread: Option<JoinHandle<()>>,
}

impl EventPipeSource {
    /// Opens the session and starts reading it into `tx`.
    pub fn start(pid: u32, config: &SessionConfig, tx: Sender<Record>) -> Result<Self, SessionError> {
        let client = Client::for_pid(pid).map_err(|source| SessionError::Ipc { pid, source })?;
        let session = client.start_session(config).map_err(|source| SessionError::Ipc { pid, source })?;
        let stop = session.stop_handle();
        let thread = std::thread::Builder::new()
            .name(format!("eventpipe-{pid}"))
            .spawn(move || read(pid, session, &tx))
            .map_err(|e| SessionError::Ipc { pid, source: IpcError::Io(e) })?;
        Ok(Self { pid, stop, thread: Some(thread) })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Has the stream ended (the process exited, or the session was stopped)?
    pub fn ended(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops the session (the runtime sends its rundown and ends the stream) and waits.
    pub fn stop(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        let _ = self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for EventPipeSource {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

fn read(pid: u32, stream: impl std::io::Read, tx: &Sender<Record>) {
    let mut reader = match NetTraceReader::new(stream) {
        Ok(r) => r,
        Err(e) => {
            log::warn!("EventPipe stream of {pid}: {e}");
            return;
        }
    };
    let info = reader.trace_info();
    let pointer_size = u8::try_from(info.pointer_size).unwrap_or(8);
    let origin = (i128::from(info.sync_time_qpc) * 1_000_000_000 / i128::from(info.qpc_frequency.max(1))) as i64;
    let mut providers: Vec<Arc<str>> = Vec::new();
    let mut dropped = 0;
    let mut n: u64 = 0;
    loop {
        let ev = match reader.next_event() {
            Ok(Some(ev)) => ev,
            Ok(None) => break,
            Err(e) => {
                log::warn!("EventPipe stream of {pid}: {e}");
                break;
            }
        };
        let raw = ev.raw_event();
        if raw.provider == COUNTERS_PROVIDER {
            if let Some((name, value)) = counter(ev.metadata(), raw.payload)
                && tx.send(Record::Counter { pid, name: Arc::from(name), value: if value.is_finite() && value > 0.0 { value.round() as u64 } else { 0 } }).is_err()
            {
                return;
            }
            continue;
        }
        if !clrprobe_pipeline::stream::wanted(raw.provider, raw.event_id) {
            continue;
        }
        // Provider names repeat: share one allocation per provider.
        let provider = match providers.iter().find(|p| ***p == *raw.provider) {
            Some(p) => p.clone(),
            None => {
                providers.push(Arc::from(raw.provider));
                providers.last().expect("pushed").clone()
            }
        };
        let time_ns = origin.saturating_add(ev.time_ns()).max(0) as u64;
        let rec = Record::Clr(ClrRecord {
            pid,
            tid: ev.thread_id(),
            time_ns,
            provider,
            event_id: raw.event_id,
            version: raw.version,
            pointer_size,
            payload: raw.payload.into(),
            stack: Arc::from(ev.stack()),
        });
        if tx.send(rec).is_err() {
            return;
        }
        n += 1;
        if n.is_multiple_of(256) {
            lost(pid, &reader.stats(), &mut dropped, tx);
        }
    }
    lost(pid, &reader.stats(), &mut dropped, tx);
}

/// The EventSource whose EventCounters carry the thread pool's numbers (.NET Core 3.0+).
const COUNTERS_PROVIDER: &str = "System.Runtime";

/// System.Runtime's counters every `interval_s` seconds.
pub fn runtime_counters(interval_s: u32) -> ProviderConfig {
    let mut p = ProviderConfig::new(COUNTERS_PROVIDER, 0, Level::Informational);
    p.arguments.push(("EventCounterIntervalSec".into(), interval_s.to_string()));
    p
}

/// (counter name, value) of an `EventCounters` event: `Payload.Name` with `Payload.Mean`
/// (polling counters) or `Payload.Increment` (incrementing ones), decoded from the schema the
/// stream carries.
fn counter(meta: &EventMetadata, payload: &[u8]) -> Option<(String, f64)> {
    if meta.name != "EventCounters" {
        return None;
    }
    let fields = clr_events::eventsource::decode_fields(meta.schema.as_ref()?, payload).ok()?;
    let inner = payload_struct(fields)?;
    let mut name = None;
    let mut value = None;
    for (k, v) in inner {
        match (k.as_str(), v) {
            ("Name", Value::String(s)) => name = Some(s),
            ("Mean" | "Increment", Value::F64(x)) => value = Some(x),
            ("Mean" | "Increment", Value::F32(x)) => value = Some(f64::from(x)),
            _ => {}
        }
    }
    Some((name?, value?))
}

/// The `Payload` struct, at whatever depth (.NET 8 wraps it in an anonymous struct).
fn payload_struct(fields: Vec<(String, Value)>) -> Option<Vec<(String, Value)>> {
    for (n, v) in fields {
        if let Value::Struct(inner) = v {
            if n == "Payload" {
                return Some(inner);
            }
            if let Some(p) = payload_struct(inner) {
                return Some(p);
            }
        }
    }
    None
}

fn lost(pid: u32, stats: &clrprobe_eventpipe::nettrace::ReaderStats, sent: &mut u64, tx: &Sender<Record>) {
    if stats.dropped_events > *sent {
        let _ = tx.send(Record::Lost { pid: Some(pid), source: "eventpipe", count: stats.dropped_events - *sent });
        *sent = stats.dropped_events;
    }
}
