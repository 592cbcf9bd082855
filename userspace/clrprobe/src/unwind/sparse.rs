//! An unwind section (`.eh_frame`, `.eh_frame_hdr`) read from its file page by page, only where
//! a frame being unwound needs it, instead of copied whole: a sampled process's stacks pass
//! through a few dozen functions of libcoreclr, whose `.eh_frame` is 0.66 MB and
//! `.eh_frame_hdr` 0.13 MB.
//!
//! The section is laid out at its full length in an anonymous mapping that is never populated
//! as a whole: a page not read yet is the kernel's shared zero page and costs no memory. Before
//! an address is unwound, [`Sparse::fill_search`] reads the pages of `.eh_frame_hdr`'s table a
//! binary search for it compares, and [`Sparse::fill_entry`] the pages holding its FDE and that
//! FDE's CIE, from the file with `pread` (never a mapping of the file: a target may truncate its own
//! file, and touching a mapping past its end raises SIGBUS). A short read (the file changed)
//! leaves zeros, which the DWARF parser rejects.
use std::{
    fs::File,
    io,
    ops::Range,
    os::unix::fs::FileExt,
    ptr::NonNull,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

/// Pages of the anonymous mapping.
const PAGE: usize = 4096;
/// Where the search table starts in an `.eh_frame_hdr` of the layout [`Sparse::fill_search`]
/// reads (4 bytes of version and encodings, two 4-byte values).
const HDR_TABLE: usize = 12;

/// A section of a file, read page by page on demand.
pub struct Sparse {
    ptr: NonNull<u8>,
    len: usize,
    map_len: usize,
    /// The file, shared by the sections of one ELF file (one descriptor each).
    file: Arc<File>,
    /// Where the section starts in the file.
    file_offset: u64,
    /// One bit per page: read from the file already.
    filled: Mutex<Vec<u64>>,
    /// A page read short: the file shrank or failed (see [`Sparse::damaged`]).
    short: AtomicBool,
}

// SAFETY: the mapping is owned by this value and freed in `Drop`. Pages are written only by
// `fill` (under the `filled` lock, each page once, before any reader is handed a slice that
// will read it): the unwinder fills the entries of an address and only then asks framehop to
// unwind it, both through `&mut Unwinder`, so no slice is read while a page is written.
unsafe impl Send for Sparse {}
unsafe impl Sync for Sparse {}

impl Sparse {
    /// Reserves `len` bytes for the section at `file_offset` of `file`; nothing is read yet.
    pub fn new(file: Arc<File>, file_offset: u64, len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty section"));
        }
        let map_len = len.div_ceil(PAGE) * PAGE;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // Written page by page: a (multi-size) transparent huge page would make the first
        // write populate 64 KiB or more. Best effort: without it, only memory is lost.
        // SAFETY: the range is the mapping just made.
        unsafe { libc::madvise(p, map_len, libc::MADV_NOHUGEPAGE) };
        let ptr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        let pages = map_len / PAGE;
        Ok(Self {
            ptr,
            len,
            map_len,
            file,
            file_offset,
            filled: Mutex::new(vec![0; pages.div_ceil(64)]),
            short: AtomicBool::new(false),
        })
    }

    /// The section, with zeros where it has not been read.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes of a live mapping, readable; see the `Send`/`Sync` note for writes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// True once a page read short (the file shrank since it was opened, or a read failed):
    /// what was read may not be what the process maps, and gimli must not be handed the zeros
    /// (a search table of zeros points before `.eh_frame`, an overflow gimli does not check).
    pub fn damaged(&self) -> bool {
        self.short.load(Ordering::Relaxed)
    }

    /// Bytes read from the file so far (the memory this section costs).
    pub fn resident(&self) -> usize {
        let filled = self.filled.lock().unwrap_or_else(|e| e.into_inner());
        filled
            .iter()
            .map(|w| w.count_ones() as usize)
            .sum::<usize>()
            * PAGE
    }

    /// Reads the pages covering `range` (clamped to the section) that were not read yet.
    pub fn fill(&self, range: Range<usize>) {
        let end = range.end.min(self.len);
        if range.start >= end {
            return;
        }
        let mut filled = self.filled.lock().unwrap_or_else(|e| e.into_inner());
        for page in range.start / PAGE..end.div_ceil(PAGE) {
            let (word, bit) = (page / 64, 1u64 << (page % 64));
            if filled[word] & bit != 0 {
                continue;
            }
            filled[word] |= bit;
            let at = page * PAGE;
            let n = PAGE.min(self.len - at);
            // SAFETY: `at + n <= len <= map_len`, inside the mapping; no slice of this page is
            // in use (see the `Send`/`Sync` note).
            let buf = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(at), n) };
            let mut done = 0;
            while done < n {
                match self
                    .file
                    .read_at(&mut buf[done..], self.file_offset + (at + done) as u64)
                {
                    Ok(0) => break,
                    Ok(k) => done += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        log::debug!("unwind tables: reading a page of an unwind section: {e}");
                        break;
                    }
                }
            }
            if done < n {
                self.short.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Reads the CFI entry (FDE) at `offset` and the CIE it points to.
    pub fn fill_entry(&self, offset: usize) {
        let Some(body) = self.fill_one(offset) else {
            return;
        };
        // An FDE's body starts with the distance back from that field to its CIE (always 4
        // bytes in `.eh_frame`); 0 marks a CIE.
        let Some(pointer) = self.u32_at(body).filter(|&p| p != 0) else {
            return;
        };
        if let Some(cie) = body.checked_sub(pointer as usize) {
            self.fill_one(cie);
        }
    }

    /// Reads the whole entry at `offset`; returns where its body (after the length) starts.
    fn fill_one(&self, offset: usize) -> Option<usize> {
        self.fill(offset..offset.checked_add(12)?);
        let (body, len) = match self.u32_at(offset)? {
            0xffff_ffff => (offset + 12, usize::try_from(self.u64_at(offset + 4)?).ok()?),
            n => (offset + 4, n as usize),
        };
        self.fill(offset..body.checked_add(len)?);
        Some(body)
    }

    /// For an `.eh_frame_hdr` whose table is `datarel sdata4` pairs (what linkers write; see
    /// [`Sparse::is_search_table`]): reads the entries gimli's binary search for `address`
    /// compares, and the entry it ends on. The search is gimli's (`EhHdrTable::lookup`) step by
    /// step, so the entries it reads next are all here. `base` is the section's address.
    pub fn fill_search(&self, address: u64, base: u64) {
        let Some(count) = self.u32_at(8) else { return };
        let (mut pos, mut len) = (HDR_TABLE, u64::from(count));
        while len > 1 {
            let half = len / 2;
            let Some(mid) = usize::try_from(half * 8)
                .ok()
                .and_then(|d| pos.checked_add(d))
            else {
                return;
            };
            self.fill(mid..mid + 4);
            let Some(pivot) = self
                .u32_at(mid)
                .map(|v| base.wrapping_add_signed(i64::from(v as i32)))
            else {
                return;
            };
            match pivot.cmp(&address) {
                std::cmp::Ordering::Equal => {
                    pos = mid;
                    break;
                }
                std::cmp::Ordering::Less => {
                    pos = mid;
                    len -= half;
                }
                std::cmp::Ordering::Greater => len = half,
            }
        }
        self.fill(pos..pos + 8);
    }

    /// Reads the header of an `.eh_frame_hdr`; true when its table can be searched by
    /// [`Sparse::fill_search`]: version 1, `.eh_frame`'s address `pcrel sdata4`, the count
    /// `udata4`, the table `datarel sdata4`.
    pub fn is_search_table(&self) -> bool {
        self.fill(0..HDR_TABLE);
        self.as_slice().get(..4) == Some(&[1, 0x1b, 0x03, 0x3b][..])
    }

    fn u32_at(&self, at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(
            self.as_slice()
                .get(at..at.checked_add(4)?)?
                .try_into()
                .ok()?,
        ))
    }

    fn u64_at(&self, at: usize) -> Option<u64> {
        Some(u64::from_le_bytes(
            self.as_slice()
                .get(at..at.checked_add(8)?)?
                .try_into()
                .ok()?,
        ))
    }
}

impl Drop for Sparse {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; no slice of it outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.map_len) };
    }
}
