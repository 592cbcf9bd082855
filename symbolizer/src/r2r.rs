//! ReadyToRun images: COR20 header -> READYTORUN_HEADER -> RuntimeFunctions (102),
//! MethodDefEntryPoints (103), InstanceMethodEntryPoints (109), named through the metadata.
//!
//! [`R2rImage::parse`] takes the file bytes; [`R2rImage::parse_source`] reads only the parts it
//! needs through an [`ImageSource`] (about 1.7 of CoreLib's 12.7 MB: of the metadata, only the
//! tables that name methods). Method names are built when first asked for, from the `#Strings`
//! heap read from the file then ([`crate::r2r_names`]). Lookups take RVAs or file offsets.
use std::borrow::Cow;
use std::sync::Arc;

use crate::FormatError;
use crate::r2r_names::{LazyNames, NameOf, StringHeap};
use crate::native_format::{NativeArray, decode_unsigned, hashtable_entries};
use crate::pe::{ImageSource, PeImage, base_machine};
use crate::r2r_sig::{MethodRef, SigReader};
use crate::reader::Bytes;

pub const READYTORUN_SIGNATURE: u32 = 0x0052_5452;
const COMIMAGE_FLAGS_IL_LIBRARY: u32 = 0x4;
const SECTION_RUNTIME_FUNCTIONS: u32 = 102;
const SECTION_METHODDEF_ENTRY_POINTS: u32 = 103;
const SECTION_INSTANCE_METHOD_ENTRY_POINTS: u32 = 109;
const SECTION_COMPONENT_ASSEMBLIES: u32 = 115;
const SECTION_OWNER_COMPOSITE_EXECUTABLE: u32 = 116;
/// READYTORUN_FLAG_COMPONENT: the header of one assembly inside a composite image.
pub const FLAG_COMPONENT: u32 = 0x20;

/// One method with precompiled code. Its name is [`R2rImage::method_name`].
///
/// Packed in 8 bytes (CoreLib has ~36k of them): the top bit of `key` marks an entry of
/// InstanceMethodEntryPoints, the other bits hold its index in the image's `instances`, or the
/// MethodDef RID of a plain method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct R2rMethod {
    key: u32,
    /// RVA of the entry point (start of the main body).
    pub entry_rva: u32,
}

const INSTANTIATED: u32 = 1 << 31;

impl R2rMethod {
    /// True for entries of InstanceMethodEntryPoints (generic instantiations).
    pub fn instantiated(&self) -> bool {
        self.key & INSTANTIATED != 0
    }
}

/// A [`MethodRef`] in 8 bytes instead of 16 (CoreLib has ~16k instantiated methods): the RID
/// (below 2^30: metadata RIDs have 24 bits) with the two flags on top, and the owner TypeDef + 1
/// (0 = none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PackedRef {
    rid_flags: u32,
    owner: u32,
}

const REF_MEMBER: u32 = 1 << 30;
const REF_OTHER_MODULE: u32 = 1 << 31;

impl PackedRef {
    /// None if `m` does not fit (a RID of 2^30 or more, or an owner of u32::MAX).
    fn pack(m: MethodRef) -> Option<PackedRef> {
        if m.rid >= REF_MEMBER {
            return None;
        }
        let owner = match m.owner_typedef {
            Some(t) => t.checked_add(1)?,
            None => 0,
        };
        let flags = if m.member_ref { REF_MEMBER } else { 0 } | if m.other_module { REF_OTHER_MODULE } else { 0 };
        Some(PackedRef { rid_flags: m.rid | flags, owner })
    }

    fn unpack(self) -> MethodRef {
        MethodRef {
            rid: self.rid_flags & !(REF_MEMBER | REF_OTHER_MODULE),
            member_ref: self.rid_flags & REF_MEMBER != 0,
            owner_typedef: self.owner.checked_sub(1),
            other_module: self.rid_flags & REF_OTHER_MODULE != 0,
        }
    }
}

/// The image's RUNTIME_FUNCTIONs (bodies and funclets), sorted by their begin RVA.
///
/// CoreLib has ~37.5k of them (0.44 MB as a table of 12 bytes each). From a file, only every
/// [`INDEX_STRIDE`]th begin is kept, and a lookup reads the one block of entries that can hold
/// the RVA with `pread`; images parsed from memory, and tables that are not sorted in the file,
/// are kept whole.
#[derive(Debug)]
enum Runtimes {
    /// (begin, end), sorted by begin.
    Memory(Vec<(u32, u32)>),
    /// `count` entries of `entry` bytes at file offset `offset` of `file`.
    #[cfg(unix)]
    File { file: std::fs::File, offset: u64, count: u32, entry: u32, has_end: bool, index: Vec<u32> },
}

/// Entries per block of a table read from the file (64 x 12 bytes read by a lookup).
const INDEX_STRIDE: u32 = 64;
/// Entries read at once while parsing.
const PARSE_CHUNK: u32 = 4096;

impl Runtimes {
    fn count(&self) -> usize {
        match self {
            Runtimes::Memory(v) => v.len(),
            #[cfg(unix)]
            Runtimes::File { count, .. } => *count as usize,
        }
    }

    /// Entries `[from, from + n)` of a file table as (begin, end) (an ARM table's end is the
    /// next begin: one more entry is read).
    #[cfg(unix)]
    fn read_block(file: &std::fs::File, offset: u64, count: u32, entry: u32, has_end: bool, from: u32, n: u32) -> Option<Vec<(u32, u32)>> {
        use std::os::unix::fs::FileExt;
        let n = n.min(count.saturating_sub(from));
        let extra = u32::from(!has_end && from + n < count);
        let mut buf = vec![0u8; ((n + extra) * entry) as usize];
        file.read_exact_at(&mut buf, offset + from as u64 * entry as u64).ok()?;
        let word = |i: usize, k: usize| u32::from_le_bytes(buf[i * entry as usize + k..i * entry as usize + k + 4].try_into().unwrap_or_default());
        Some(
            (0..n as usize)
                .map(|i| {
                    let begin = word(i, 0);
                    let end = if has_end { word(i, 4) } else if i + 1 < (n + extra) as usize { word(i + 1, 0) } else { begin.saturating_add(1) };
                    (begin, end)
                })
                .collect(),
        )
    }

    /// The entry holding `rva`.
    fn find(&self, rva: u32) -> Option<(u32, u32)> {
        let hit = |v: &[(u32, u32)]| {
            let i = v.partition_point(|r| r.0 <= rva).checked_sub(1)?;
            Some(v[i]).filter(|r| rva < r.1)
        };
        match self {
            Runtimes::Memory(v) => hit(v),
            #[cfg(unix)]
            Runtimes::File { file, offset, count, entry, has_end, index } => {
                let block = index.partition_point(|&b| b <= rva).checked_sub(1)? as u32;
                hit(&Self::read_block(file, *offset, *count, *entry, *has_end, block * INDEX_STRIDE, INDEX_STRIDE)?)
            }
        }
    }

    /// Every entry (tests and diagnostics: a file table is read whole).
    fn all(&self) -> Vec<(u32, u32)> {
        match self {
            Runtimes::Memory(v) => v.clone(),
            #[cfg(unix)]
            Runtimes::File { file, offset, count, entry, has_end, .. } => Self::read_block(file, *offset, *count, *entry, *has_end, 0, *count).unwrap_or_default(),
        }
    }
}

/// A parsed ReadyToRun image.
#[derive(Debug)]
pub struct R2rImage {
    pub pe: PeImage,
    pub major_version: u16,
    pub minor_version: u16,
    pub flags: u32,
    /// Methods with code, in entry-point order (a range belongs to the last method whose entry
    /// is at or before it: funclets follow their method's body).
    pub methods: Vec<R2rMethod>,
    /// The methods' names, built when asked for.
    names: LazyNames,
    /// What names each instantiated method (the low bits of its `R2rMethod::key` index it).
    instances: Vec<PackedRef>,
    ranges: Runtimes,
    /// Entries of InstanceMethodEntryPoints that could not be decoded.
    pub undecoded_instance_entries: usize,
}

/// A named hit from [`R2rImage::lookup_rva`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct R2rSymbol<'a> {
    pub method: &'a R2rMethod,
    /// The method's name.
    pub name: Arc<str>,
    /// Offset of the RVA from the method's entry point.
    pub offset: u32,
    /// Code range (one RUNTIME_FUNCTION: the body or a funclet) holding the RVA.
    pub range: (u32, u32),
}

impl R2rImage {
    /// Parses an R2R PE image from its file bytes.
    pub fn parse(data: &[u8]) -> Result<R2rImage, FormatError> {
        Self::parse_source(data)
    }

    /// Parses an R2R PE image, reading only the headers, the metadata and the R2R sections it
    /// names from `src` (not the code, IL or resources).
    pub fn parse_source<S: ImageSource + ?Sized>(src: &S) -> Result<R2rImage, FormatError> {
        let pe = PeImage::read(src)?;
        let at = |rva: u32, size: u32, what: &'static str| -> Result<Cow<'_, [u8]>, FormatError> { pe.bytes_at(src, rva, size, what) };
        let cor = pe.cor20(src)?;
        let ((md_rva, md_size), cor_flags, (mnh_rva, mnh_size)) = (cor.metadata, cor.flags, cor.managed_native_header);
        if cor_flags & COMIMAGE_FLAGS_IL_LIBRARY == 0 || mnh_rva == 0 {
            return Err(FormatError::NotReadyToRun("no ManagedNativeHeader (IL-only image)"));
        }
        let metadata_bytes = pe.metadata_for(src, md_rva, md_size, false)?;
        let (tables, (s_off, s_size)) = crate::metadata::name_tables(&metadata_bytes)?;
        drop(metadata_bytes);
        let md_offset = pe
            .rva_to_offset(md_rva)
            .ok_or_else(|| FormatError::invalid("metadata", format!("RVA {md_rva:#x} is in no section")))? as u64;
        let heap = StringHeap::of(src, md_offset + s_off, s_size)?;
        let method_rows = tables.method_count() as u32;

        let hdr = at(mnh_rva, mnh_size.max(16), "READYTORUN_HEADER")?;
        let hdr = Bytes::new(&hdr, "READYTORUN_HEADER");
        if hdr.u32(0)? != READYTORUN_SIGNATURE {
            return Err(FormatError::NotReadyToRun("ManagedNativeHeader lacks the 'RTR' signature"));
        }
        let (major_version, minor_version, flags) = (hdr.u16(4)?, hdr.u16(6)?, hdr.u32(8)?);
        let nsections = hdr.u32(12)?;
        let sections_bytes = at(mnh_rva.saturating_add(16), nsections.saturating_mul(12), "READYTORUN_HEADER sections")?;
        let sec = Bytes::new(&sections_bytes, "READYTORUN_HEADER sections");
        let find = |ty: u32| -> Result<Option<(u32, u32)>, FormatError> {
            for i in 0..nsections as u64 {
                if sec.u32(i * 12)? == ty {
                    return Ok(Some((sec.u32(i * 12 + 4)?, sec.u32(i * 12 + 8)?)));
                }
            }
            Ok(None)
        };
        if flags & FLAG_COMPONENT != 0 || find(SECTION_OWNER_COMPOSITE_EXECUTABLE)?.is_some() {
            return Err(FormatError::NotReadyToRun("component of a composite R2R image (code lives in the composite file)"));
        }
        if find(SECTION_COMPONENT_ASSEMBLIES)?.is_some() {
            return Err(FormatError::NotReadyToRun("composite R2R image (not supported yet)"));
        }
        // An image with nothing compiled has no RuntimeFunctions section: zero methods. The
        // table is not read here: it is streamed below, once the methods know their entries.
        let (rf_rva, rf_size) = find(SECTION_RUNTIME_FUNCTIONS)?.unwrap_or((0, 0));
        // x64 RUNTIME_FUNCTION is begin, end, unwind; ARM/ARM64 drop `end`.
        let has_end = matches!(base_machine(pe.machine), object::pe::IMAGE_FILE_MACHINE_AMD64 | object::pe::IMAGE_FILE_MACHINE_I386);
        let entry: u32 = if has_end { 12 } else { 8 };
        let count = rf_size / entry;
        // The table is checked to lie inside the image before anything is sized by `count`
        // (the fuzzer's 4 GB table in a small file asked for a 2.6 GB allocation).
        let rf_offset = if count > 0 { pe.rva_to_offset(rf_rva).ok_or_else(|| FormatError::invalid("RuntimeFunctions", format!("RVA {rf_rva:#x} is in no section")))? } else { 0 };
        if rf_offset as u64 + u64::from(count) * u64::from(entry) > src.len() {
            return Err(FormatError::invalid("RuntimeFunctions", format!("{count} entries at offset {rf_offset:#x} run past the end of the {}-byte image", src.len())));
        }
        // The instance entries are listed first so `methods` is allocated once, at its final
        // size (growing it by doubling peaked at 1.5x CoreLib's 36k methods).
        let instance = match find(SECTION_INSTANCE_METHOD_ENTRY_POINTS)? {
            Some((rva, size)) => {
                let bytes = at(rva, size, "InstanceMethodEntryPoints")?;
                let entries = hashtable_entries(Bytes::new(&bytes, "InstanceMethodEntryPoints"), 0)?;
                Some((bytes, entries))
            }
            None => None,
        };
        let def_entries = match find(SECTION_METHODDEF_ENTRY_POINTS)? {
            Some((rva, size)) => Some(at(rva, size, "MethodDefEntryPoints")?),
            None => None,
        };
        let def_count = match &def_entries {
            Some(bytes) => {
                let array = NativeArray::new(Bytes::new(bytes, "MethodDefEntryPoints"), 0)?;
                let mut n = 0;
                for index in 0..array.len().min(method_rows) {
                    n += usize::from(array.get(index)?.is_some());
                }
                n
            }
            None => 0,
        };
        // Until the table is read, each method's `entry_rva` holds its runtime function's index.
        let mut methods = Vec::with_capacity(def_count + instance.as_ref().map_or(0, |(_, e)| e.len()));
        let mut instances = Vec::with_capacity(instance.as_ref().map_or(0, |(_, e)| e.len()));
        if let Some(bytes) = &def_entries {
            let b = Bytes::new(bytes, "MethodDefEntryPoints");
            let array = NativeArray::new(b, 0)?;
            for index in 0..array.len().min(method_rows) {
                let Some(off) = array.get(index)? else { continue };
                let id = entry_point_index(b, off)?;
                let rid = index + 1;
                if id >= count {
                    return Err(FormatError::invalid("MethodDefEntryPoints", format!("method {rid} -> runtime function {id} of {count}")));
                }
                if rid & INSTANTIATED != 0 {
                    return Err(FormatError::invalid("MethodDefEntryPoints", format!("method RID {rid} out of range")));
                }
                methods.push(R2rMethod { key: rid, entry_rva: id });
            }
        }
        drop(def_entries);
        let mut undecoded_instance_entries = 0;
        if let Some((bytes, entries)) = &instance {
            let b = Bytes::new(bytes, "InstanceMethodEntryPoints");
            for &off in entries {
                let mut sig = SigReader::new(b, off);
                let decoded = sig.method().and_then(|m| Ok((m, entry_point_index(b, sig.pos)?)));
                let Some((m, id)) = decoded.ok().and_then(|(m, id)| Some((PackedRef::pack(m)?, id))) else {
                    undecoded_instance_entries += 1;
                    continue;
                };
                if id >= count {
                    undecoded_instance_entries += 1;
                    continue;
                }
                let name = u32::try_from(instances.len()).ok().filter(|&n| n & INSTANTIATED == 0);
                let name = name.ok_or_else(|| FormatError::invalid("InstanceMethodEntryPoints", "more than 2G entries"))?;
                instances.push(m);
                methods.push(R2rMethod { key: INSTANTIATED | name, entry_rva: id });
            }
        }
        drop(instance);
        // By runtime function, then in the order listed (MethodDefs by RID, then instances:
        // ascending keys), so of two methods claiming one body the later one owns it.
        methods.sort_unstable_by_key(|m| (m.entry_rva, m.key));
        // The table, streamed in chunks: each method's index becomes its entry's RVA, and
        // either every INDEX_STRIDE-th begin is kept (read from the file when looked up) or,
        // from memory or when the file's table is not sorted, the whole table.
        let file = if src.in_memory() { None } else { src.keep_open() };
        let mut index = Vec::with_capacity(count.div_ceil(INDEX_STRIDE) as usize);
        let mut whole: Vec<(u32, u32)> = if file.is_none() { Vec::with_capacity(count as usize) } else { Vec::new() };
        let mut sorted = true;
        let mut prev = 0u32;
        let mut next_method = 0usize;
        let mut from = 0u32;
        while from < count {
            let n = PARSE_CHUNK.min(count - from);
            let chunk = src.bytes_at(rf_offset as u64 + (from * entry) as u64, (n * entry) as u64, "RuntimeFunctions")?;
            let rf = Bytes::new(&chunk, "RuntimeFunctions");
            for k in 0..n {
                let i = from + k;
                let begin = rf.u32((k * entry) as u64)?;
                let end = if has_end { rf.u32((k * entry + 4) as u64)? } else { begin };
                sorted &= begin >= prev;
                prev = begin;
                if i.is_multiple_of(INDEX_STRIDE) {
                    index.push(begin);
                }
                if file.is_none() {
                    whole.push((begin, end));
                }
                while let Some(m) = methods.get_mut(next_method).filter(|m| m.entry_rva == i) {
                    m.entry_rva = begin;
                    next_method += 1;
                }
            }
            from += n;
        }
        let ranges = match file {
            #[cfg(unix)]
            Some(file) if sorted => Runtimes::File { file, offset: rf_offset as u64, count, entry, has_end, index },
            _ => {
                if whole.len() as u32 != count {
                    // Read again whole: the file's table is not sorted.
                    whole = Vec::with_capacity(count as usize);
                    let all = src.bytes_at(rf_offset as u64, (count * entry) as u64, "RuntimeFunctions")?;
                    let rf = Bytes::new(&all, "RuntimeFunctions");
                    for i in 0..count {
                        let begin = rf.u32((i * entry) as u64)?;
                        whole.push((begin, if has_end { rf.u32((i * entry + 4) as u64)? } else { begin }));
                    }
                }
                if !has_end {
                    for i in 0..whole.len() {
                        whole[i].1 = whole.get(i + 1).map_or(whole[i].0.saturating_add(1), |n| n.0);
                    }
                }
                // Unstable: no scratch buffer (a stable sort of CoreLib's ranges allocated 0.45 MB).
                whole.sort_unstable_by_key(|r| r.0);
                Runtimes::Memory(whole)
            }
        };
        if !sorted {
            methods.sort_unstable_by_key(|m| (m.entry_rva, m.key));
        }
        methods.shrink_to_fit();
        instances.shrink_to_fit();
        let names = LazyNames::new(tables, heap);
        Ok(R2rImage { pe, major_version, minor_version, flags, methods, names, instances, ranges, undecoded_instance_entries })
    }

    /// `Namespace.Type::Method` of a method of this image (`<method N>` when its row cannot be
    /// read), built the first time it is asked for.
    pub fn method_name(&self, m: &R2rMethod) -> Arc<str> {
        let index = m.key & !INSTANTIATED;
        if m.instantiated() {
            match self.instances.get(index as usize) {
                Some(r) => self.names.name(1 << 32 | index as u64, NameOf::Instance(r.unpack())),
                None => Arc::from(""),
            }
        } else {
            self.names.name(index as u64, NameOf::Def(index))
        }
    }

    /// MethodDef RID of a method (0 if its entry names a MemberRef or another module).
    pub fn method_rid(&self, m: &R2rMethod) -> u32 {
        if !m.instantiated() {
            return m.key;
        }
        match self.instances.get((m.key & !INSTANTIATED) as usize).map(|r| r.unpack()) {
            Some(r) if !(r.member_ref || r.other_module) => r.rid,
            _ => 0,
        }
    }

    /// Bytes held for the method names: the rows that name them (as string offsets), a copied
    /// `#Strings` heap (small images) and the names built so far.
    pub fn name_bytes(&self) -> usize {
        self.names.bytes() + self.instances.capacity() * size_of::<PackedRef>()
    }

    /// Number of RUNTIME_FUNCTION entries (bodies and funclets).
    pub fn runtime_function_count(&self) -> usize {
        self.ranges.count()
    }

    /// RUNTIME_FUNCTIONs no entry point claims (neither directly nor as a funclet): those
    /// before the first method's entry.
    pub fn unclaimed_runtime_functions(&self) -> usize {
        let first = self.methods.first().map_or(u32::MAX, |m| m.entry_rva);
        self.ranges.all().iter().filter(|r| r.0 < first).count()
    }

    /// The method owning a range that begins at `begin`: the last whose entry is at or
    /// before it.
    fn owner(&self, begin: u32) -> Option<&R2rMethod> {
        self.methods.get(self.methods.partition_point(|m| m.entry_rva <= begin).checked_sub(1)?)
    }

    /// The method whose code holds `rva`.
    pub fn lookup_rva(&self, rva: u32) -> Option<R2rSymbol<'_>> {
        let r = self.ranges.find(rva)?;
        let method = self.owner(r.0)?;
        Some(R2rSymbol { method, name: self.method_name(method), offset: rva.saturating_sub(method.entry_rva), range: r })
    }

    /// The method whose code holds file offset `offset` (as computed from a file mapping).
    pub fn lookup_file_offset(&self, offset: u64) -> Option<R2rSymbol<'_>> {
        self.lookup_rva(self.pe.offset_to_rva(offset)?)
    }

    /// Code ranges (body and funclets) of the method with entry point `entry_rva`.
    pub fn code_ranges(&self, method: &R2rMethod) -> Vec<(u32, u32)> {
        self.ranges.all().into_iter().filter(|r| self.owner(r.0).is_some_and(|m| std::ptr::eq(m, method))).collect()
    }
}

/// Decodes a method entry (MethodDefEntryPoints format): the runtime function index, with an
/// optional fixup list in front (flag bit 0; bit 1 = fixups encoded by backward offset).
fn entry_point_index(b: Bytes<'_>, off: u64) -> Result<u32, FormatError> {
    let (id, _) = decode_unsigned(b, off)?;
    Ok(if id & 1 != 0 { id >> 2 } else { id >> 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_and_instance_refs_take_eight_bytes() {
        assert_eq!(size_of::<R2rMethod>(), 8);
        assert_eq!(size_of::<PackedRef>(), 8);
    }

    #[test]
    fn packed_refs_round_trip_or_refuse() {
        for rid in [0, 1, 0x00ff_ffff, REF_MEMBER - 1] {
            for owner_typedef in [None, Some(0), Some(7), Some(u32::MAX - 1)] {
                for (member_ref, other_module) in [(false, false), (true, false), (false, true), (true, true)] {
                    let m = MethodRef { rid, member_ref, owner_typedef, other_module };
                    assert_eq!(PackedRef::pack(m).map(PackedRef::unpack), Some(m));
                }
            }
        }
        let big = MethodRef { rid: REF_MEMBER, member_ref: false, owner_typedef: None, other_module: false };
        assert_eq!(PackedRef::pack(big), None);
        assert_eq!(PackedRef::pack(MethodRef { rid: 1, owner_typedef: Some(u32::MAX), ..big }), None);
    }
}
