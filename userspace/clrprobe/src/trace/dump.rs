//! Printing a NetTrace file's events decoded: EventSource events by their metadata's field
//! names, runtime events by the typed decoders.
use std::{collections::HashMap, fmt::Write as _, hash::BuildHasherDefault, io::Write, path::Path};

use clr_events::{Value, decode, decode_fields};
use clrprobe_eventpipe::nettrace::{EventRef, NetTraceError, NetTraceReader, StreamStatus};
use serde::Serialize;
use serde_json::{Map, Value as Json, json};

use super::debug_json;

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

/// Writes one line per event to `out` (JSON lines with `json`), streaming: memory stays flat
/// whatever the file's size.
///
/// JSON lines: `{"type":"event","time_ns":…,"provider":…,"name":…,"id":…,"version":…,
/// "opcode":…,"thread":…,"seq":…,"stack_id":…,"fields":{…}}`, where `fields` holds the
/// payload as JSON values (EventSource events by their metadata's field names, runtime events
/// by the typed decoders' field names) and `stack_id` numbers the distinct stacks of the
/// file (null without a stack); a stack's first use is preceded by
/// `{"type":"stack","stack_id":…,"ips":["0x…",…]}` (leaf first).
pub fn dump(path: &Path, json: bool, out: impl Write) -> Result<DumpStats, DumpError> {
    let p = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| DumpError::Open { path: p.clone(), source })?;
    dump_from(std::io::BufReader::with_capacity(1 << 20, file), &p, json, out)
}

/// [`dump`] of a stream; `name` names it in errors.
pub fn dump_from(input: impl std::io::Read, name: &str, json: bool, mut out: impl Write) -> Result<DumpStats, DumpError> {
    let p = name.to_owned();
    let mut reader = NetTraceReader::new(input).map_err(|source| DumpError::Read { path: p.clone(), source })?;
    let pointer_size = reader.trace_info().pointer_size as u8;
    let mut stats = DumpStats::default();
    let mut line = String::with_capacity(1024);
    let mut bufs = Buffers::default();
    let mut stacks: HashMap<Vec<u64>, u64, BuildHasherDefault<AddrHasher>> = HashMap::default();
    let result = loop {
        match reader.next_event() {
            Ok(Some(ev)) => {
                stats.events += 1;
                line.clear();
                let stack = ev.stack();
                let stack_id = if stack.is_empty() {
                    None
                } else if let Some(&id) = stacks.get(stack) {
                    Some(id)
                } else {
                    let id = stacks.len() as u64 + 1;
                    stacks.insert(stack.to_vec(), id);
                    if json {
                        let _ = write!(line, "{{\"type\":\"stack\",\"stack_id\":{id},\"ips\":[");
                        for (i, ip) in stack.iter().enumerate() {
                            let _ = write!(line, "{}\"{ip:#x}\"", if i == 0 { "" } else { "," });
                        }
                        line.push_str("]}\n");
                    }
                    Some(id)
                };
                if !event_line(&mut line, &mut bufs, &ev, pointer_size, stack_id, json) {
                    stats.decode_errors += 1;
                }
                match out.write_all(line.as_bytes()) {
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

/// Per-event strings, reused from event to event.
#[derive(Default)]
struct Buffers {
    name: String,
    fields: String,
    scratch: String,
}

/// A multiply-rotate hasher for stacks of addresses (SipHash over a long stack per event
/// costs more than reading the event).
#[derive(Default)]
struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// Appends the event's name (the metadata's, else the typed decoder's) and its fields as JSON
/// to `name` and `fields`; false when the payload did not decode.
fn name_and_fields(ev: &EventRef<'_>, pointer_size: u8, name: &mut String, fields: &mut String, scratch: &mut String) -> bool {
    let md = ev.metadata();
    name.push_str(&md.name);
    if let Some(schema) = md.schema.as_ref().filter(|s| !s.fields.is_empty()) {
        return match decode_fields(schema, ev.payload()) {
            Ok(f) => {
                let obj = Json::Object(f.into_iter().map(|(k, v)| (k, value_json(v))).collect());
                fields.push_str(&obj.to_string());
                true
            }
            Err(e) => {
                fields.push_str(&json!({ "decode_error": e.to_string() }).to_string());
                false
            }
        };
    }
    let mut raw = ev.raw_event();
    raw.pointer_size = pointer_size;
    match decode(&raw) {
        Ok(clr_events::ClrEvent::Unknown) => {
            if name.is_empty() {
                let _ = write!(name, "Event{}", md.event_id);
            }
            let _ = write!(fields, "{{\"payload_bytes\":{}}}", ev.payload().len());
            true
        }
        Ok(e) => {
            let mut text = std::mem::take(scratch);
            text.clear();
            let _ = write!(text, "{e:?}");
            let ok = runtime_fields(&text, name, fields);
            *scratch = text;
            ok
        }
        Err(e) => {
            if name.is_empty() {
                let _ = write!(name, "Event{}", md.event_id);
            }
            fields.push_str(&json!({ "decode_error": e.to_string() }).to_string());
            false
        }
    }
}

/// The variant name (when the metadata has none) and fields of a typed event's `Debug` text.
fn runtime_fields(text: &str, name: &mut String, fields: &mut String) -> bool {
    {
        {
            let (variant, rest) = debug_json::variant(text);
            if name.is_empty() {
                name.push_str(variant);
            }
            let rest = rest.trim();
            if rest.is_empty() {
                fields.push_str("{}");
                return true;
            }
            // `Variant(Struct { .. })` or `Variant { .. }`.
            let inner = rest.strip_prefix('(').and_then(|r| r.strip_suffix(')')).map(|r| debug_json::variant(r.trim()).1).unwrap_or(rest);
            debug_json::convert(inner, fields)
        }
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

/// Appends the event's line (JSON or text) to `line`; false when its payload did not decode.
fn event_line(line: &mut String, bufs: &mut Buffers, ev: &EventRef<'_>, pointer_size: u8, stack_id: Option<u64>, json: bool) -> bool {
    let md = ev.metadata();
    bufs.name.clear();
    bufs.fields.clear();
    let ok = name_and_fields(ev, pointer_size, &mut bufs.name, &mut bufs.fields, &mut bufs.scratch);
    let (name, fields) = (&bufs.name, &bufs.fields);
    if json {
        line.push_str("{\"type\":\"event\",\"time_ns\":");
        let _ = write!(line, "{}", ev.time_ns());
        line.push_str(",\"provider\":");
        debug_json::json_string(&md.provider, line);
        line.push_str(",\"name\":");
        debug_json::json_string(name, line);
        let _ = write!(
            line,
            ",\"id\":{},\"version\":{},\"opcode\":{},\"thread\":{},\"seq\":{},\"stack_id\":",
            md.event_id,
            md.version,
            md.opcode,
            ev.thread_id(),
            ev.sequence_number()
        );
        match stack_id {
            Some(id) => {
                let _ = write!(line, "{id}");
            }
            None => line.push_str("null"),
        }
        line.push_str(",\"fields\":");
        line.push_str(fields);
        line.push_str("}\n");
    } else {
        let _ = write!(
            line,
            "{:>14.6} ms  tid {:<7} {}/{} v{}  stack {}  ",
            ev.time_ns() as f64 / 1e6,
            ev.thread_id(),
            md.provider,
            name,
            md.version,
            stack_id.map_or_else(|| "-".to_owned(), |id| format!("#{id} ({} frames)", ev.stack().len())),
        );
        // Fields as `name=value`, values compact JSON.
        match serde_json::from_str::<Json>(fields) {
            Ok(Json::Object(map)) => {
                for (i, (k, v)) in map.iter().enumerate() {
                    let _ = write!(line, "{}{k}={v}", if i == 0 { "" } else { " " });
                }
            }
            _ => line.push_str(fields),
        }
        line.push('\n');
    }
    ok
}
