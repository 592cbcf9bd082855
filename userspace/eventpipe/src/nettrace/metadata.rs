//! Event metadata records: V4/V5 (UTF-16, V1 field list, V5 tags) and V6 rows (UTF-8, optional
//! metadata), turned into [`EventMetadata`] with a `clr_events::schema::EventSchema`.

use std::collections::HashMap;
use std::sync::Arc;

use clr_events::schema::{EventSchema, Field, FieldType, TypeCode};

use super::bytes::{BufResult, Cursor};

/// Deepest struct/array nesting accepted in field lists (guards recursion on corrupt input).
const MAX_DEPTH: u32 = 16;
/// Most fields accepted in one field list.
const MAX_FIELDS: usize = 4096;

/// Description of one event type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventMetadata {
    pub metadata_id: u32,
    pub provider: String,
    pub event_id: u32,
    /// Empty for runtime-native events (their names come from the manifest).
    pub name: String,
    pub keywords: u64,
    pub version: u32,
    pub level: u32,
    pub opcode: u8,
    /// The payload fields. Empty when the record carries no field list (runtime events);
    /// `None` when the list uses a type `EventSchema` cannot express (V6-only types).
    pub schema: Option<EventSchema>,
}

impl EventMetadata {
    pub(crate) fn empty(metadata_id: u32) -> Self {
        EventMetadata {
            metadata_id,
            provider: String::new(),
            event_id: 0,
            name: String::new(),
            keywords: 0,
            version: 0,
            level: 0,
            opcode: 0,
            schema: Some(EventSchema::default()),
        }
    }
}

/// A field type as the stream describes it, before conversion to the shared schema.
enum Parsed {
    Ok(FieldType),
    /// A type code the shared schema has no variant for.
    Unsupported,
}

fn primitive(code: u32) -> Parsed {
    match TypeCode::from_u32(code) {
        Some(tc) if tc != TypeCode::Object && tc != TypeCode::Array => Parsed::Ok(FieldType::Primitive(tc)),
        _ => Parsed::Unsupported,
    }
}

fn collect(fields: Vec<(String, Parsed)>) -> Parsed {
    let mut out = Vec::with_capacity(fields.len());
    for (name, ty) in fields {
        match ty {
            Parsed::Ok(ty) => out.push(Field { name, ty }),
            Parsed::Unsupported => return Parsed::Unsupported,
        }
    }
    Parsed::Ok(FieldType::Struct(out))
}

fn into_schema(p: Parsed) -> Option<EventSchema> {
    match p {
        Parsed::Ok(FieldType::Struct(fields)) => Some(EventSchema { fields }),
        _ => None,
    }
}

fn count(c: &mut Cursor<'_>, n: i64) -> BufResult<usize> {
    if n < 0 || n as usize > MAX_FIELDS {
        return Err(c.err("field count out of range"));
    }
    Ok(n as usize)
}

// ---------------------------------------------------------------- V4 / V5

/// Parses a V4/V5 metadata record (the payload of a MetadataBlock blob).
pub(crate) fn parse_v4(payload: &[u8]) -> BufResult<EventMetadata> {
    let mut c = Cursor::new(payload);
    let id = c.u32("metadata id")?;
    let mut m = EventMetadata::empty(id);
    m.provider = c.utf16z("provider name")?;
    if c.is_empty() {
        return Ok(m);
    }
    m.event_id = c.u32("event id")?;
    m.name = c.utf16z("event name")?;
    m.keywords = c.u64("keywords")?;
    m.version = c.u32("event version")?;
    m.level = c.u32("event level")?;
    if c.remaining() < 4 {
        return Ok(m);
    }
    let n = c.i32("field count")?;
    let n = count(&mut c, i64::from(n))?;
    let v1 = v1_fields(&mut c, n, 0)?;
    let mut schema = into_schema(v1);
    // V5 tags follow the V1 list.
    while c.remaining() >= 5 {
        let len = c.i32("metadata tag length")?;
        let kind = c.u8("metadata tag kind")?;
        if len < 0 {
            return Err(c.err("negative metadata tag length"));
        }
        let mut tag = c.sub(len as usize, "metadata tag payload")?;
        match kind {
            1 => m.opcode = tag.u8("opcode tag")?,
            2 => {
                let n = tag.i32("V2 field count")?;
                let n = count(&mut tag, i64::from(n))?;
                schema = into_schema(v2_fields(&mut tag, n, 0)?);
            }
            _ => {}
        }
    }
    m.schema = schema;
    Ok(m)
}

fn v1_fields(c: &mut Cursor<'_>, n: usize, depth: u32) -> BufResult<Parsed> {
    if depth > MAX_DEPTH {
        return Err(c.err("field list nested too deeply"));
    }
    let mut fields = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        let code = c.u32("field type code")?;
        let ty = if code == TypeCode::Object as u32 {
            let k = c.i32("nested field count")?;
            let k = count(c, i64::from(k))?;
            v1_fields(c, k, depth + 1)?
        } else {
            primitive(code)
        };
        let name = c.utf16z("field name")?;
        fields.push((name, ty));
    }
    Ok(collect(fields))
}

fn v2_fields(c: &mut Cursor<'_>, n: usize, depth: u32) -> BufResult<Parsed> {
    if depth > MAX_DEPTH {
        return Err(c.err("field list nested too deeply"));
    }
    let mut fields = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        let size = c.i32("V2 field size")?;
        if size < 4 {
            return Err(c.err("V2 field size smaller than its own length"));
        }
        let mut f = c.sub(size as usize - 4, "V2 field")?;
        let name = f.utf16z("V2 field name")?;
        let code = f.u32("V2 field type code")?;
        let ty = v2_type(&mut f, code, depth)?;
        fields.push((name, ty));
    }
    Ok(collect(fields))
}

fn v2_type(c: &mut Cursor<'_>, code: u32, depth: u32) -> BufResult<Parsed> {
    if depth > MAX_DEPTH {
        return Err(c.err("field type nested too deeply"));
    }
    Ok(if code == TypeCode::Object as u32 {
        let k = c.i32("V2 nested field count")?;
        let k = count(c, i64::from(k))?;
        v2_fields(c, k, depth + 1)?
    } else if code == TypeCode::Array as u32 {
        let elem = c.u32("array element type code")?;
        match v2_type(c, elem, depth + 1)? {
            Parsed::Ok(t) => Parsed::Ok(FieldType::Array(Box::new(t))),
            Parsed::Unsupported => Parsed::Unsupported,
        }
    } else {
        primitive(code)
    })
}

// ---------------------------------------------------------------- V6

/// Parses one V6 metadata row body (after its uint16 size).
pub(crate) fn parse_v6_row(row: &[u8]) -> BufResult<EventMetadata> {
    let mut c = Cursor::new(row);
    let id = c.varu32("metadata id")?;
    let mut m = EventMetadata::empty(id);
    m.provider = c.utf8("provider name")?;
    m.event_id = c.varu32("event id")?;
    m.name = c.utf8("event name")?;
    m.schema = into_schema(v6_fields(&mut c, 0)?);
    let size = c.u16("optional metadata size")?;
    let mut opt = c.sub(usize::from(size), "optional metadata")?;
    while !opt.is_empty() {
        match opt.u8("optional metadata kind")? {
            1 => m.opcode = opt.u8("opcode")?,
            3 => m.keywords = opt.u64("keywords")?,
            4 | 5 => {
                opt.utf8("message/description")?;
            }
            6 => {
                opt.utf8("key")?;
                opt.utf8("value")?;
            }
            7 => {
                opt.guid("provider guid")?;
            }
            8 => m.level = u32::from(opt.u8("level")?),
            9 => m.version = u32::from(opt.u8("version")?),
            _ => return Err(opt.err("unknown optional metadata kind")),
        }
    }
    Ok(m)
}

fn v6_fields(c: &mut Cursor<'_>, depth: u32) -> BufResult<Parsed> {
    if depth > MAX_DEPTH {
        return Err(c.err("field list nested too deeply"));
    }
    let n = c.u16("field count")?;
    let n = count(c, i64::from(n))?;
    let mut fields = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        let size = c.u16("field size")?;
        let mut f = c.sub(usize::from(size), "field description")?;
        let name = f.utf8("field name")?;
        let ty = v6_type(&mut f, depth)?;
        fields.push((name, ty));
    }
    Ok(collect(fields))
}

fn v6_type(c: &mut Cursor<'_>, depth: u32) -> BufResult<Parsed> {
    if depth > MAX_DEPTH {
        return Err(c.err("field type nested too deeply"));
    }
    let code = u32::from(c.u8("field type code")?);
    Ok(match code {
        1 => v6_fields(c, depth + 1)?,
        19 => match v6_type(c, depth + 1)? {
            Parsed::Ok(t) => Parsed::Ok(FieldType::Array(Box::new(t))),
            Parsed::Unsupported => Parsed::Unsupported,
        },
        22 => {
            v6_type(c, depth + 1)?;
            c.u16("fixed array length")?;
            Parsed::Unsupported
        }
        24 | 25 => {
            v6_type(c, depth + 1)?;
            Parsed::Unsupported
        }
        20 | 21 | 23 | 26 => Parsed::Unsupported,
        _ => primitive(code),
    })
}

// ---------------------------------------------------------------- table

/// Metadata by id: dense for the small ids writers use, a map for the rest.
#[derive(Default)]
pub(crate) struct MetadataTable {
    dense: Vec<Option<Arc<EventMetadata>>>,
    sparse: HashMap<u32, Arc<EventMetadata>>,
}

const DENSE_LIMIT: u32 = 1 << 16;

impl MetadataTable {
    pub(crate) fn insert(&mut self, m: EventMetadata) {
        let id = m.metadata_id;
        let m = Arc::new(m);
        if id < DENSE_LIMIT {
            let i = id as usize;
            if self.dense.len() <= i {
                self.dense.resize(i + 1, None);
            }
            self.dense[i] = Some(m);
        } else {
            self.sparse.insert(id, m);
        }
    }

    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<&Arc<EventMetadata>> {
        if id < DENSE_LIMIT {
            self.dense.get(id as usize).and_then(Option::as_ref)
        } else {
            self.sparse.get(&id)
        }
    }

    pub(crate) fn clear(&mut self) {
        self.dense.clear();
        self.sparse.clear();
    }
}
