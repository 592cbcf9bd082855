//! Self-describing (EventSource / TraceLogging) payloads written straight to JSON from their
//! [`EventSchema`], with the decoding rules of [`crate::eventsource`] and no intermediate
//! [`crate::Value`]s.

use crate::error::DecodeError;
use crate::eventsource::{MAX_DEPTH, min_size};
use crate::json::{Fields, Style, ToJson, write_hex, write_utf16};
use crate::reader::Cursor;
use crate::schema::{EventSchema, Field, FieldType, TypeCode};

/// Writes the payload's fields as a JSON object (`Style::Json`) or `name=value` pairs
/// (`Style::Text`), in schema order. On an error `out` may hold a partial object: the caller
/// truncates it back.
///
/// ```
/// use clr_events::json::Style;
/// use clr_events::schema::{EventSchema, Field, FieldType, TypeCode};
///
/// let schema = EventSchema {
///     fields: vec![
///         Field { name: "name".into(), ty: FieldType::Primitive(TypeCode::String) },
///         Field { name: "count".into(), ty: FieldType::Primitive(TypeCode::Int32) },
///     ],
/// };
/// let mut payload: Vec<u8> = "hi".encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
/// payload.extend_from_slice(&[0, 0]);
/// payload.extend_from_slice(&7i32.to_le_bytes());
/// let mut out = Vec::new();
/// clr_events::write_fields_json(&schema, &payload, &mut out, Style::Json)?;
/// assert_eq!(out, br#"{"name":"hi","count":7}"#);
/// # Ok::<(), clr_events::DecodeError>(())
/// ```
pub fn write_fields_json(
    schema: &EventSchema,
    payload: &[u8],
    out: &mut Vec<u8>,
    style: Style,
) -> Result<(), DecodeError> {
    let mut c = Cursor::new(payload, 8, "EventSource payload")?;
    write_struct(&mut c, &schema.fields, out, style, 0)
}

fn write_struct(
    c: &mut Cursor<'_>,
    fields: &[Field],
    out: &mut Vec<u8>,
    style: Style,
    depth: usize,
) -> Result<(), DecodeError> {
    let mut f = Fields::begin(out, style);
    for field in fields {
        let out = f.key_escaped(&field.name);
        write_value(c, &field.ty, &field.name, out, depth + 1)?;
    }
    f.end();
    Ok(())
}

fn write_value(
    c: &mut Cursor<'_>,
    ty: &FieldType,
    name: &str,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError::SchemaTooDeep {
            field: name.to_string(),
            max: MAX_DEPTH,
        });
    }
    match ty {
        FieldType::Primitive(tc) => write_primitive(c, *tc, name, out),
        FieldType::Struct(fields) => write_struct(c, fields, out, Style::Json, depth),
        FieldType::Array(elem) => {
            let count = c.u16(name)?;
            c.check_count(u64::from(count), min_size(elem), name)?;
            out.push(b'[');
            for i in 0..count {
                if i > 0 {
                    out.push(b',');
                }
                write_value(c, elem, name, out, depth + 1)?;
            }
            out.push(b']');
            Ok(())
        }
    }
}

fn write_primitive(
    c: &mut Cursor<'_>,
    tc: TypeCode,
    name: &str,
    out: &mut Vec<u8>,
) -> Result<(), DecodeError> {
    match tc {
        TypeCode::Empty | TypeCode::DbNull => out.extend_from_slice(b"null"),
        TypeCode::Object => out.extend_from_slice(b"{}"),
        TypeCode::Boolean => (c.u32(name)? != 0).write_json(out),
        TypeCode::Char => {
            let u = c.u16(name)?;
            let ch = char::from_u32(u32::from(u)).unwrap_or(char::REPLACEMENT_CHARACTER);
            let mut buf = [0u8; 4];
            ch.encode_utf8(&mut buf).write_json(out);
        }
        TypeCode::SByte => c.i8(name)?.write_json(out),
        TypeCode::Byte => c.u8(name)?.write_json(out),
        TypeCode::Int16 => c.i16(name)?.write_json(out),
        TypeCode::UInt16 => c.u16(name)?.write_json(out),
        TypeCode::Int32 => c.i32(name)?.write_json(out),
        TypeCode::UInt32 => c.u32(name)?.write_json(out),
        TypeCode::Int64 => c.i64(name)?.write_json(out),
        TypeCode::UInt64 => c.u64(name)?.write_json(out),
        TypeCode::Single => c.f32(name)?.write_json(out),
        TypeCode::Double => c.f64(name)?.write_json(out),
        TypeCode::Decimal => write_hex(c.bytes(16, name)?, out),
        TypeCode::DateTime => c.i64(name)?.write_json(out),
        TypeCode::Guid => c.guid(name)?.write_json(out),
        TypeCode::String => write_utf16(&c.utf16z(name)?, out),
        TypeCode::Array => {
            return Err(DecodeError::InvalidSchema {
                field: name.to_string(),
                reason: "array field without an element type",
            });
        }
    }
    Ok(())
}
