//! The PE layer of managed images: sections, RVA <-> file offset, the CLR (COR20) header.
//! Parsed with the `object` crate; the result is owned so images can be cached.
use std::borrow::Cow;

use object::LittleEndian as LE;
use object::pe;
use object::read::pe::{ImageNtHeaders, ImageOptionalHeader, PeFile32, PeFile64};

use crate::FormatError;

/// How much of a file [`crate::R2rImage::parse_source`] reads for the PE headers.
pub const HEADERS_READ: u64 = 64 << 10;

/// Bytes of an image by file offset: the whole file in memory, or a file read range by range.
pub trait ImageSource {
    /// File length.
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `len` bytes at file offset `offset` (an error if they are not all there).
    fn bytes_at(&self, offset: u64, len: u64, what: &'static str) -> Result<Cow<'_, [u8]>, FormatError>;
    /// True when the bytes are in memory already (borrowing them costs nothing).
    fn in_memory(&self) -> bool {
        false
    }
    /// A handle on the same open file, to read from later (names read on demand); None when
    /// the source is not a file.
    fn keep_open(&self) -> Option<std::fs::File> {
        None
    }
    /// Fills `buf` with the bytes at file offset `offset`.
    fn read_into(&self, offset: u64, buf: &mut [u8], what: &'static str) -> Result<(), FormatError> {
        buf.copy_from_slice(&self.bytes_at(offset, buf.len() as u64, what)?);
        Ok(())
    }
}

impl ImageSource for [u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn bytes_at(&self, offset: u64, len: u64, what: &'static str) -> Result<Cow<'_, [u8]>, FormatError> {
        crate::reader::Bytes::new(self, what).slice(offset, len).map(Cow::Borrowed)
    }

    fn in_memory(&self) -> bool {
        true
    }
}

/// A regular file read with `pread` range by range (its length taken once, when opened).
#[cfg(unix)]
#[derive(Debug)]
pub struct FileSource<'f> {
    file: &'f std::fs::File,
    len: u64,
}

#[cfg(unix)]
impl<'f> FileSource<'f> {
    pub fn new(file: &'f std::fs::File, len: u64) -> Self {
        FileSource { file, len }
    }
}

#[cfg(unix)]
impl ImageSource for FileSource<'_> {
    fn len(&self) -> u64 {
        self.len
    }

    fn bytes_at(&self, offset: u64, len: u64, what: &'static str) -> Result<Cow<'_, [u8]>, FormatError> {
        use std::os::unix::fs::FileExt;
        // Checked against the length first: a corrupt size never allocates past the file.
        let truncated = || FormatError::Truncated { what, offset, needed: len, len: self.len };
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(truncated());
        }
        let mut buf = vec![0u8; len as usize];
        // A file that shrank since it was opened reads short: the same error as a short slice.
        self.file.read_exact_at(&mut buf, offset).map_err(|_| truncated())?;
        Ok(Cow::Owned(buf))
    }

    fn keep_open(&self) -> Option<std::fs::File> {
        self.file.try_clone().ok()
    }

    fn read_into(&self, offset: u64, buf: &mut [u8], what: &'static str) -> Result<(), FormatError> {
        use std::os::unix::fs::FileExt;
        let len = buf.len() as u64;
        let truncated = || FormatError::Truncated { what, offset, needed: len, len: self.len };
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(truncated());
        }
        self.file.read_exact_at(buf, offset).map_err(|_| truncated())
    }
}

/// One section header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub virtual_address: u32,
    pub virtual_size: u32,
    pub raw_offset: u32,
    pub raw_size: u32,
}

/// The parts of a PE image the symbolizer needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeImage {
    /// COFF machine (for Linux R2R images XOR-ed with an OS value, e.g. 0xFD1D = AMD64 ^ 0x7B79).
    pub machine: u16,
    pub image_base: u64,
    pub sections: Vec<Section>,
    /// RVA and size of the CLR runtime header (data directory 14), if present.
    pub clr_header: Option<(u32, u32)>,
}

/// Base COFF machine of an R2R image whose machine field carries an OS marker.
pub fn base_machine(machine: u16) -> u16 {
    // OS markers: Apple 0x4644, FreeBSD 0xADC4, Linux 0x7B79, NetBSD 0x1993, SunOS 0x1992.
    for os in [0x4644u16, 0xADC4, 0x7B79, 0x1993, 0x1992] {
        let m = machine ^ os;
        if matches!(m, pe::IMAGE_FILE_MACHINE_AMD64 | pe::IMAGE_FILE_MACHINE_ARM64 | pe::IMAGE_FILE_MACHINE_I386 | pe::IMAGE_FILE_MACHINE_ARMNT) {
            return m;
        }
    }
    machine
}

/// The COR20 header fields clrprobe reads (II.25.3.3): (RVA, size) of the metadata and of the
/// ManagedNativeHeader, and the flags.
#[derive(Debug, Clone, Copy)]
pub struct Cor20 {
    pub metadata: (u32, u32),
    pub flags: u32,
    pub managed_native_header: (u32, u32),
}

impl PeImage {
    /// The headers of the image in `src` (only its first [`HEADERS_READ`] bytes are read).
    pub fn read<S: ImageSource + ?Sized>(src: &S) -> Result<PeImage, FormatError> {
        let headers = src.bytes_at(0, src.len().min(HEADERS_READ), "PE headers")?;
        PeImage::parse(&headers)
    }

    /// The managed image's COR20 header, read from `src`.
    pub fn cor20<S: ImageSource + ?Sized>(&self, src: &S) -> Result<Cor20, FormatError> {
        let (rva, size) = self.clr_header.ok_or(FormatError::NotReadyToRun("no CLR header (not a managed image)"))?;
        let cor = self.bytes_at(src, rva, size.clamp(72, 4096), "CLR header")?;
        let cor = crate::reader::Bytes::new(&cor, "CLR header");
        Ok(Cor20 { metadata: (cor.u32(8)?, cor.u32(12)?), flags: cor.u32(16)?, managed_native_header: (cor.u32(64)?, cor.u32(68)?) })
    }

    pub fn parse(data: &[u8]) -> Result<PeImage, FormatError> {
        let magic = object::read::pe::optional_header_magic(data).map_err(|e| FormatError::Pe(e.to_string()))?;
        if magic == pe::IMAGE_NT_OPTIONAL_HDR64_MAGIC {
            let f = PeFile64::parse(data).map_err(|e| FormatError::Pe(e.to_string()))?;
            Ok(Self::from_file(f.nt_headers(), f.section_table(), f.data_directory(pe::IMAGE_DIRECTORY_ENTRY_COM_DESCRIPTOR)))
        } else {
            let f = PeFile32::parse(data).map_err(|e| FormatError::Pe(e.to_string()))?;
            Ok(Self::from_file(f.nt_headers(), f.section_table(), f.data_directory(pe::IMAGE_DIRECTORY_ENTRY_COM_DESCRIPTOR)))
        }
    }

    fn from_file<H: ImageNtHeaders>(
        nt: &H,
        table: object::read::pe::SectionTable<'_>,
        clr: Option<&pe::ImageDataDirectory>,
    ) -> PeImage {
        let sections = table
            .iter()
            .map(|s| Section {
                name: String::from_utf8_lossy(s.name.split(|&c| c == 0).next().unwrap_or(&[])).into_owned(),
                virtual_address: s.virtual_address.get(LE),
                virtual_size: s.virtual_size.get(LE),
                raw_offset: s.pointer_to_raw_data.get(LE),
                raw_size: s.size_of_raw_data.get(LE),
            })
            .collect();
        let clr_header = clr.map(|d| (d.virtual_address.get(LE), d.size.get(LE))).filter(|&(rva, _)| rva != 0);
        PeImage { machine: nt.file_header().machine.get(LE), image_base: nt.optional_header().image_base(), sections, clr_header }
    }

    /// File offset of an RVA (None if no section holds it on disk).
    pub fn rva_to_offset(&self, rva: u32) -> Option<u32> {
        self.sections.iter().find_map(|s| {
            let d = rva.checked_sub(s.virtual_address)?;
            (d < s.raw_size).then(|| s.raw_offset.checked_add(d)).flatten()
        })
    }

    /// RVA of a file offset (None if no section holds it).
    pub fn offset_to_rva(&self, offset: u64) -> Option<u32> {
        self.sections.iter().find_map(|s| {
            let d = offset.checked_sub(s.raw_offset as u64)?;
            (d < s.raw_size as u64).then(|| s.virtual_address.checked_add(d as u32)).flatten()
        })
    }

    /// The bytes of `[rva, rva+size)` read from `src` (their file offset is that of `rva`).
    /// The metadata at `rva` (`size` bytes), as naming methods reads it: borrowed whole from
    /// memory, or from a file only the parts it uses ([`crate::metadata::read_for_names`]).
    pub fn metadata_at<'s, S: ImageSource + ?Sized>(&self, src: &'s S, rva: u32, size: u32) -> Result<Cow<'s, [u8]>, FormatError> {
        self.metadata_for(src, rva, size, true)
    }

    /// As [`PeImage::metadata_at`]; without `strings`, a file's `#Strings` heap is not read
    /// (its bytes are zero in the buffer): for [`crate::metadata::name_tables`].
    pub fn metadata_for<'s, S: ImageSource + ?Sized>(&self, src: &'s S, rva: u32, size: u32, strings: bool) -> Result<Cow<'s, [u8]>, FormatError> {
        const WHAT: &str = "metadata";
        if src.in_memory() {
            return self.bytes_at(src, rva, size, WHAT);
        }
        let base = self
            .rva_to_offset(rva)
            .ok_or_else(|| FormatError::invalid(WHAT, format!("RVA {rva:#x} is in no section")))? as u64;
        if base.checked_add(size as u64).is_none_or(|end| end > src.len()) {
            return Err(FormatError::Truncated { what: WHAT, offset: base, needed: size as u64, len: src.len() });
        }
        match crate::metadata::read_for_names(size as u64, strings, |buf, off| src.read_into(base + off, buf, WHAT)) {
            Ok(buf) => Ok(Cow::Owned(buf)),
            // Whatever the parse will say about it, from the whole bytes.
            Err(_) => self.bytes_at(src, rva, size, WHAT),
        }
    }

    pub fn bytes_at<'s, S: ImageSource + ?Sized>(&self, src: &'s S, rva: u32, size: u32, what: &'static str) -> Result<Cow<'s, [u8]>, FormatError> {
        let off = self
            .rva_to_offset(rva)
            .ok_or_else(|| FormatError::invalid(what, format!("RVA {rva:#x} is in no section")))?;
        src.bytes_at(off as u64, size as u64, what)
    }

    /// The bytes of `[rva, rva+size)`, which must lie in one section on disk.
    pub fn data_at<'a>(&self, data: &'a [u8], rva: u32, size: u32, what: &'static str) -> Result<&'a [u8], FormatError> {
        let off = self
            .rva_to_offset(rva)
            .ok_or_else(|| FormatError::invalid(what, format!("RVA {rva:#x} is in no section")))?;
        crate::reader::Bytes::new(data, what).slice(off as u64, size as u64)
    }
}
