//! A focused ECMA-335 metadata reader: the `#~` table stream and `#Strings` heap, enough to name
//! methods (`Namespace.Type::Method`, nested types `Outer+Inner`).
//!
//! Row sizes are computed for every table that precedes the ones read (II.22, II.24.2.6), so
//! any assembly's tables can be walked.
use std::borrow::Cow;
use std::collections::HashMap;

use crate::FormatError;
use crate::reader::Bytes;

// Table ids (II.22).
const TYPE_REF: usize = 0x01;
const TYPE_DEF: usize = 0x02;
const METHOD_DEF: usize = 0x06;
const MEMBER_REF: usize = 0x0A;
const NESTED_CLASS: usize = 0x29;
const TABLE_COUNT: usize = 0x2D;

/// Column kinds of a metadata table.
#[derive(Clone, Copy)]
enum Col {
    U16,
    U32,
    Str,
    Guid,
    Blob,
    /// Index into one table.
    Idx(usize),
    /// Coded index over tables (None = unused tag).
    Coded(&'static [Option<usize>]),
}

use Col::*;

const RESOLUTION_SCOPE: &[Option<usize>] = &[Some(0x00), Some(0x1A), Some(0x23), Some(0x01)];
const TYPE_DEF_OR_REF: &[Option<usize>] = &[Some(0x02), Some(0x01), Some(0x1B)];
const MEMBER_REF_PARENT: &[Option<usize>] = &[Some(0x02), Some(0x01), Some(0x1A), Some(0x06), Some(0x1B)];
const HAS_CONSTANT: &[Option<usize>] = &[Some(0x04), Some(0x08), Some(0x17)];
const HAS_CUSTOM_ATTRIBUTE: &[Option<usize>] = &[
    Some(0x06), Some(0x04), Some(0x01), Some(0x02), Some(0x08), Some(0x09), Some(0x0A), Some(0x00),
    Some(0x0E), Some(0x17), Some(0x14), Some(0x11), Some(0x1A), Some(0x1B), Some(0x20), Some(0x23),
    Some(0x26), Some(0x27), Some(0x28), Some(0x2A), Some(0x2C), Some(0x2B),
];
const CUSTOM_ATTRIBUTE_TYPE: &[Option<usize>] = &[None, None, Some(0x06), Some(0x0A), None];
const HAS_FIELD_MARSHAL: &[Option<usize>] = &[Some(0x04), Some(0x08)];
const HAS_DECL_SECURITY: &[Option<usize>] = &[Some(0x02), Some(0x06), Some(0x20)];
const HAS_SEMANTICS: &[Option<usize>] = &[Some(0x14), Some(0x17)];
const METHOD_DEF_OR_REF: &[Option<usize>] = &[Some(0x06), Some(0x0A)];
const MEMBER_FORWARDED: &[Option<usize>] = &[Some(0x04), Some(0x06)];
const IMPLEMENTATION: &[Option<usize>] = &[Some(0x26), Some(0x23), Some(0x27)];
const TYPE_OR_METHOD_DEF: &[Option<usize>] = &[Some(0x02), Some(0x06)];

/// Columns of tables 0x00..0x2C (II.22.2 - II.22.39).
fn schema(table: usize) -> Option<&'static [Col]> {
    Some(match table {
        0x00 => &[U16, Str, Guid, Guid, Guid],                               // Module
        0x01 => &[Coded(RESOLUTION_SCOPE), Str, Str],                        // TypeRef
        0x02 => &[U32, Str, Str, Coded(TYPE_DEF_OR_REF), Idx(0x04), Idx(0x06)], // TypeDef
        0x03 => &[Idx(0x04)],                                                // FieldPtr
        0x04 => &[U16, Str, Blob],                                           // Field
        0x05 => &[Idx(0x06)],                                                // MethodPtr
        0x06 => &[U32, U16, U16, Str, Blob, Idx(0x08)],                      // MethodDef
        0x07 => &[Idx(0x08)],                                                // ParamPtr
        0x08 => &[U16, U16, Str],                                            // Param
        0x09 => &[Idx(0x02), Coded(TYPE_DEF_OR_REF)],                        // InterfaceImpl
        0x0A => &[Coded(MEMBER_REF_PARENT), Str, Blob],                      // MemberRef
        0x0B => &[U16, Coded(HAS_CONSTANT), Blob],                           // Constant (type u8 + pad)
        0x0C => &[Coded(HAS_CUSTOM_ATTRIBUTE), Coded(CUSTOM_ATTRIBUTE_TYPE), Blob], // CustomAttribute
        0x0D => &[Coded(HAS_FIELD_MARSHAL), Blob],                           // FieldMarshal
        0x0E => &[U16, Coded(HAS_DECL_SECURITY), Blob],                      // DeclSecurity
        0x0F => &[U16, U32, Idx(0x02)],                                      // ClassLayout
        0x10 => &[U32, Idx(0x04)],                                           // FieldLayout
        0x11 => &[Blob],                                                     // StandAloneSig
        0x12 => &[Idx(0x02), Idx(0x14)],                                     // EventMap
        0x13 => &[Idx(0x14)],                                                // EventPtr
        0x14 => &[U16, Str, Coded(TYPE_DEF_OR_REF)],                         // Event
        0x15 => &[Idx(0x02), Idx(0x17)],                                     // PropertyMap
        0x16 => &[Idx(0x17)],                                                // PropertyPtr
        0x17 => &[U16, Str, Blob],                                           // Property
        0x18 => &[U16, Idx(0x06), Coded(HAS_SEMANTICS)],                     // MethodSemantics
        0x19 => &[Idx(0x02), Coded(METHOD_DEF_OR_REF), Coded(METHOD_DEF_OR_REF)], // MethodImpl
        0x1A => &[Str],                                                      // ModuleRef
        0x1B => &[Blob],                                                     // TypeSpec
        0x1C => &[U16, Coded(MEMBER_FORWARDED), Str, Idx(0x1A)],             // ImplMap
        0x1D => &[U32, Idx(0x04)],                                           // FieldRVA
        0x1E => &[U32, U32],                                                 // EncLog
        0x1F => &[U32],                                                      // EncMap
        0x20 => &[U32, U16, U16, U16, U16, U32, Blob, Str, Str],             // Assembly
        0x21 => &[U32],                                                      // AssemblyProcessor
        0x22 => &[U32, U32, U32],                                            // AssemblyOS
        0x23 => &[U16, U16, U16, U16, U32, Blob, Str, Str, Blob],            // AssemblyRef
        0x24 => &[U32, Idx(0x23)],                                           // AssemblyRefProcessor
        0x25 => &[U32, U32, U32, Idx(0x23)],                                 // AssemblyRefOS
        0x26 => &[U32, Str, Blob],                                           // File
        0x27 => &[U32, U32, Str, Str, Coded(IMPLEMENTATION)],                // ExportedType
        0x28 => &[U32, U32, Str, Coded(IMPLEMENTATION)],                     // ManifestResource
        0x29 => &[Idx(0x02), Idx(0x02)],                                     // NestedClass
        0x2A => &[U16, U16, Coded(TYPE_OR_METHOD_DEF), Str],                 // GenericParam
        0x2B => &[Coded(METHOD_DEF_OR_REF), Blob],                           // MethodSpec
        0x2C => &[Idx(0x2A), Coded(TYPE_DEF_OR_REF)],                        // GenericParamConstraint
        _ => return None,
    })
}

/// Where one table lives and how its rows are laid out.
#[derive(Debug, Clone, Default)]
struct Table {
    rows: u32,
    offset: u64,
    row_size: u64,
    /// Byte offset of each column inside a row, and whether it is 4 bytes wide.
    cols: Vec<(u64, bool)>,
}

/// One TypeDef row, resolved. Names borrow the `#Strings` heap (owned only when not UTF-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeDef<'a> {
    pub namespace: Cow<'a, str>,
    pub name: Cow<'a, str>,
    /// First MethodDef RID owned by this type.
    pub method_list: u32,
}

/// Names from an assembly's metadata, borrowed from its bytes: parsing CoreLib allocates no
/// string per row.
#[derive(Debug, Clone, Default)]
pub struct Metadata<'a> {
    /// Version string from the metadata root (e.g. `v4.0.30319`).
    pub version: String,
    /// TypeDef rows, index = RID - 1.
    pub types: Vec<TypeDef<'a>>,
    /// MethodDef names, index = RID - 1.
    pub methods: Vec<Cow<'a, str>>,
    /// MemberRef names, index = RID - 1.
    pub member_refs: Vec<Cow<'a, str>>,
    /// Nested TypeDef RID -> enclosing TypeDef RID.
    enclosing: HashMap<u32, u32>,
    /// MethodDef signature blob offsets, index = RID - 1.
    method_sigs: Vec<u32>,
    /// The `#Blob` heap (signatures), when present.
    blobs: Option<Bytes<'a>>,
}

/// Where each table of a `#~` stream lives (read from its header: only the first
/// `24 + 4 * tables` bytes of `t` are needed), and where the tables end.
fn table_layout(t: Bytes<'_>) -> Result<(Vec<Table>, u64), FormatError> {
    let heap_sizes = t.u8(6)?;
    let valid = t.u64(8)?;
    let (wide_str, wide_guid, wide_blob) = (heap_sizes & 1 != 0, heap_sizes & 2 != 0, heap_sizes & 4 != 0);
    let mut rows = [0u32; 64];
    let mut pos = 24u64;
    for (i, r) in rows.iter_mut().enumerate() {
        if valid >> i & 1 == 1 {
            *r = t.u32(pos)?;
            pos += 4;
        }
    }
    // #- streams with extra data (HeapSizes bit 0x20) carry 4 more bytes.
    if heap_sizes & 0x20 != 0 {
        pos += 4;
    }
    let idx_wide = |table: usize| rows[table] >= 1 << 16;
    let coded_wide = |tables: &[Option<usize>]| {
        let bits = usize::BITS - (tables.len() - 1).leading_zeros();
        let max = tables.iter().flatten().map(|&t| rows[t]).max().unwrap_or(0);
        max >= 1u32 << (16 - bits)
    };
    let mut layout: Vec<Table> = vec![Table::default(); TABLE_COUNT];
    for (i, row_count) in rows.iter().enumerate() {
        if valid >> i & 1 == 0 {
            continue;
        }
        let Some(cols) = schema(i) else {
            // An unknown table: only tolerable after every table we read.
            if i < NESTED_CLASS {
                return Err(FormatError::invalid("#~ stream", format!("unknown table {i:#x} present")));
            }
            break;
        };
        let mut off = 0u64;
        let mut col_offsets = Vec::with_capacity(cols.len());
        for c in cols {
            let w = match c {
                U16 => 2,
                U32 => 4,
                Str => if wide_str { 4 } else { 2 },
                Guid => if wide_guid { 4 } else { 2 },
                Blob => if wide_blob { 4 } else { 2 },
                Idx(t) => if idx_wide(*t) { 4 } else { 2 },
                Coded(ts) => if coded_wide(ts) { 4 } else { 2 },
            };
            col_offsets.push((off, w == 4));
            off += w;
        }
        layout[i] = Table { rows: *row_count, offset: pos, row_size: off, cols: col_offsets };
        pos = pos
            .checked_add(off * *row_count as u64)
            .ok_or_else(|| FormatError::invalid("#~ stream", "table sizes overflow"))?;
    }
    Ok((layout, pos))
}

/// A stream header of a metadata root: name, offset, size.
type StreamHeader<'b> = (&'b [u8], u64, u64);

/// The stream headers of a metadata root (II.24.2.1).
fn stream_headers<'b>(root: &Bytes<'b>) -> Result<Vec<StreamHeader<'b>>, FormatError> {
    let vlen = root.u32(12)? as u64;
    if vlen > 256 {
        return Err(FormatError::invalid("metadata root", format!("version length {vlen} > 256")));
    }
    let mut pos = 16 + vlen;
    let nstreams = root.u16(pos + 2)?;
    pos += 4;
    let mut out = Vec::with_capacity(nstreams.min(16) as usize);
    for _ in 0..nstreams {
        let off = root.u32(pos)? as u64;
        let size = root.u32(pos + 4)? as u64;
        let name = root.cstr(pos + 8)?;
        pos += 8 + (name.len() as u64 + 4) / 4 * 4;
        out.push((name, off, size));
    }
    Ok(out)
}

/// The bytes of a metadata root that naming methods reads ([`Metadata::parse`]): the root and
/// stream headers, the `#~` header with the TypeDef, MethodDef, MemberRef and NestedClass rows,
/// and the `#Strings` heap. `read(buf, offset)` fills `buf` from the metadata at `offset`.
/// The buffer is the metadata's full size, zeroed: the pages of what is not read (the other
/// tables, `#Blob`, `#US`) are never touched, so they take no memory. CoreLib: 1.1 of 2.7 MB.
/// Without `with_strings` the `#Strings` heap is not read either (for [`name_tables`]).
pub fn read_for_names(size: u64, with_strings: bool, mut read: impl FnMut(&mut [u8], u64) -> Result<(), FormatError>) -> Result<Vec<u8>, FormatError> {
    let len = usize::try_from(size).map_err(|_| FormatError::invalid("metadata root", "larger than memory"))?;
    let mut buf = vec![0u8; len];
    let mut fill = |buf: &mut Vec<u8>, off: u64, n: u64, what: &'static str| -> Result<(), FormatError> {
        let end = off.checked_add(n).filter(|&e| e <= size).ok_or(FormatError::Truncated { what, offset: off, needed: n, len: size })?;
        read(&mut buf[off as usize..end as usize], off)
    };
    fill(&mut buf, 0, size.min(4096), "metadata root")?;
    let root = Bytes::new(&buf, "metadata root");
    let (mut tables, mut strings) = (None, None);
    for (name, off, size) in stream_headers(&root)? {
        match name {
            b"#~" | b"#-" => tables = Some((off, size)),
            b"#Strings" => strings = Some((off, size)),
            _ => {}
        }
    }
    let (t_off, t_size) = tables.ok_or_else(|| FormatError::invalid("metadata root", "no #~ stream"))?;
    let (s_off, s_size) = strings.ok_or_else(|| FormatError::invalid("metadata root", "no #Strings heap"))?;
    if with_strings {
        fill(&mut buf, s_off, s_size, "#Strings heap")?;
    } else if s_off.checked_add(s_size).is_none_or(|e| e > size) {
        return Err(FormatError::Truncated { what: "#Strings heap", offset: s_off, needed: s_size, len: size });
    }
    fill(&mut buf, t_off, t_size.min(24 + 4 * 64 + 4), "#~ stream")?;
    let end = t_off.checked_add(t_size).filter(|&e| e <= size).ok_or(FormatError::Truncated { what: "#~ stream", offset: t_off, needed: t_size, len: size })?;
    let (layout, _) = table_layout(Bytes::new(&buf[t_off as usize..end as usize], "#~ stream"))?;
    for table in [TYPE_DEF, METHOD_DEF, MEMBER_REF, NESTED_CLASS] {
        let tb = &layout[table];
        let n = tb.row_size.saturating_mul(tb.rows as u64);
        if n > 0 {
            let at = t_off.checked_add(tb.offset).ok_or(FormatError::invalid("#~ stream", "table offset overflows"))?;
            fill(&mut buf, at, n, "#~ tables")?;
        }
    }
    Ok(buf)
}

/// The rows that name methods, as `#Strings` offsets (the strings are read when a name is
/// asked for: [`crate::r2r_names`]), and where the `#Strings` heap lies in the metadata
/// (offset, size). Reads the metadata root, the `#~` header and the TypeDef, MethodDef,
/// MemberRef and NestedClass rows only; every string offset is checked against the heap.
pub(crate) fn name_tables(data: &[u8]) -> Result<(crate::r2r_names::NameTables, (u64, u64)), FormatError> {
    use crate::r2r_names::{NameTables, TypeRow};
    let root = Bytes::new(data, "metadata root");
    if root.u32(0)? != 0x424A_5342 {
        return Err(FormatError::invalid("metadata root", "signature is not BSJB"));
    }
    let (mut tables, mut strings) = (None, None);
    for (name, off, size) in stream_headers(&root)? {
        match name {
            b"#~" | b"#-" => tables = Some(root.sub(off, size, "#~ stream")?),
            b"#Strings" => {
                root.sub(off, size, "#Strings heap")?;
                strings = Some((off, size));
            }
            _ => {}
        }
    }
    let t = tables.ok_or_else(|| FormatError::invalid("metadata root", "no #~ stream"))?;
    let (s_off, s_size) = strings.ok_or_else(|| FormatError::invalid("metadata root", "no #Strings heap"))?;
    let (layout, pos) = table_layout(t)?;
    if pos > t.data.len() as u64 {
        return Err(FormatError::Truncated { what: "#~ tables", offset: 0, needed: pos, len: t.data.len() as u64 });
    }
    let cell = |table: usize, row: u32, col: usize| -> Result<u32, FormatError> {
        let tb = &layout[table];
        let (coff, wide) = tb.cols[col];
        t.index(tb.offset + row as u64 * tb.row_size + coff, wide)
    };
    let string = |table: usize, row: u32, col: usize| -> Result<u32, FormatError> {
        let off = cell(table, row, col)?;
        if off as u64 >= s_size {
            return Err(FormatError::invalid("#Strings heap", format!("string at {off:#x} past the heap's {s_size:#x} bytes")));
        }
        Ok(off)
    };
    let mut types = Vec::with_capacity(layout[TYPE_DEF].rows as usize);
    for r in 0..layout[TYPE_DEF].rows {
        types.push(TypeRow { name: string(TYPE_DEF, r, 1)?, namespace: string(TYPE_DEF, r, 2)?, method_list: cell(TYPE_DEF, r, 5)? });
    }
    let mut methods = Vec::with_capacity(layout[METHOD_DEF].rows as usize);
    for r in 0..layout[METHOD_DEF].rows {
        methods.push(string(METHOD_DEF, r, 3)?);
    }
    let mut member_refs = Vec::with_capacity(layout[MEMBER_REF].rows as usize);
    for r in 0..layout[MEMBER_REF].rows {
        member_refs.push(string(MEMBER_REF, r, 1)?);
    }
    let mut enclosing = Vec::with_capacity(layout[NESTED_CLASS].rows as usize);
    for r in 0..layout[NESTED_CLASS].rows {
        enclosing.push((cell(NESTED_CLASS, r, 0)?, cell(NESTED_CLASS, r, 1)?));
    }
    Ok((NameTables::new(types, methods, member_refs, enclosing), (s_off, s_size)))
}

impl<'a> Metadata<'a> {
    /// Parses a metadata root (the bytes the COR20 header's MetaData directory points at).
    pub fn parse(data: &'a [u8]) -> Result<Metadata<'a>, FormatError> {
        let root = Bytes::new(data, "metadata root");
        if root.u32(0)? != 0x424A_5342 {
            return Err(FormatError::invalid("metadata root", "signature is not BSJB"));
        }
        let streams = stream_headers(&root)?;
        let vlen = root.u32(12)? as u64;
        let version = String::from_utf8_lossy(root.cstr(16).or_else(|_| root.slice(16, vlen))?).into_owned();
        let (mut tables, mut strings, mut blobs) = (None, None, None);
        for (name, off, size) in streams {
            match name {
                b"#~" | b"#-" => tables = Some(root.sub(off, size, "#~ stream")?),
                b"#Strings" => strings = Some(root.sub(off, size, "#Strings heap")?),
                b"#Blob" => blobs = Some(root.sub(off, size, "#Blob heap")?),
                _ => {}
            }
        }
        let tables = tables.ok_or_else(|| FormatError::invalid("metadata root", "no #~ stream"))?;
        let strings = strings.ok_or_else(|| FormatError::invalid("metadata root", "no #Strings heap"))?;
        let mut md = Self::read_tables(tables, strings)?;
        md.version = version;
        md.blobs = blobs;
        Ok(md)
    }

    fn read_tables(t: Bytes<'a>, strings: Bytes<'a>) -> Result<Metadata<'a>, FormatError> {
        let (layout, pos) = table_layout(t)?;
        if pos > t.data.len() as u64 {
            return Err(FormatError::Truncated { what: "#~ tables", offset: 0, needed: pos, len: t.data.len() as u64 });
        }
        let string = |off: u32| -> Result<Cow<'a, str>, FormatError> { Ok(String::from_utf8_lossy(strings.cstr(off as u64)?)) };
        let cell = |table: usize, row: u32, col: usize| -> Result<u32, FormatError> {
            let tb = &layout[table];
            let (coff, wide) = tb.cols[col];
            t.index(tb.offset + row as u64 * tb.row_size + coff, wide)
        };

        let mut types = Vec::with_capacity(layout[TYPE_DEF].rows as usize);
        for r in 0..layout[TYPE_DEF].rows {
            types.push(TypeDef {
                name: string(cell(TYPE_DEF, r, 1)?)?,
                namespace: string(cell(TYPE_DEF, r, 2)?)?,
                method_list: cell(TYPE_DEF, r, 5)?,
            });
        }
        let mut methods = Vec::with_capacity(layout[METHOD_DEF].rows as usize);
        let mut method_sigs = Vec::with_capacity(layout[METHOD_DEF].rows as usize);
        for r in 0..layout[METHOD_DEF].rows {
            methods.push(string(cell(METHOD_DEF, r, 3)?)?);
            method_sigs.push(cell(METHOD_DEF, r, 4)?);
        }
        let mut member_refs = Vec::with_capacity(layout[MEMBER_REF].rows as usize);
        for r in 0..layout[MEMBER_REF].rows {
            member_refs.push(string(cell(MEMBER_REF, r, 1)?)?);
        }
        let mut enclosing = HashMap::new();
        for r in 0..layout[NESTED_CLASS].rows {
            enclosing.insert(cell(NESTED_CLASS, r, 0)?, cell(NESTED_CLASS, r, 1)?);
        }
        let _ = layout[TYPE_REF].rows;
        Ok(Metadata { version: String::new(), types, methods, member_refs, enclosing, method_sigs, blobs: None })
    }

    /// TypeDef RID owning MethodDef `rid` (MethodList ranges, II.22.37).
    pub fn owner_of_method(&self, rid: u32) -> Option<u32> {
        if rid == 0 || rid as usize > self.methods.len() {
            return None;
        }
        let i = self.types.partition_point(|t| t.method_list <= rid);
        (i > 0).then_some(i as u32)
    }

    /// MethodDef RIDs owned by TypeDef `rid` (its MethodList run, II.22.37).
    pub fn methods_of_type(&self, rid: u32) -> std::ops::Range<u32> {
        let Some(t) = (rid as usize).checked_sub(1).and_then(|i| self.types.get(i)) else { return 0..0 };
        let last = self.methods.len() as u32 + 1;
        let end = self.types.get(rid as usize).map_or(last, |next| next.method_list.min(last));
        t.method_list.min(end)..end
    }

    /// Parameter count of MethodDef `rid` from its signature blob (II.23.2.1), without `this`.
    pub fn param_count(&self, rid: u32) -> Option<u32> {
        let blobs = self.blobs?;
        let off = *self.method_sigs.get((rid as usize).checked_sub(1)?)? as u64;
        let (len, at) = compressed_u32(&blobs, off)?;
        let sig = blobs.sub(at, len as u64, "method signature").ok()?;
        let conv = sig.u8(0).ok()?;
        let mut pos = 1;
        if conv & 0x10 != 0 {
            // GENERIC: the generic parameter count comes first.
            pos = compressed_u32(&sig, pos)?.1;
        }
        compressed_u32(&sig, pos).map(|(n, _)| n)
    }

    /// Full type name: `Namespace.Outer+Inner`.
    pub fn type_name(&self, rid: u32) -> Option<String> {
        let mut s = String::new();
        self.push_type_name(rid, &mut s).then_some(s)
    }

    /// Appends the full type name of TypeDef `rid` to `s`; false (nothing appended) if there is none.
    pub fn push_type_name(&self, rid: u32, s: &mut String) -> bool {
        let mut chain: [Option<&TypeDef<'a>>; 64] = [None; 64];
        let mut depth = 0;
        let mut cur = rid;
        // Bounded walk: corrupt NestedClass rows may form a cycle.
        for slot in chain.iter_mut() {
            let Some(t) = (cur as usize).checked_sub(1).and_then(|i| self.types.get(i)) else { return false };
            *slot = Some(t);
            depth += 1;
            match self.enclosing.get(&cur) {
                Some(&outer) if outer != cur => cur = outer,
                _ => break,
            }
        }
        let chain = &chain[..depth];
        let Some(Some(outermost)) = chain.last() else { return false };
        if !outermost.namespace.is_empty() {
            s.push_str(&outermost.namespace);
            s.push('.');
        }
        for (i, t) in chain.iter().rev().flatten().enumerate() {
            if i > 0 {
                s.push('+');
            }
            s.push_str(&t.name);
        }
        true
    }

    /// `Namespace.Type::Method` for MethodDef `rid`.
    pub fn method_name(&self, rid: u32) -> Option<String> {
        let mut s = String::new();
        self.push_method_name(rid, &mut s).then_some(s)
    }

    /// Appends `Namespace.Type::Method` for MethodDef `rid` to `s`; false if there is no such row.
    pub fn push_method_name(&self, rid: u32, s: &mut String) -> bool {
        let Some(name) = (rid as usize).checked_sub(1).and_then(|i| self.methods.get(i)) else { return false };
        if self.owner_of_method(rid).is_some_and(|t| self.push_type_name(t, s)) {
            s.push_str("::");
        }
        s.push_str(name);
        true
    }
}

/// An ECMA-335 compressed unsigned integer at `off` (II.23.2): its value and the offset after it.
fn compressed_u32(b: &Bytes<'_>, off: u64) -> Option<(u32, u64)> {
    let b0 = b.u8(off).ok()? as u32;
    if b0 & 0x80 == 0 {
        Some((b0, off + 1))
    } else if b0 & 0xC0 == 0x80 {
        Some(((b0 & 0x3F) << 8 | b.u8(off + 1).ok()? as u32, off + 2))
    } else if b0 & 0xE0 == 0xC0 {
        let v = b.slice(off + 1, 3).ok()?;
        Some(((b0 & 0x1F) << 24 | (v[0] as u32) << 16 | (v[1] as u32) << 8 | v[2] as u32, off + 4))
    } else {
        None
    }
}
