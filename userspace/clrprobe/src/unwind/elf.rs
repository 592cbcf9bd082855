//! The unwind sections of a mapped ELF file (`.eh_frame`, `.eh_frame_hdr`) and its load
//! segments, read once per file and shared by every process that maps it. `.text` is not kept:
//! `.eh_frame` describes prologues and epilogues instruction by instruction. Only the headers
//! and these sections are read from the file (libcoreclr is 7 MB, its `.eh_frame` a tenth).
//! `.eh_frame_hdr` (the sorted address → FDE table) is copied; `.eh_frame` itself is read page
//! by page as addresses are unwound ([`Sparse`]): a process's stacks need a few dozen of its
//! thousands of entries.
use std::{
    collections::HashMap,
    fs::File,
    hash::BuildHasherDefault,
    io::Read,
    ops::Range,
    os::unix::fs::FileTypeExt,
    sync::{Arc, Mutex},
};

use gimli::{BaseAddresses, EhFrameHdr, LittleEndian};
use object::{Object, ObjectSection, ObjectSegment};

use super::sparse::Sparse;

/// Files larger than this are not read for unwind tables.
const MAX_FILE: u64 = 512 << 20;

/// `.eh_frame` sections smaller than this are copied whole (a page or two at most is saved).
const MIN_SPARSE: u64 = 16 << 10;

/// A section for framehop (it wants `Deref<Target = [u8]>`): a byte range of a shared copy,
/// or a section read from its file on demand.
#[derive(Clone)]
pub enum Bytes {
    Copy { data: Arc<[u8]>, range: Range<usize> },
    Sparse(Arc<Sparse>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Copy { data, range } => &data[range.clone()],
            Bytes::Sparse(s) => s.as_slice(),
        }
    }
}

/// What unwinding needs from one ELF file.
#[derive(Default)]
pub struct ElfUnwind {
    pub text_svma: Option<Range<u64>>,
    pub text: Option<Bytes>,
    pub eh_frame_svma: Option<Range<u64>>,
    pub eh_frame: Option<Bytes>,
    pub eh_frame_hdr_svma: Option<Range<u64>>,
    pub eh_frame_hdr: Option<Bytes>,
    pub got_svma: Option<Range<u64>>,
    /// Load segments: (file offset, virtual address, file size).
    pub segments: Vec<(u64, u64, u64)>,
    /// Bytes copied for this file (the sections above but a sparse `.eh_frame`).
    pub bytes: usize,
    /// Lookup addresses [`ElfUnwind::prepare`]d already, and whether their FDE was found
    /// (its pages are read: a sparse page is never dropped). The same return addresses come
    /// in every stack: the two table searches per frame were a tenth of the unwinding.
    prepared: Mutex<HashMap<u64, bool, BuildHasherDefault<rustc_hash::FxHasher>>>,
}

/// Most lookup addresses remembered per file (then forgotten all at once).
const MAX_PREPARED: usize = 1 << 16;

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: not a regular file")]
    NotRegular { path: String },
    #[error("{path}: {size} bytes, larger than the {MAX_FILE}-byte limit for unwind tables")]
    TooLarge { path: String, size: u64 },
    #[error("{path}: not an ELF file clrprobe can read ({source})")]
    Parse { path: String, source: object::Error },
    #[error("{path}: not an ELF file (unwound with frame pointers)")]
    NotElf { path: String },
}

impl ElfUnwind {
    /// Reads the file mapped at `start..end` of `pid` through `/proc/PID/map_files` (the very
    /// file the process mapped, whatever its path says now).
    pub fn read_mapped(pid: u32, start: u64, end: u64) -> Result<Self, ElfError> {
        let path = format!("/proc/{pid}/map_files/{start:x}-{end:x}");
        let io = |source| ElfError::Io { path: path.clone(), source };
        let mut f = std::fs::File::open(&path).map_err(io)?;
        let meta = f.metadata().map_err(io)?;
        let ft = meta.file_type();
        if !ft.is_file() || ft.is_fifo() || ft.is_socket() || ft.is_char_device() || ft.is_block_device() {
            return Err(ElfError::NotRegular { path });
        }
        if meta.len() > MAX_FILE {
            return Err(ElfError::TooLarge { path, size: meta.len() });
        }
        let mut magic = [0u8; 4];
        if f.read_exact(&mut magic).is_err() || &magic != b"\x7fELF" {
            return Err(ElfError::NotElf { path });
        }
        // Read range by range (headers, section table, names, the kept sections), not whole.
        let source = f.try_clone().ok();
        let cache = object::ReadCache::new(f);
        Self::parse_from(&cache, source).map_err(|source| ElfError::Parse { path, source })
    }

    /// Parses an ELF image, keeping copies of the sections unwinding uses.
    pub fn parse<'d, R: object::ReadRef<'d>>(data: R) -> Result<Self, object::Error> {
        Self::parse_from(data, None)
    }

    /// [`ElfUnwind::parse`]; with `source` (the same file), large `.eh_frame` and
    /// `.eh_frame_hdr` sections are read from it on demand ([`ElfUnwind::prepare`]) instead of
    /// copied.
    pub fn parse_from<'d, R: object::ReadRef<'d>>(data: R, source: Option<File>) -> Result<Self, object::Error> {
        let file = object::File::parse(data)?;
        let source = source.map(Arc::new);
        let (mut sparse_frame, mut sparse_hdr) = (None, None);
        let mut kept: Vec<u8> = Vec::new();
        let mut ranges: Vec<(&str, Range<u64>, Range<usize>)> = Vec::new();
        for name in [".text", ".eh_frame", ".eh_frame_hdr", ".got"] {
            let Some(s) = file.section_by_name(name) else { continue };
            let svma = s.address()..s.address() + s.size();
            let at = kept.len();
            if (name == ".eh_frame" || name == ".eh_frame_hdr")
                && let Some((offset, size)) = s.file_range().filter(|&(_, size)| size >= MIN_SPARSE && size == s.size())
                && let Some(f) = source.clone()
            {
                match usize::try_from(size).map_err(std::io::Error::other).and_then(|size| Sparse::new(f, offset, size)) {
                    // The table of an `.eh_frame_hdr` is searched page by page only in the
                    // layout linkers write; another is copied.
                    Ok(s) if name == ".eh_frame_hdr" && !s.is_search_table() => {}
                    Ok(s) => {
                        let s = Some(Arc::new(s));
                        if name == ".eh_frame" { sparse_frame = s } else { sparse_hdr = s }
                        ranges.push((name, svma, 0..0));
                        continue;
                    }
                    Err(e) => log::debug!("unwind tables: {name} copied whole: {e}"),
                }
            }
            if name != ".got" && name != ".text"
                && let Ok(d) = s.data()
            {
                kept.extend_from_slice(d);
            }
            ranges.push((name, svma, at..kept.len()));
        }
        let data: Arc<[u8]> = Arc::from(kept);
        let mut out = ElfUnwind {
            segments: file
                .segments()
                .map(|s| {
                    let (off, size) = s.file_range();
                    (off, s.address(), size)
                })
                .collect(),
            bytes: data.len(),
            ..ElfUnwind::default()
        };
        for (name, svma, range) in ranges {
            let bytes = (!range.is_empty()).then(|| Bytes::Copy { data: data.clone(), range });
            match name {
                ".text" => (out.text_svma, out.text) = (Some(svma), bytes),
                ".eh_frame" => (out.eh_frame_svma, out.eh_frame) = (Some(svma), bytes),
                ".eh_frame_hdr" => (out.eh_frame_hdr_svma, out.eh_frame_hdr) = (Some(svma), bytes),
                _ => out.got_svma = Some(svma),
            }
        }
        if let Some(s) = sparse_frame {
            out.eh_frame = Some(Bytes::Sparse(s));
        }
        if let Some(s) = sparse_hdr {
            out.eh_frame_hdr = Some(Bytes::Sparse(s));
        }
        Ok(out)
    }

    /// Memory this file's tables take now: the copies and the pages of sparse sections read.
    pub fn resident(&self) -> usize {
        let sparse = |b: &Option<Bytes>| match b {
            Some(Bytes::Sparse(s)) => s.resident(),
            _ => 0,
        };
        self.bytes + sparse(&self.eh_frame) + sparse(&self.eh_frame_hdr)
    }

    /// Reads what unwinding `svma` (a lookup address: a return address minus one) needs from
    /// sparse sections: the entries of `.eh_frame_hdr`'s table a search for it compares, the
    /// FDE the table names for it, and that FDE's CIE. The lookups are gimli's, the same
    /// framehop makes next. False when a sparse section read short (the file shrank): its
    /// frames are not to be unwound from it.
    pub fn prepare(&self, svma: u64) -> bool {
        let damaged = |b: &Option<Bytes>| matches!(b, Some(Bytes::Sparse(s)) if s.damaged());
        let (Some(hdr), Some(hdr_svma), Some(eh_svma)) = (&self.eh_frame_hdr, &self.eh_frame_hdr_svma, &self.eh_frame_svma) else { return true };
        let mut prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&found) = prepared.get(&svma) {
            // Nothing to read: only a short read since (of another address's pages) matters.
            if damaged(&self.eh_frame_hdr) {
                return false;
            }
            return match (found, &self.eh_frame) {
                (true, Some(Bytes::Sparse(s))) => !s.damaged(),
                _ => true,
            };
        }
        if prepared.len() >= MAX_PREPARED {
            prepared.clear();
        }
        if let Bytes::Sparse(h) = hdr {
            h.fill_search(svma, hdr_svma.start);
        }
        if damaged(&self.eh_frame_hdr) {
            return false;
        }
        let Some(Bytes::Sparse(s)) = &self.eh_frame else {
            prepared.insert(svma, false);
            return true;
        };
        // As framehop's `base_addresses_for_sections`.
        let start = |r: &Option<Range<u64>>| r.as_ref().map_or(0, |r| r.start);
        let bases = BaseAddresses::default()
            .set_eh_frame(eh_svma.start)
            .set_eh_frame_hdr(hdr_svma.start)
            .set_text(start(&self.text_svma))
            .set_got(start(&self.got_svma));
        let offset = (|| {
            let parsed = EhFrameHdr::new(&hdr[..], LittleEndian).parse(&bases, 8).ok()?;
            let table = parsed.table()?;
            table.lookup(svma, &bases).and_then(|p| table.pointer_to_offset(p)).ok()
        })();
        let Some(offset) = offset else {
            prepared.insert(svma, false);
            return true;
        };
        s.fill_entry(offset.0);
        prepared.insert(svma, true);
        !s.damaged()
    }

    /// Load bias of a mapping of this file at `start` with file offset `offset`: the value
    /// added to the file's virtual addresses to get the process's.
    pub fn bias(&self, start: u64, offset: u64) -> Option<u64> {
        let &(seg_off, seg_vaddr, _) = self
            .segments
            .iter()
            .find(|&&(off, _, size)| off <= offset && offset < off + size.max(1))?;
        Some(start.wrapping_sub(offset).wrapping_add(seg_off).wrapping_sub(seg_vaddr))
    }

    /// framehop's view of the sections.
    pub fn section_info(&self) -> framehop::ExplicitModuleSectionInfo<Bytes> {
        framehop::ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.text_svma.clone(),
            text: self.text.clone(),
            eh_frame_svma: self.eh_frame_svma.clone(),
            eh_frame: self.eh_frame.clone(),
            eh_frame_hdr_svma: self.eh_frame_hdr_svma.clone(),
            eh_frame_hdr: self.eh_frame_hdr.clone(),
            got_svma: self.got_svma.clone(),
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            debug_frame: None,
            text_segment_svma: None,
            text_segment: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_binary_sections() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let u = ElfUnwind::parse(&exe[..]).unwrap();
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        let cached = ElfUnwind::parse(&object::ReadCache::new(f)).unwrap();
        assert_eq!(cached.eh_frame.as_deref(), u.eh_frame.as_deref());
        assert_eq!(cached.eh_frame_hdr.as_deref(), u.eh_frame_hdr.as_deref());
        assert_eq!(cached.segments, u.segments);
        assert!(u.eh_frame.as_ref().is_some_and(|b| !b.is_empty()));
        assert!(u.eh_frame_hdr.is_some());
        assert!(u.text_svma.is_some());
        assert!(!u.segments.is_empty());
    }

    #[test]
    fn bias_of_a_segment() {
        let u = ElfUnwind { segments: vec![(0, 0, 0x1000), (0x1000, 0x1000, 0x5000)], ..empty() };
        // Text segment at file offset 0x1000, vaddr 0x1000, mapped at 0x7f0000001000.
        assert_eq!(u.bias(0x7f00_0000_1000, 0x1000), Some(0x7f00_0000_0000));
        assert_eq!(u.bias(0x7f00_0000_1000, 0x9000), None);
    }

    fn empty() -> ElfUnwind {
        ElfUnwind::default()
    }

    /// The path of the libc this test process runs with (Debian's has no frame pointers).
    fn libc_path() -> String {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find(|p| p.contains("/libc.so")).expect("libc mapped").to_string()
    }

    fn sparse_of(path: &str) -> ElfUnwind {
        let f = File::open(path).unwrap();
        let source = f.try_clone().unwrap();
        ElfUnwind::parse_from(&object::ReadCache::new(f), Some(source)).unwrap()
    }

    /// Every FDE's start address in `.eh_frame_hdr` (lookup addresses, file-relative).
    fn fde_starts(u: &ElfUnwind) -> Vec<u64> {
        let hdr = u.eh_frame_hdr.as_ref().unwrap();
        let s = |r: &Option<Range<u64>>| r.as_ref().map_or(0, |r| r.start);
        let bases = BaseAddresses::default()
            .set_eh_frame(s(&u.eh_frame_svma))
            .set_eh_frame_hdr(s(&u.eh_frame_hdr_svma))
            .set_text(s(&u.text_svma))
            .set_got(s(&u.got_svma));
        let parsed = EhFrameHdr::new(&hdr[..], LittleEndian).parse(&bases, 8).unwrap();
        let table = parsed.table().unwrap();
        let mut it = table.iter(&bases);
        let mut v = Vec::new();
        while let Ok(Some((start, _))) = it.next() {
            if let gimli::Pointer::Direct(a) = start {
                v.push(a);
            }
        }
        v
    }

    /// Unwinding with `.eh_frame` read on demand gives what the copy gives, for frames in
    /// every FDE of libc and of this test binary (the start, the middle and past the end of a
    /// function, as the first frame and as a return address), and reads a small part of it.
    #[test]
    fn sparse_eh_frame_unwinds_as_the_copy() {
        use framehop::{FrameAddress, Module, Unwinder, x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64}};
        let mut paths = vec![libc_path(), std::fs::read_link("/proc/self/exe").unwrap().to_string_lossy().into_owned()];
        // The runtime's libraries, where the live tests run (CLRPROBE_CACHE holds the runtimes).
        if let Some(cache) = std::env::var_os("CLRPROBE_CACHE") {
            for lib in ["libcoreclr.so", "libclrjit.so"] {
                let p = std::path::Path::new(&cache).join("dotnet/net8/shared/Microsoft.NETCore.App/8.0.4").join(lib);
                assert!(p.exists(), "{} (CLRPROBE_CACHE is set)", p.display());
                paths.push(p.to_string_lossy().into_owned());
            }
        }
        for path in paths {
            let copy = ElfUnwind::parse(&std::fs::read(&path).unwrap()[..]).unwrap();
            let sparse = sparse_of(&path);
            let Some(Bytes::Sparse(s)) = &sparse.eh_frame else { panic!("{path}: .eh_frame copied") };
            let Some(Bytes::Sparse(h)) = &sparse.eh_frame_hdr else { panic!("{path}: .eh_frame_hdr copied") };
            assert_eq!(s.resident(), 0, "{path}: nothing read before a frame needs it");
            assert_eq!(h.resident(), 4096, "{path}: the header's page only");
            let section = copy.eh_frame.as_ref().unwrap().len();
            assert_eq!(s.as_slice().len(), section);
            let starts = fde_starts(&copy);
            assert!(starts.len() > 500, "{path}: {} FDEs", starts.len());
            let bias = 0x5500_0000_0000u64;
            let end = copy.segments.iter().map(|&(_, v, size)| v + size).max().unwrap();
            let mut a = UnwinderX86_64::new();
            a.add_module(Module::new("copy".into(), bias..bias + end, bias, copy.section_info()));
            let mut b = UnwinderX86_64::new();
            b.add_module(Module::new("sparse".into(), bias..bias + end, bias, sparse.section_info()));
            let (mut ca, mut cb) = (CacheX86_64::new(), CacheX86_64::new());
            let mut read = |addr: u64| Ok(addr.rotate_left(17) ^ 0x7f00_1234_5678);
            let mut compared = 0;
            // The first 64 FDEs one by one (resident memory checked), then a spread of the rest.
            let step = (starts.len() / 4000).max(1);
            let picked: Vec<u64> = starts.iter().take(64).chain(starts.iter().skip(64).step_by(step)).copied().collect();
            for (i, &start) in picked.iter().enumerate() {
                let next = starts.iter().find(|&&x| x > start).copied().unwrap_or(start + 16);
                for svma in [start, start + 1, start + (next - start) / 2, next.saturating_sub(1)] {
                    for address in [FrameAddress::from_instruction_pointer(bias + svma), FrameAddress::from_return_address(bias + svma + 1).unwrap()] {
                        let before = (s.resident(), h.resident());
                        sparse.prepare(address.address_for_lookup() - bias);
                        if i < 64 {
                            // An FDE and its CIE; one page per step of the binary search.
                            assert!(s.resident() - before.0 <= 4 * 4096, "{path}: {svma:#x} read {} bytes", s.resident() - before.0);
                            let steps = (starts.len() as f64).log2().ceil() as usize + 1;
                            assert!(h.resident() - before.1 <= steps * 4096, "{path}: {svma:#x} read {} bytes of the table", h.resident() - before.1);
                        }
                        let (mut ra, mut rb) = (UnwindRegsX86_64::new(bias + svma, 0x7ffd_0000_0000, 0x7ffd_0000_0100), UnwindRegsX86_64::new(bias + svma, 0x7ffd_0000_0000, 0x7ffd_0000_0100));
                        let x = a.unwind_frame(address, &mut ra, &mut ca, &mut read);
                        let y = b.unwind_frame(address, &mut rb, &mut cb, &mut read);
                        assert_eq!(format!("{x:?} {ra:?}"), format!("{y:?} {rb:?}"), "{path}: frame at {svma:#x}");
                        compared += 1;
                    }
                }
            }
            let resident = s.resident();
            eprintln!("{path}: {compared} frames compared; {resident} of {section} bytes of .eh_frame read, {} of {} of .eh_frame_hdr", h.resident(), h.as_slice().len());
            assert!(compared > 2000);
            assert!(resident <= section.div_ceil(4096) * 4096);
        }
    }

    /// A file truncated after its tables were set up (a target may do that to its own file)
    /// gives zeros to the unwinder, not a signal: the frame fails to unwind.
    #[test]
    fn truncated_file_reads_as_zeros() {
        let path = clrprobe_tests::scratch_file("sparse-test", "libc.so.6");
        std::fs::copy(libc_path(), &path).unwrap();
        let sparse = sparse_of(path.to_str().unwrap());
        let starts = fde_starts(&sparse);
        let svma = starts[starts.len() / 2] + 1;
        // One frame read before the file shrinks: unwound as from the file.
        assert!(sparse.prepare(starts[1] + 1));
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(4096).unwrap();
        assert!(!sparse.prepare(svma), "a short read is reported");
        let Some(Bytes::Sparse(h)) = &sparse.eh_frame_hdr else { panic!(".eh_frame_hdr copied") };
        let Some(Bytes::Sparse(s)) = &sparse.eh_frame else { panic!(".eh_frame copied") };
        assert!(h.damaged() && h.resident() > 4096);
        // The pages read after the truncation are zeros (a page read before keeps its bytes).
        let table = &h.as_slice()[12..];
        assert!(table.chunks(4096).filter(|c| c.iter().all(|&b| b == 0)).count() > 0);
        assert!(s.resident() > 0 && !s.damaged());
        std::fs::remove_file(&path).unwrap();
    }
}
