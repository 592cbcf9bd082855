//! Method names of a ReadyToRun image, built when asked for.
//!
//! Building every name at parse time cost CoreLib 1.5 MB of names held for the process's life
//! (a sample names a few hundred methods) and a 4 MB peak while the parse ran (the `#Strings`
//! heap read, a `Cow` per row, the names' string growing). Here the parse keeps only the
//! `#Strings` offsets of the rows that name methods (TypeDef, MethodDef, MemberRef,
//! NestedClass: 0.3 MB for CoreLib) and the heap's place in the file; a name is built from a
//! few reads of the heap the first time a method is named, and kept.
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};

use crate::r2r_sig::MethodRef;

/// A `#Strings` heap at most this big is copied into memory; a bigger one is read from the
/// file when a name is built.
#[cfg(unix)]
const COPY_HEAP_BYTES: u64 = 64 << 10;
/// Longest string read from the heap (a longer one is cut there).
const MAX_STRING: usize = 1024;
/// Bytes read at a time when a string is read from the file.
#[cfg(unix)]
const READ_CHUNK: usize = 128;

/// One TypeDef row: `#Strings` offsets of its name and namespace, its first MethodDef RID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TypeRow {
    pub name: u32,
    pub namespace: u32,
    pub method_list: u32,
}

/// The metadata rows that name methods, as `#Strings` offsets (index = RID - 1).
#[derive(Debug, Default)]
pub(crate) struct NameTables {
    types: Vec<TypeRow>,
    methods: Vec<u32>,
    member_refs: Vec<u32>,
    /// (nested TypeDef RID, enclosing TypeDef RID), sorted.
    enclosing: Vec<(u32, u32)>,
}

impl NameTables {
    pub fn new(types: Vec<TypeRow>, methods: Vec<u32>, member_refs: Vec<u32>, mut enclosing: Vec<(u32, u32)>) -> Self {
        enclosing.sort_unstable();
        NameTables { types, methods, member_refs, enclosing }
    }

    /// MethodDef rows.
    pub fn method_count(&self) -> usize {
        self.methods.len()
    }

    fn bytes(&self) -> usize {
        self.types.capacity() * size_of::<TypeRow>()
            + (self.methods.capacity() + self.member_refs.capacity()) * 4
            + self.enclosing.capacity() * 8
    }

    /// TypeDef RID owning MethodDef `rid` (MethodList ranges, II.22.37).
    fn owner_of_method(&self, rid: u32) -> Option<u32> {
        if rid == 0 || rid as usize > self.methods.len() {
            return None;
        }
        let i = self.types.partition_point(|t| t.method_list <= rid);
        (i > 0).then_some(i as u32)
    }

    fn enclosing_of(&self, rid: u32) -> Option<u32> {
        let i = self.enclosing.binary_search_by_key(&rid, |&(n, _)| n).ok()?;
        Some(self.enclosing[i].1)
    }
}

/// Where the `#Strings` heap is read from.
#[derive(Debug)]
pub(crate) enum StringHeap {
    /// Copied (a small heap, or an image parsed from memory).
    Bytes(Box<[u8]>),
    /// The image's file, kept open: the heap is `len` bytes at file offset `offset`.
    #[cfg(unix)]
    File { file: std::fs::File, offset: u64, len: u64 },
}

impl StringHeap {
    /// Where a heap of `len` bytes at file offset `offset` of `src` is read from: the file
    /// when it is big and the source is a file, else a copy.
    pub fn of<S: crate::pe::ImageSource + ?Sized>(src: &S, offset: u64, len: u64) -> Result<Self, crate::FormatError> {
        #[cfg(unix)]
        if len > COPY_HEAP_BYTES
            && !src.in_memory()
            && let Some(file) = src.keep_open()
        {
            return Ok(StringHeap::File { file, offset, len });
        }
        Ok(StringHeap::Bytes(src.bytes_at(offset, len, "#Strings heap")?.into_owned().into_boxed_slice()))
    }

    /// The string at `off`: up to its NUL, cut at [`MAX_STRING`] bytes; None when the heap
    /// ends before a NUL or that many bytes (or the file cannot be read there).
    fn get(&self, off: u32) -> Option<Cow<'_, str>> {
        match self {
            StringHeap::Bytes(b) => {
                let rest = b.get(off as usize..)?;
                let head = &rest[..rest.len().min(MAX_STRING)];
                let n = match memchr::memchr(0, head) {
                    Some(n) => n,
                    None if rest.len() > MAX_STRING => MAX_STRING,
                    None => return None,
                };
                Some(String::from_utf8_lossy(&rest[..n]))
            }
            #[cfg(unix)]
            StringHeap::File { file, offset, len } => {
                use std::os::unix::fs::FileExt;
                let mut out = Vec::new();
                let mut at = off as u64;
                loop {
                    let want = READ_CHUNK.min(len.saturating_sub(at) as usize);
                    if want == 0 {
                        return None;
                    }
                    let mut buf = [0u8; READ_CHUNK];
                    file.read_exact_at(&mut buf[..want], offset.checked_add(at)?).ok()?;
                    if let Some(n) = memchr::memchr(0, &buf[..want]) {
                        out.extend_from_slice(&buf[..n]);
                        break;
                    }
                    out.extend_from_slice(&buf[..want]);
                    at += want as u64;
                    if out.len() > MAX_STRING {
                        break;
                    }
                }
                out.truncate(MAX_STRING);
                Some(Cow::Owned(String::from_utf8_lossy(&out).into_owned()))
            }
        }
    }

    fn bytes(&self) -> usize {
        match self {
            StringHeap::Bytes(b) => b.len(),
            #[cfg(unix)]
            StringHeap::File { .. } => 0,
        }
    }
}

/// What names a method of the image: a MethodDef, or an instance entry's signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameOf {
    Def(u32),
    Instance(MethodRef),
}

/// The names of one image's methods, built on demand and kept.
#[derive(Debug)]
pub(crate) struct LazyNames {
    tables: NameTables,
    heap: StringHeap,
    /// Names built so far, by [`LazyNames::key`].
    built: Mutex<HashMap<u64, Arc<str>>>,
}

impl LazyNames {
    pub fn new(tables: NameTables, heap: StringHeap) -> Self {
        LazyNames { tables, heap, built: Mutex::new(HashMap::new()) }
    }

    /// Bytes held: the tables, a copied heap and the names built so far.
    pub fn bytes(&self) -> usize {
        let built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        self.tables.bytes() + self.heap.bytes() + built.values().map(|n| n.len() + 32).sum::<usize>()
    }

    /// The name of `what`, built the first time; `key` identifies it among the image's methods.
    pub fn name(&self, key: u64, what: NameOf) -> Arc<str> {
        if let Some(n) = self.built.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return n.clone();
        }
        let mut s = String::new();
        match what {
            NameOf::Def(rid) => {
                if !self.push_method_name(rid, &mut s) {
                    let _ = write!(s, "<method {rid}>");
                }
            }
            NameOf::Instance(m) => self.push_instance_name(&m, &mut s),
        }
        let name: Arc<str> = Arc::from(s);
        self.built.lock().unwrap_or_else(|e| e.into_inner()).insert(key, name.clone());
        name
    }

    /// Appends the full type name of TypeDef `rid` (`Namespace.Outer+Inner`); false (nothing
    /// appended) when there is none.
    fn push_type_name(&self, rid: u32, s: &mut String) -> bool {
        let mut chain: [Option<&TypeRow>; 64] = [None; 64];
        let mut depth = 0;
        let mut cur = rid;
        // Bounded walk: corrupt NestedClass rows may form a cycle.
        for slot in chain.iter_mut() {
            let Some(t) = (cur as usize).checked_sub(1).and_then(|i| self.tables.types.get(i)) else { return false };
            *slot = Some(t);
            depth += 1;
            match self.tables.enclosing_of(cur) {
                Some(outer) if outer != cur => cur = outer,
                _ => break,
            }
        }
        let chain = &chain[..depth];
        let Some(Some(outermost)) = chain.last() else { return false };
        let start = s.len();
        let Some(ns) = self.heap.get(outermost.namespace) else { return false };
        if !ns.is_empty() {
            s.push_str(&ns);
            s.push('.');
        }
        for (i, t) in chain.iter().rev().flatten().enumerate() {
            if i > 0 {
                s.push('+');
            }
            let Some(name) = self.heap.get(t.name) else {
                s.truncate(start);
                return false;
            };
            s.push_str(&name);
        }
        true
    }

    /// Appends `Namespace.Type::Method` for MethodDef `rid`; false if there is no such row.
    fn push_method_name(&self, rid: u32, s: &mut String) -> bool {
        let Some(&off) = (rid as usize).checked_sub(1).and_then(|i| self.tables.methods.get(i)) else { return false };
        let Some(name) = self.heap.get(off) else { return false };
        if self.tables.owner_of_method(rid).is_some_and(|t| self.push_type_name(t, s)) {
            s.push_str("::");
        }
        s.push_str(&name);
        true
    }

    fn push_instance_name(&self, m: &MethodRef, s: &mut String) {
        if m.other_module {
            let _ = write!(s, "<method of another module, token {:#x}>", m.rid);
            return;
        }
        if !m.member_ref {
            if !self.push_method_name(m.rid, s) {
                let _ = write!(s, "<method {}>", m.rid);
            }
            return;
        }
        if m.owner_typedef.is_some_and(|t| self.push_type_name(t, s)) {
            s.push_str("::");
        }
        let name = (m.rid as usize).checked_sub(1).and_then(|i| self.tables.member_refs.get(i)).and_then(|&off| self.heap.get(off));
        match name {
            Some(name) => s.push_str(&name),
            None => {
                let _ = write!(s, "<memberref {}>", m.rid);
            }
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A heap read from a file gives what the same heap copied gives: strings up to their NUL,
    /// a long one cut at `MAX_STRING`, None past the end or without a NUL before it.
    #[test]
    fn file_heap_reads_what_the_copied_heap_holds() {
        let mut heap = b"\0System\0Collections.Generic\0".to_vec();
        let long = heap.len() as u32;
        heap.extend(std::iter::repeat_n(b'x', 3 * MAX_STRING));
        heap.push(0);
        let unterminated = heap.len() as u32;
        heap.extend_from_slice(b"tail without nul");
        let path = clrprobe_tests::scratch_file("heap", "heap.bin");
        let mut file_bytes = b"prefix".to_vec();
        file_bytes.extend_from_slice(&heap);
        file_bytes.extend_from_slice(b"\0after the heap");
        std::fs::write(&path, &file_bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let from_file = StringHeap::File { file, offset: 6, len: heap.len() as u64 };
        let copied = StringHeap::Bytes(heap.clone().into_boxed_slice());
        for off in [0, 1, 3, 8, long, long + 5, unterminated, unterminated + 3, heap.len() as u32, u32::MAX] {
            assert_eq!(from_file.get(off), copied.get(off), "offset {off}");
        }
        assert_eq!(copied.get(1).as_deref(), Some("System"));
        assert_eq!(copied.get(8).as_deref(), Some("Collections.Generic"));
        assert_eq!(copied.get(long).map(|s| s.len()), Some(MAX_STRING));
        assert_eq!(copied.get(unterminated), None);
    }

    /// Names come from the rows: nested types `Outer+Inner`, the namespace of the outermost,
    /// a method's owner from the MethodList runs; a row that is missing names the method by RID.
    #[test]
    fn names_from_rows() {
        let heap = b"\0NS\0Outer\0Inner\0Run\0Other\0".to_vec();
        let (ns, outer, inner, run, other) = (1, 4, 10, 16, 20);
        let tables = NameTables::new(
            vec![
                TypeRow { name: outer, namespace: ns, method_list: 1 },
                TypeRow { name: inner, namespace: 0, method_list: 2 },
            ],
            vec![run, other],
            vec![other],
            vec![(2, 1)],
        );
        let names = LazyNames::new(tables, StringHeap::Bytes(heap.into_boxed_slice()));
        assert_eq!(&*names.name(1, NameOf::Def(1)), "NS.Outer::Run");
        assert_eq!(&*names.name(2, NameOf::Def(2)), "NS.Outer+Inner::Other");
        assert_eq!(&*names.name(9, NameOf::Def(9)), "<method 9>");
        let member = MethodRef { rid: 1, member_ref: true, owner_typedef: Some(2), other_module: false };
        assert_eq!(&*names.name(1 << 32, NameOf::Instance(member)), "NS.Outer+Inner::Other");
        // Built once, then kept.
        assert!(Arc::ptr_eq(&names.name(1, NameOf::Def(1)), &names.name(1, NameOf::Def(1))));
    }
}
