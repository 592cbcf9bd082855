//! GNU build ids (`NT_GNU_BUILD_ID` notes) of 64-bit little-endian ELF files and of the
//! running kernel (`/sys/kernel/notes`), as lowercase hex, for pprof mappings.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Notes larger than this are not searched.
const MAX_NOTES: u64 = 1 << 16;
const PT_NOTE: u32 = 4;
const NT_GNU_BUILD_ID: u32 = 3;

fn u16le(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32le(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64le(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The GNU build id in a sequence of ELF notes (the contents of a `PT_NOTE` segment).
pub fn from_notes(notes: &[u8]) -> Option<String> {
    let mut at = 0usize;
    let align = |n: usize| n.checked_add(3).map(|n| n & !3);
    while at + 12 <= notes.len() {
        let namesz = u32le(notes, at)? as usize;
        let descsz = u32le(notes, at + 4)? as usize;
        let kind = u32le(notes, at + 8)?;
        let name_at = at + 12;
        let desc_at = name_at.checked_add(align(namesz)?)?;
        let end = desc_at.checked_add(align(descsz)?)?;
        if desc_at.checked_add(descsz)? > notes.len() {
            return None;
        }
        if kind == NT_GNU_BUILD_ID && notes.get(name_at..name_at + namesz)? == b"GNU\0" && descsz > 0 {
            return Some(notes[desc_at..desc_at + descsz].iter().map(|b| format!("{b:02x}")).collect());
        }
        at = end;
    }
    None
}

/// The GNU build id of the ELF file at `path` (None for other files, 32-bit or big-endian
/// ELF, or no build id). For a target's file, pass `/proc/PID/map_files/START-END`: the
/// kernel's link to the very file mapped, which cannot be swapped for a FIFO or a link.
pub fn of_file(path: &Path) -> Option<String> {
    let mut f = File::open(path).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut head = [0u8; 64];
    f.read_exact(&mut head).ok()?;
    // ELF magic, ELFCLASS64, ELFDATA2LSB.
    if head[..4] != *b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return None;
    }
    let phoff = u64le(&head, 0x20)?;
    let phentsize = u64::from(u16le(&head, 0x36)?);
    let phnum = u64::from(u16le(&head, 0x38)?);
    if phentsize < 56 || phnum == 0 || phnum > 256 {
        return None;
    }
    let mut phdrs = vec![0u8; (phentsize * phnum) as usize];
    f.seek(SeekFrom::Start(phoff)).ok()?;
    f.read_exact(&mut phdrs).ok()?;
    for i in 0..phnum as usize {
        let ph = &phdrs[i * phentsize as usize..];
        if u32le(ph, 0)? != PT_NOTE {
            continue;
        }
        let (offset, size) = (u64le(ph, 8)?, u64le(ph, 0x20)?);
        if size == 0 || size > MAX_NOTES {
            continue;
        }
        let mut notes = vec![0u8; size as usize];
        f.seek(SeekFrom::Start(offset)).ok()?;
        if f.read_exact(&mut notes).is_ok()
            && let Some(id) = from_notes(&notes)
        {
            return Some(id);
        }
    }
    None
}

/// The running kernel's build id (`/sys/kernel/notes`).
pub fn of_kernel() -> Option<String> {
    let mut notes = Vec::new();
    File::open("/sys/kernel/notes").ok()?.take(MAX_NOTES).read_to_end(&mut notes).ok()?;
    from_notes(&notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_gnu_note() {
        let mut n = Vec::new();
        // An unrelated note first, then the build id.
        n.extend_from_slice(&[4, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0]);
        n.extend_from_slice(b"XYZ\0");
        n.extend_from_slice(&[1, 2, 3, 4]);
        n.extend_from_slice(&[4, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0]);
        n.extend_from_slice(b"GNU\0");
        n.extend_from_slice(&[0xab, 0xcd, 0x01, 0]);
        assert_eq!(from_notes(&n).as_deref(), Some("abcd01"));
        assert_eq!(from_notes(&n[..20]), None);
    }

    #[test]
    fn this_test_binary_and_libc_have_build_ids() {
        // Debian's toolchain links with --build-id: the running test binary has one.
        let exe = std::env::current_exe().unwrap();
        let id = of_file(&exe).expect("build id of the test binary");
        assert!(id.len() >= 16 && id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
        assert!(of_file(Path::new("/etc/hostname")).is_none());
    }
}
