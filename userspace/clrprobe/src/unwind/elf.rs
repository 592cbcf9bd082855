//! The unwind sections of a mapped ELF file (`.eh_frame`, `.eh_frame_hdr`) and its load
//! segments, read once per file and shared by every process that maps it. `.text` is not kept:
//! `.eh_frame` describes prologues and epilogues instruction by instruction. Only the headers
//! and these sections are read from the file (libcoreclr is 7 MB, its `.eh_frame` a tenth).
use std::{io::Read, ops::Range, os::unix::fs::FileTypeExt, sync::Arc};

use object::{Object, ObjectSection, ObjectSegment};

/// Files larger than this are not read for unwind tables.
const MAX_FILE: u64 = 512 << 20;

/// A byte range of a shared buffer (framehop wants `Deref<Target = [u8]>`).
#[derive(Clone)]
pub struct Bytes {
    data: Arc<[u8]>,
    range: Range<usize>,
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data[self.range.clone()]
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
    /// Bytes kept in memory for this file (the sections above).
    pub bytes: usize,
}

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
        let cache = object::ReadCache::new(f);
        Self::parse(&cache).map_err(|source| ElfError::Parse { path, source })
    }

    /// Parses an ELF image, keeping copies of the sections unwinding uses.
    pub fn parse<'d, R: object::ReadRef<'d>>(data: R) -> Result<Self, object::Error> {
        let file = object::File::parse(data)?;
        let mut kept: Vec<u8> = Vec::new();
        let mut ranges: Vec<(&str, Range<u64>, Range<usize>)> = Vec::new();
        for name in [".text", ".eh_frame", ".eh_frame_hdr", ".got"] {
            let Some(s) = file.section_by_name(name) else { continue };
            let svma = s.address()..s.address() + s.size();
            let at = kept.len();
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
            let bytes = (!range.is_empty()).then(|| Bytes { data: data.clone(), range });
            match name {
                ".text" => (out.text_svma, out.text) = (Some(svma), bytes),
                ".eh_frame" => (out.eh_frame_svma, out.eh_frame) = (Some(svma), bytes),
                ".eh_frame_hdr" => (out.eh_frame_hdr_svma, out.eh_frame_hdr) = (Some(svma), bytes),
                _ => out.got_svma = Some(svma),
            }
        }
        Ok(out)
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
}
