//! Generic decoding of self-describing (EventSource / TraceLogging) payloads from an
//! [`EventSchema`], with the NetTrace V5 encoding rules: strings are NUL-terminated UTF-16LE,
//! Boolean is 4 bytes, arrays are a u16 count followed by the elements, DateTime is an 8-byte
//! FILETIME, Decimal 16 bytes, nested structs are their fields back to back.

use crate::error::DecodeError;
use crate::guid::Guid;
use crate::reader::Cursor;
use crate::schema::{EventSchema, FieldType, TypeCode};

/// Deepest struct/array nesting accepted (protects the stack against hostile schemas).
pub const MAX_DEPTH: usize = 32;
/// Most bytes of decoded values one payload byte may give, each value and field name counted
/// (plus [`MAX_DECODED_BASE`]): 16 MiB for EventPipe's largest payload, 64 KiB. Without a cap,
/// arrays of empty structs nested in arrays turned a 4 KiB payload into gigabytes.
pub const MAX_DECODED_PER_BYTE: usize = 256;
/// Bytes of decoded values any payload may give (fields that take no payload bytes).
pub const MAX_DECODED_BASE: usize = 64 << 10;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Empty / DBNull: no bytes.
    Null,
    Bool(bool),
    /// One UTF-16 code unit (an unpaired surrogate becomes U+FFFD).
    Char(char),
    I8(i8),
    U8(u8),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
    /// The 16 raw bytes of a System.Decimal (flags, hi32, lo64).
    Decimal([u8; 16]),
    /// Windows FILETIME: 100 ns ticks since 1601-01-01 UTC.
    DateTime(i64),
    Guid(Guid),
    String(String),
    Struct(Vec<(String, Value)>),
    Array(Vec<Value>),
}

impl Value {
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(u64::from(v)),
            Value::U16(v) => Some(u64::from(v)),
            Value::U32(v) => Some(u64::from(v)),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(i64::from(v)),
            Value::I16(v) => Some(i64::from(v)),
            Value::I32(v) => Some(i64::from(v)),
            Value::I64(v) => Some(v),
            Value::U8(v) => Some(i64::from(v)),
            Value::U16(v) => Some(i64::from(v)),
            Value::U32(v) => Some(i64::from(v)),
            Value::U64(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

/// Decodes `payload` field by field. Bytes after the last field are ignored.
pub fn decode_fields(
    schema: &EventSchema,
    payload: &[u8],
) -> Result<Vec<(String, Value)>, DecodeError> {
    // Pointer size is irrelevant to EventSource type codes; 8 only satisfies the cursor.
    let mut c = Cursor::new(payload, 8, "EventSource payload")?;
    let mut out = Vec::with_capacity(schema.fields.len());
    let max = payload
        .len()
        .saturating_mul(MAX_DECODED_PER_BYTE)
        .saturating_add(MAX_DECODED_BASE);
    let mut budget = Budget { left: max, max };
    for f in &schema.fields {
        let v = read_value(&mut c, &f.ty, &f.name, 0, &mut budget)?;
        out.push((f.name.clone(), v));
    }
    Ok(out)
}

/// Bytes of decoded values still allowed for one payload, of `max`.
struct Budget {
    left: usize,
    max: usize,
}

/// Minimum encoded size of one value of `ty` (used to bound array counts).
pub(crate) fn min_size(ty: &FieldType) -> u64 {
    match ty {
        FieldType::Primitive(tc) => match tc {
            TypeCode::Empty | TypeCode::DbNull | TypeCode::Object => 0,
            TypeCode::SByte | TypeCode::Byte => 1,
            TypeCode::Char
            | TypeCode::Int16
            | TypeCode::UInt16
            | TypeCode::String
            | TypeCode::Array => 2,
            TypeCode::Boolean | TypeCode::Int32 | TypeCode::UInt32 | TypeCode::Single => 4,
            TypeCode::Int64 | TypeCode::UInt64 | TypeCode::Double | TypeCode::DateTime => 8,
            TypeCode::Decimal | TypeCode::Guid => 16,
        },
        FieldType::Struct(fields) => fields
            .iter()
            .map(|f| min_size(&f.ty))
            .fold(0u64, u64::saturating_add),
        FieldType::Array(_) => 2,
    }
}

fn read_value(
    c: &mut Cursor<'_>,
    ty: &FieldType,
    name: &str,
    depth: usize,
    budget: &mut Budget,
) -> Result<Value, DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError::SchemaTooDeep {
            field: name.to_string(),
            max: MAX_DEPTH,
        });
    }
    let cost = std::mem::size_of::<(String, Value)>() + name.len();
    budget.left = budget
        .left
        .checked_sub(cost)
        .ok_or_else(|| DecodeError::DecodedTooLarge {
            field: name.to_string(),
            max: budget.max,
        })?;
    match ty {
        FieldType::Primitive(tc) => read_primitive(c, *tc, name),
        FieldType::Struct(fields) => {
            let mut out = Vec::with_capacity(fields.len());
            for f in fields {
                let v = read_value(c, &f.ty, &f.name, depth + 1, budget)?;
                out.push((f.name.clone(), v));
            }
            Ok(Value::Struct(out))
        }
        FieldType::Array(elem) => {
            let count = c.u16(name)?;
            c.check_count(u64::from(count), min_size(elem), name)?;
            let mut out = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                out.push(read_value(c, elem, name, depth + 1, budget)?);
            }
            Ok(Value::Array(out))
        }
    }
}

fn read_primitive(c: &mut Cursor<'_>, tc: TypeCode, name: &str) -> Result<Value, DecodeError> {
    Ok(match tc {
        TypeCode::Empty | TypeCode::DbNull => Value::Null,
        // An Object without its field list: nothing to read.
        TypeCode::Object => Value::Struct(Vec::new()),
        TypeCode::Boolean => Value::Bool(c.u32(name)? != 0),
        TypeCode::Char => {
            let u = c.u16(name)?;
            Value::Char(char::from_u32(u32::from(u)).unwrap_or(char::REPLACEMENT_CHARACTER))
        }
        TypeCode::SByte => Value::I8(c.i8(name)?),
        TypeCode::Byte => Value::U8(c.u8(name)?),
        TypeCode::Int16 => Value::I16(c.i16(name)?),
        TypeCode::UInt16 => Value::U16(c.u16(name)?),
        TypeCode::Int32 => Value::I32(c.i32(name)?),
        TypeCode::UInt32 => Value::U32(c.u32(name)?),
        TypeCode::Int64 => Value::I64(c.i64(name)?),
        TypeCode::UInt64 => Value::U64(c.u64(name)?),
        TypeCode::Single => Value::F32(c.f32(name)?),
        TypeCode::Double => Value::F64(c.f64(name)?),
        TypeCode::Decimal => {
            let b = c.bytes(16, name)?;
            let mut raw = [0u8; 16];
            raw.copy_from_slice(b);
            Value::Decimal(raw)
        }
        TypeCode::DateTime => Value::DateTime(c.i64(name)?),
        TypeCode::Guid => Value::Guid(c.guid(name)?),
        TypeCode::String => Value::String(c.utf16z(name)?.to_string_lossy()),
        TypeCode::Array => {
            return Err(DecodeError::InvalidSchema {
                field: name.to_string(),
                reason: "array field without an element type",
            });
        }
    })
}
