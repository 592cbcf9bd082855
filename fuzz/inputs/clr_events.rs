//! What one input of the clr_events fuzz target means, shared by the target
//! (`fuzz/fuzz_targets/clr_events.rs`) and the test that replays `fuzz/regressions/clr_events`
//! (`userspace/clr-events/tests/fuzz_regressions.rs`).
//!
//! Input (the seeds are real events cut out of NetTrace files by `cargo xtask fuzz`):
//! - byte 0: provider, `% 4`: 0 runtime, 1 rundown, 2 sample profiler, 3 EventSource fields;
//! - bytes 1–2: event id (u16 LE), byte 3: version, byte 4: pointer size (odd = 4, even = 8);
//! - provider 3 only: byte 5 = length N of a field list, then N bytes of field list (see
//!   [`schema`]);
//! - the rest: the payload.

use clr_events::RawEvent;
use clr_events::providers::{RUNDOWN, RUNTIME, SAMPLE_PROFILER};
use clr_events::schema::{EventSchema, Field, FieldType, TypeCode};

/// Deepest nesting the input can describe: deeper than the decoder accepts, to reach its check.
const DEPTH: u32 = 40;

/// A field list from bytes, one byte a field: `% 21` = 0–18 a primitive TypeCode (1, Object,
/// opens a struct), 19 an array of the next field's type, 20 closes the open struct.
pub fn schema(spec: &[u8]) -> EventSchema {
    fn field(spec: &mut std::slice::Iter<'_, u8>, depth: u32) -> Option<FieldType> {
        let code = u32::from(*spec.next()? % 21);
        Some(match code {
            1 if depth < DEPTH => FieldType::Struct(fields(spec, depth + 1)),
            19 if depth < DEPTH => FieldType::Array(Box::new(field(spec, depth + 1)?)),
            20 => return None,
            c => FieldType::Primitive(TypeCode::from_u32(c)?),
        })
    }
    fn fields(spec: &mut std::slice::Iter<'_, u8>, depth: u32) -> Vec<Field> {
        let mut out = Vec::new();
        while let Some(ty) = field(spec, depth) {
            out.push(Field { name: String::new(), ty });
        }
        out
    }
    EventSchema { fields: fields(&mut spec.iter(), 0) }
}

/// The field list and payload of an EventSource input (provider 3).
pub fn eventsource(data: &[u8]) -> Option<(EventSchema, &[u8])> {
    let (head, rest) = data.split_first_chunk::<5>()?;
    let (&n, rest) = rest.split_first().filter(|_| head[0] % 4 == 3)?;
    let (spec, payload) = rest.split_at(usize::from(n).min(rest.len()));
    Some((schema(spec), payload))
}

/// Runs one input through the decoders.
pub fn run(data: &[u8]) {
    let Some((head, rest)) = data.split_first_chunk::<5>() else { return };
    let event_id = u16::from_le_bytes([head[1], head[2]]);
    let (version, pointer_size) = (head[3], if head[4] % 2 == 1 { 4 } else { 8 });
    let provider = match head[0] % 4 {
        0 => RUNTIME,
        1 => RUNDOWN,
        2 => SAMPLE_PROFILER,
        _ => {
            let Some((schema, payload)) = eventsource(data) else { return };
            if let Ok(fields) = clr_events::decode_fields(&schema, payload) {
                std::hint::black_box(format!("{fields:?}"));
            }
            return;
        }
    };
    let raw = RawEvent { provider, event_id, version, payload: rest, pointer_size };
    if let Ok(e) = clr_events::decode(&raw) {
        std::hint::black_box(format!("{e:?}"));
    }
}
