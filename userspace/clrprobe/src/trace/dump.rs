//! Printing a NetTrace file's events decoded: EventSource events by their metadata's field
//! names, runtime events by the typed decoders.
use std::{borrow::Cow, collections::HashMap, hash::BuildHasherDefault, io::Write, path::Path};

use clr_events::event_json::Hex;
use clr_events::json::{self, Fields, Style, ToJson};
use clr_events::schema::EventSchema;
use clr_events::{ClrEvent, decode, write_fields_json};
use clrprobe_eventpipe::nettrace::{EventMetadata, EventRef, NetTraceError, NetTraceReader, StreamStatus};
use serde::Serialize;

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

/// Output is gathered in chunks of this size before it is written.
const CHUNK: usize = 256 << 10;

/// [`dump`] of a stream; `name` names it in errors.
pub fn dump_from(input: impl std::io::Read, name: &str, json: bool, mut out: impl Write) -> Result<DumpStats, DumpError> {
    let p = name.to_owned();
    let mut reader = NetTraceReader::new(input).map_err(|source| DumpError::Read { path: p.clone(), source })?;
    let pointer_size = reader.trace_info().pointer_size as u8;
    let mut stats = DumpStats::default();
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK + (64 << 10));
    let mut stacks: HashMap<Vec<u64>, u64, BuildHasherDefault<AddrHasher>> = HashMap::default();
    let style = if json { Style::Json } else { Style::Text };
    let mut piped_away = false;
    let result = loop {
        match reader.next_event() {
            Ok(Some(ev)) => {
                stats.events += 1;
                let stack = ev.stack();
                let stack_id = if stack.is_empty() {
                    None
                } else if let Some(&id) = stacks.get(stack) {
                    Some(id)
                } else {
                    let id = stacks.len() as u64 + 1;
                    stacks.insert(stack.to_vec(), id);
                    if json {
                        stack_line(&mut buf, id, stack);
                    }
                    Some(id)
                };
                if !event_line(&mut buf, &ev, pointer_size, stack_id, style) {
                    stats.decode_errors += 1;
                }
                if buf.len() >= CHUNK {
                    if !write_chunk(&mut out, &buf)? {
                        piped_away = true;
                        break Ok(());
                    }
                    buf.clear();
                }
            }
            Ok(None) => break Ok(()),
            Err(source) => break Err(DumpError::Read { path: p.clone(), source }),
        }
    };
    if !piped_away && write_chunk(&mut out, &buf)? {
        match out.flush() {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e.into()),
            _ => {}
        }
    }
    let rs = reader.stats();
    stats.dropped_events = rs.dropped_events;
    stats.status = match reader.status() {
        StreamStatus::Complete => "complete".into(),
        _ => "truncated".into(),
    };
    result.map(|()| stats)
}

/// Writes `buf`; false when the reader of our output went away (`| head`): stop quietly.
fn write_chunk(out: &mut impl Write, buf: &[u8]) -> Result<bool, DumpError> {
    match out.write_all(buf) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        other => other.map(|()| true).map_err(DumpError::from),
    }
}

/// `{"type":"stack","stack_id":N,"ips":["0x…",…]}` (leaf first).
fn stack_line(buf: &mut Vec<u8>, id: u64, stack: &[u64]) {
    buf.extend_from_slice(b"{\"type\":\"stack\",\"stack_id\":");
    id.write_json(buf);
    buf.extend_from_slice(b",\"ips\":[");
    for (i, ip) in stack.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        Hex(*ip).write_json(buf);
    }
    buf.extend_from_slice(b"]}\n");
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

/// What an event's payload is, found before anything is written (the name comes from it).
enum Payload<'a> {
    /// Self-describing: the metadata's field list.
    Schema(&'a EventSchema),
    /// A runtime event the typed decoders know.
    Decoded(ClrEvent<'a>),
    /// No decoder: the payload as hex.
    Raw,
    Error(clr_events::DecodeError),
}

fn classify<'a>(ev: &EventRef<'a>, pointer_size: u8) -> Payload<'a> {
    let md: &'a EventMetadata = ev.metadata();
    if let Some(schema) = md.schema.as_ref().filter(|s| !s.fields.is_empty()) {
        return Payload::Schema(schema);
    }
    let mut raw = ev.raw_event();
    raw.pointer_size = pointer_size;
    match decode(&raw) {
        Ok(ClrEvent::Unknown) => Payload::Raw,
        Ok(e) => Payload::Decoded(e),
        Err(e) => Payload::Error(e),
    }
}

/// The metadata's name, else the typed decoder's, else `Event<id>`.
fn event_name<'a>(md: &'a EventMetadata, payload: &Payload<'_>) -> Cow<'a, str> {
    match payload {
        _ if !md.name.is_empty() => Cow::Borrowed(md.name.as_str()),
        Payload::Decoded(e) => Cow::Borrowed(e.name()),
        _ => Cow::Owned(format!("Event{}", md.event_id)),
    }
}

/// Appends the payload's fields (a JSON object, or `name=value` text); false when they did
/// not decode (then the fields are `decode_error`).
fn write_payload(buf: &mut Vec<u8>, bytes: &[u8], payload: &Payload<'_>, style: Style) -> bool {
    let error = |buf: &mut Vec<u8>, e: &clr_events::DecodeError| {
        let mut f = Fields::begin(buf, style);
        f.field("decode_error", e.to_string().as_str());
        f.end();
    };
    match payload {
        Payload::Schema(schema) => {
            let mark = buf.len();
            match write_fields_json(schema, bytes, buf, style) {
                Ok(()) => true,
                Err(e) => {
                    buf.truncate(mark);
                    error(buf, &e);
                    false
                }
            }
        }
        Payload::Decoded(e) => {
            e.write_fields(buf, style);
            true
        }
        Payload::Raw => {
            let mut f = Fields::begin(buf, style);
            if !bytes.is_empty() {
                json::write_hex(bytes, f.key("payload_hex"));
            }
            f.end();
            true
        }
        Payload::Error(e) => {
            error(buf, e);
            false
        }
    }
}

/// Appends the event's line (JSON or text) to `buf`; false when its payload did not decode.
fn event_line(buf: &mut Vec<u8>, ev: &EventRef<'_>, pointer_size: u8, stack_id: Option<u64>, style: Style) -> bool {
    let md = ev.metadata();
    let payload = classify(ev, pointer_size);
    let name = event_name(md, &payload);
    match style {
        Style::Json => {
            buf.extend_from_slice(b"{\"type\":\"event\",\"time_ns\":");
            ev.time_ns().write_json(buf);
            buf.extend_from_slice(b",\"provider\":");
            json::write_str(&md.provider, buf);
            buf.extend_from_slice(b",\"name\":");
            json::write_str(&name, buf);
            buf.extend_from_slice(b",\"id\":");
            md.event_id.write_json(buf);
            buf.extend_from_slice(b",\"version\":");
            md.version.write_json(buf);
            buf.extend_from_slice(b",\"opcode\":");
            md.opcode.write_json(buf);
            buf.extend_from_slice(b",\"thread\":");
            ev.thread_id().write_json(buf);
            buf.extend_from_slice(b",\"seq\":");
            ev.sequence_number().write_json(buf);
            buf.extend_from_slice(b",\"stack_id\":");
            stack_id.write_json(buf);
            buf.extend_from_slice(b",\"fields\":");
            let ok = write_payload(buf, ev.payload(), &payload, style);
            buf.extend_from_slice(b"}\n");
            ok
        }
        Style::Text => {
            let _ = write!(
                buf,
                "{:>14.6} ms  tid {:<7} {}/{} v{}  stack ",
                ev.time_ns() as f64 / 1e6,
                ev.thread_id(),
                md.provider,
                name,
                md.version,
            );
            match stack_id {
                Some(id) => {
                    let _ = write!(buf, "#{id} ({} frames)  ", ev.stack().len());
                }
                None => buf.extend_from_slice(b"-  "),
            }
            let ok = write_payload(buf, ev.payload(), &payload, style);
            buf.push(b'\n');
            ok
        }
    }
}
