//! Printing a NetTrace file's events decoded: EventSource events by their metadata's field
//! names, runtime events by the typed decoders.
use std::{io::Write, path::Path};

use clr_events::direct_json::write_direct_json;
use clr_events::event_json::Hex;
use clr_events::json::{self, Fields, NearbyU64, Style, ToJson};
use clr_events::schema::EventSchema;
use clr_events::{ClrEvent, decode_as, write_fields_json};
use clrprobe_eventpipe::nettrace::{EventMetadata, EventRef, NetTraceError, NetTraceReader, StreamStatus};
use serde::Serialize;

use super::clock::Clock;
use super::line_heads::{Head, LineHeads, json_middle, text_middle};
use super::stack_ids::StackIds;

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
    // No BufReader: the reader buffers headers itself and reads event blocks straight into
    // its arena (through a second buffer every byte would be copied once more).
    dump_from(file, &p, json, out)
}

/// Output is gathered in chunks of this size before it is written.
const CHUNK: usize = 256 << 10;

/// [`dump`] of a stream; `name` names it in errors.
pub fn dump_from(input: impl std::io::Read, name: &str, json: bool, mut out: impl Write) -> Result<DumpStats, DumpError> {
    let p = name.to_owned();
    let mut reader = NetTraceReader::new(input).map_err(|source| DumpError::Read { path: p.clone(), source })?;
    let pointer_size = reader.trace_info().pointer_size as u8;
    let clock = Clock::new(reader.trace_info());
    let mut stats = DumpStats::default();
    let mut lines = Lines {
        buf: Vec::with_capacity(CHUNK + (64 << 10)),
        stacks: StackIds::default(),
        heads: LineHeads::default(),
        style: if json { Style::Json } else { Style::Text },
        pointer_size,
        clock,
        times: NearbyU64::default(),
    };
    let mut piped_away = false;
    let result = loop {
        // Matched by reference: the event is read where the reader returned it (a copy of
        // it first stalls on the stores just made).
        let next = reader.next_event();
        match &next {
            Ok(Some(ev)) => {
                stats.events += 1;
                if !lines.event(ev) {
                    stats.decode_errors += 1;
                }
                if lines.buf.len() >= CHUNK {
                    if !write_chunk(&mut out, &lines.buf)? {
                        piped_away = true;
                        break Ok(());
                    }
                    lines.buf.clear();
                }
            }
            Ok(None) => break Ok(()),
            Err(_) => {}
        }
        if let Err(source) = next {
            break Err(DumpError::Read { path: p.clone(), source });
        }
    };
    if !piped_away && write_chunk(&mut out, &lines.buf)? {
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

/// The dump's output buffer and what it remembers between events.
struct Lines {
    buf: Vec<u8>,
    stacks: StackIds,
    heads: LineHeads,
    style: Style,
    pointer_size: u8,
    clock: Clock,
    /// The JSON lines' `time_ns` digits.
    times: NearbyU64,
}

impl Lines {
    /// Appends the event's line (JSON or text; in JSON after its stack's line the first time
    /// the stack is seen); false when its payload did not decode. Inlined into the read loop:
    /// the event is then read where the reader returned it, not copied to the stack first.
    #[inline(always)]
    fn event(&mut self, ev: &EventRef<'_>) -> bool {
        let stack = ev.stack();
        let stack_id = if stack.is_empty() {
            None
        } else {
            let (id, new) = self.stacks.id(stack);
            if new && self.style == Style::Json {
                stack_line(&mut self.buf, id, stack);
            }
            Some(id)
        };
        let md = ev.metadata();
        let head = self.heads.get(md);
        // In JSON, the events of the commonest layouts are written from the payload, strings
        // escaped in the pass that finds their end (the same bytes as decoding them, then
        // writing them). Not a head's first event, which names it.
        if self.style == Style::Json
            && let Some((kind, decoder_name)) = head.direct
            && head.named()
        {
            let name = if md.name.is_empty() { decoder_name } else { md.name.as_str() };
            let buf = &mut self.buf;
            let mark = buf.len();
            json_line_head(buf, &mut self.times, ev, self.clock.ns(ev.timestamp()), head, md, name, stack_id);
            let version = u8::try_from(md.version).unwrap_or(u8::MAX);
            if write_direct_json(kind, ev.payload(), version, self.pointer_size, buf) {
                buf.extend_from_slice(b"}\n");
                return true;
            }
            // It does not decode: written below, with its error.
            buf.truncate(mark);
        }
        // Decoded here and classified by reference (a moved `ClrEvent` is a large copy).
        let decoded;
        let payload = match md.schema.as_ref() {
            Some(schema) if head.self_describing => Payload::Schema(schema),
            _ => {
                let mut raw = ev.raw_event();
                raw.pointer_size = self.pointer_size;
                decoded = decode_as(head.family, &raw);
                match &decoded {
                    Ok(ClrEvent::Unknown) => Payload::Raw,
                    Ok(e) => Payload::Decoded(e),
                    Err(e) => Payload::Error(e),
                }
            }
        };
        let name = event_name(md, &payload);
        head.name_once(md, name);
        let name = name.unwrap_or(&head.fallback);
        let cached = head.has_name(name);
        let buf = &mut self.buf;
        match self.style {
            Style::Json => {
                json_line_head(buf, &mut self.times, ev, self.clock.ns(ev.timestamp()), head, md, name, stack_id);
                let ok = write_payload(buf, ev.payload(), &payload, Style::Json);
                buf.extend_from_slice(b"}\n");
                ok
            }
            Style::Text => {
                write_ms(buf, self.clock.ns(ev.timestamp()));
                buf.extend_from_slice(b" ms  tid ");
                let mark = buf.len();
                ev.thread_id().write_json(buf);
                // Left-aligned in 7 columns.
                let width = buf.len() - mark;
                buf.extend_from_slice(&b"       "[width.min(7)..]);
                if cached {
                    buf.extend_from_slice(&head.text);
                } else {
                    buf.extend_from_slice(&text_middle(md, name));
                }
                match stack_id {
                    Some(id) => {
                        buf.push(b'#');
                        id.write_json(buf);
                        buf.extend_from_slice(b" (");
                        stack.len().write_json(buf);
                        buf.extend_from_slice(b" frames)  ");
                    }
                    None => buf.extend_from_slice(b"-  "),
                }
                let ok = write_payload(buf, ev.payload(), &payload, Style::Text);
                buf.push(b'\n');
                ok
            }
        }
    }
}

/// An event's JSON line up to its fields: `{"type":"event",…,"fields":`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn json_line_head(
    buf: &mut Vec<u8>,
    times: &mut NearbyU64,
    ev: &EventRef<'_>,
    time_ns: i64,
    head: &Head,
    md: &EventMetadata,
    name: &str,
    stack_id: Option<u64>,
) {
    buf.extend_from_slice(b"{\"type\":\"event\",\"time_ns\":");
    if time_ns < 0 {
        time_ns.write_json(buf);
    } else {
        times.put(buf, time_ns as u64);
    }
    if head.has_name(name) {
        head.put_json(buf);
    } else {
        buf.extend_from_slice(&json_middle(md, name));
    }
    ev.thread_id().write_json(buf);
    buf.extend_from_slice(b",\"seq\":");
    ev.sequence_number().write_json(buf);
    buf.extend_from_slice(b",\"stack_id\":");
    stack_id.write_json(buf);
    buf.extend_from_slice(b",\"fields\":");
}

/// `ns` as milliseconds with six decimals, right-aligned in 14 columns: what `{:>14.6}` of
/// `ns as f64 / 1e6` prints (the float is exact to the sixth decimal below 2^50 ns, 13 days).
fn write_ms(buf: &mut Vec<u8>, ns: i64) {
    let abs = ns.unsigned_abs();
    if abs >= 1 << 50 {
        let _ = write!(buf, "{:>14.6}", ns as f64 / 1e6);
        return;
    }
    let mut tmp = [0u8; 32];
    let mut n = 0;
    if ns < 0 {
        tmp[0] = b'-';
        n = 1;
    }
    // The whole milliseconds (below 2^32: at most 10 digits).
    let mut whole = abs / 1_000_000;
    let digits = if whole == 0 { 1 } else { whole.ilog10() as usize + 1 };
    for i in (0..digits).rev() {
        tmp[n + i] = b'0' + (whole % 10) as u8;
        whole /= 10;
    }
    n += digits;
    tmp[n] = b'.';
    n += 1;
    let mut frac = abs % 1_000_000;
    for i in (0..6).rev() {
        tmp[n + i] = b'0' + (frac % 10) as u8;
        frac /= 10;
    }
    n += 6;
    if n < 14 {
        buf.extend_from_slice(&b"              "[n..]);
    }
    buf.extend_from_slice(&tmp[..n]);
}

/// What an event's payload is, found before anything is written (the name comes from it).
enum Payload<'p, 'a> {
    /// Self-describing: the metadata's field list.
    Schema(&'a EventSchema),
    /// A runtime event the typed decoders know.
    Decoded(&'p ClrEvent<'a>),
    /// No decoder: the payload as hex.
    Raw,
    Error(&'p clr_events::DecodeError),
}

/// The metadata's name, else the typed decoder's; `None` for `Event<id>`.
fn event_name<'a>(md: &'a EventMetadata, payload: &Payload<'_, '_>) -> Option<&'a str> {
    match payload {
        _ if !md.name.is_empty() => Some(md.name.as_str()),
        Payload::Decoded(e) => Some(e.name()),
        _ => None,
    }
}

/// Appends the payload's fields (a JSON object, or `name=value` text); false when they did
/// not decode (then the fields are `decode_error`).
fn write_payload(buf: &mut Vec<u8>, bytes: &[u8], payload: &Payload<'_, '_>, style: Style) -> bool {
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


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_print_like_the_float_format() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut values = vec![0i64, 1, -1, 999_999, 1_000_000, -1_000_001, 17_886_116, 1 << 40, -(1 << 45), (1 << 52) - 1, 1 << 52, i64::MAX, i64::MIN];
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push((x >> (x % 40)) as i64 * if x & 1 == 0 { 1 } else { -1 });
        }
        for ns in values {
            let mut got = Vec::new();
            write_ms(&mut got, ns);
            assert_eq!(String::from_utf8(got).unwrap(), format!("{:>14.6}", ns as f64 / 1e6), "{ns}");
        }
    }
}
