//! Printing a NetTrace file's events decoded: EventSource events by their metadata's field
//! names, runtime events by the typed decoders.
use std::{io::Write, path::Path};

use clr_events::{Value, decode, decode_fields};
use clrprobe_eventpipe::nettrace::{EventRef, NetTraceError, NetTraceReader, StreamStatus};
use serde::Serialize;
use serde_json::{Map, Value as Json, json};

#[derive(Debug, Default, Serialize)]
pub struct DumpStats {
    pub events: u64,
    pub decode_errors: u64,
    pub dropped_events: u64,
    /// "complete" or "truncated".
    pub status: String,
}

#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("opening {path}: {source}")]
    Open { path: String, #[source] source: std::io::Error },
    #[error("{path}: {source}")]
    Read { path: String, #[source] source: NetTraceError },
    #[error("writing the dump: {0}")]
    Write(#[from] std::io::Error),
    #[error(transparent)]
    Profile(#[from] clrprobe_profile::ProfileError),
}

/// Writes one line per event to `out` (JSON lines with `json`).
pub fn dump(path: &Path, json: bool, mut out: impl Write) -> Result<DumpStats, DumpError> {
    let p = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| DumpError::Open { path: p.clone(), source })?;
    let mut reader =
        NetTraceReader::new(std::io::BufReader::with_capacity(1 << 20, file)).map_err(|source| DumpError::Read { path: p.clone(), source })?;
    let pointer_size = reader.trace_info().pointer_size as u8;
    let mut stats = DumpStats::default();
    let result = loop {
        match reader.next_event() {
            Ok(Some(ev)) => {
                stats.events += 1;
                let (fields, ok) = fields_of(&ev, pointer_size);
                if !ok {
                    stats.decode_errors += 1;
                }
                match write_event(&mut out, &ev, fields, json) {
                    // The reader of our output went away (`| head`): stop quietly.
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => break Ok(()),
                    other => other?,
                }
            }
            Ok(None) => break Ok(()),
            Err(source) => break Err(DumpError::Read { path: p.clone(), source }),
        }
    };
    let rs = reader.stats();
    stats.dropped_events = rs.dropped_events;
    stats.status = match reader.status() {
        StreamStatus::Complete => "complete".into(),
        _ => "truncated".into(),
    };
    match out.flush() {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e.into()),
        _ => {}
    }
    result.map(|()| stats)
}

/// The event's fields as JSON, and whether decoding succeeded.
fn fields_of(ev: &EventRef<'_>, pointer_size: u8) -> (Json, bool) {
    let md = ev.metadata();
    if let Some(schema) = md.schema.as_ref().filter(|s| !s.fields.is_empty()) {
        return match decode_fields(schema, ev.payload()) {
            Ok(fields) => (Json::Object(fields.into_iter().map(|(k, v)| (k, value_json(v))).collect()), true),
            Err(e) => (json!({ "decode_error": e.to_string() }), false),
        };
    }
    let mut raw = ev.raw_event();
    raw.pointer_size = pointer_size;
    match decode(&raw) {
        Ok(clr_events::ClrEvent::Unknown) => (json!({ "payload_bytes": ev.payload().len() }), true),
        Ok(e) => (Json::String(format!("{e:?}")), true),
        Err(e) => (json!({ "decode_error": e.to_string() }), false),
    }
}

fn value_json(v: Value) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Bool(b) => json!(b),
        Value::Char(c) => json!(c.to_string()),
        Value::I8(x) => json!(x),
        Value::U8(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::F32(x) => json!(x),
        Value::F64(x) => json!(x),
        Value::Decimal(b) => json!(b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
        Value::DateTime(t) => json!(t),
        Value::Guid(g) => json!(g.to_string()),
        Value::String(s) => json!(s),
        Value::Struct(fields) => Json::Object(fields.into_iter().map(|(k, v)| (k, value_json(v))).collect::<Map<_, _>>()),
        Value::Array(items) => Json::Array(items.into_iter().map(value_json).collect()),
    }
}

fn write_event(out: &mut impl Write, ev: &EventRef<'_>, fields: Json, json: bool) -> std::io::Result<()> {
    let md = ev.metadata();
    if json {
        let line = json!({
            "time_ns": ev.time_ns(),
            "provider": md.provider,
            "id": md.event_id,
            "name": md.name,
            "version": md.version,
            "thread": ev.thread_id(),
            "seq": ev.sequence_number(),
            "stack": ev.stack().iter().map(|ip| format!("{ip:#x}")).collect::<Vec<_>>(),
            "fields": fields,
        });
        writeln!(out, "{line}")
    } else {
        let name = if md.name.is_empty() { format!("#{}", md.event_id) } else { md.name.clone() };
        writeln!(
            out,
            "{:>14.6} ms  tid {:<7} {}/{} v{}  stack {}  {}",
            ev.time_ns() as f64 / 1e6,
            ev.thread_id(),
            md.provider,
            name,
            md.version,
            ev.stack().len(),
            fields
        )
    }
}
