//! Runtime code in the JIT region that no perf map or method event names: stubs the runtime
//! made before a perf map was switched on (attach), or that no map lists at all, recognised by
//! their instructions.
//!
//! - CoreCLR (.NET 7+, W^X on) copies its patched write-barrier block (`JIT_PatchedCodeStart`
//!   ..`Last`: the checked and unchecked write barriers) into the first executable page of its
//!   `memfd:doublemapper` at start-up, and every reference store in managed code calls it.
//!   Recognised by place (the double mapper's page at file offset 0) and content (`ret` — the
//!   empty `JIT_PatchedCodeStart` — then a barrier's `mov [rdi], rsi`).
//! - Precode stubs: .NET 7+ lays them out in 24-byte slots on interleaved code pages (their
//!   data one code-page size further); .NET Core 3.1 in 8-byte `FixupPrecode` chunks.
//! - ReadyToRun images' import thunks (delay-load helper thunks, import cell jumps): code in the
//!   image that no method's RUNTIME_FUNCTION claims.
//! - Stubs made by the runtime's code generators: unboxing stubs, generic dictionary lookup
//!   helpers and the other dynamic helpers (arguments loaded, then a jump).
use std::{fs::File, os::unix::fs::FileExt};

use clrprobe_symbolizer::{Backing, Mapping};

/// Bytes of the block read to recognise it (it is about 0x200 long).
const BLOCK: usize = 0x200;

/// Precode stubs are laid out in 24-byte slots on interleaved code pages, their data on the
/// page(s) after: 16 KiB code pages for some stub kinds (CallCountingStub on .NET 8), 4 KiB
/// for others.
const PRECODE_SLOT: u64 = 24;
const PAGE: u64 = 4096;
const STUB_PAGES: [u64; 2] = [16384, PAGE];
/// Bytes read around an address to recognise a generated stub: before and after it.
const BEFORE: u64 = 40;
const AROUND: usize = 96;

/// The name of runtime code at `addr` in `m` (a live process's memory is read): the
/// write-barrier block in the double mapper's first page (an exited process is judged by
/// place), a precode stub, an unboxing stub, a generic dictionary lookup helper or another
/// dynamic helper.
pub fn name(pid: u32, m: &Mapping, addr: u64) -> Option<&'static str> {
    let is_doublemapper = matches!(&m.backing, Backing::Memfd { name } if name.starts_with("doublemapper"));
    let is_anon = matches!(&m.backing, Backing::Anon);
    let is_r2r = matches!(&m.backing, Backing::File { path, .. } if path.ends_with(".dll"));
    if !(is_doublemapper || is_anon || is_r2r) || !m.executable || addr < m.start || addr >= m.end {
        return None;
    }
    let mem = File::open(format!("/proc/{pid}/mem")).ok();
    let read = |at: u64, b: &mut [u8]| -> usize {
        match &mem {
            // Only within the mapping (a stub never spans two).
            Some(f) if at >= m.start && at < m.end => {
                let n = b.len().min((m.end - at) as usize);
                f.read_at(&mut b[..n], at).unwrap_or(0)
            }
            _ => 0,
        }
    };
    if is_r2r {
        // Code of a ReadyToRun image that no method claims: its import thunks (read from the
        // image file once the process is gone).
        let from = addr.saturating_sub(BEFORE).max(m.start);
        let mut b = [0u8; AROUND];
        let mut n = read(from, &mut b);
        if n == 0
            && let Backing::File { path, .. } = &m.backing
        {
            n = read_image(path, m.inode, m.offset + (from - m.start), &mut b);
        }
        return r2r_thunk(&b[..n], (addr - from) as usize);
    }
    if is_doublemapper && m.offset == 0 && addr - m.start < BLOCK as u64 {
        let off = (addr - m.start) as usize;
        let mut b = [0u8; BLOCK];
        if read(m.start, &mut b) < BLOCK {
            // Gone: the page at offset 0 has held this block in every CoreCLR that has a double mapper.
            return Some(if off == 0 { "[stub] JIT_PatchedCodeStart" } else { "[stub] JIT_WriteBarrier" });
        }
        if let Some(n) = name_in_block(&b, off) {
            return Some(n);
        }
    }
    for page in STUB_PAGES {
        let base = addr & !(page - 1);
        let slot = base + (addr - base) / PRECODE_SLOT * PRECODE_SLOT;
        let mut b = [0u8; 16];
        if read(slot, &mut b) == 16
            && let Some(n) = precode(&b)
        {
            return Some(n);
        }
    }
    let mut chunk = [0u8; 24];
    let slot = addr & !7;
    let start = slot.saturating_sub(8).max(m.start);
    if read(start, &mut chunk) >= 16 && fixup_precode_v3(&chunk, (slot - start) as usize) {
        return Some("[stub] FixupPrecode");
    }
    let from = addr.saturating_sub(BEFORE).max(m.start);
    let mut b = [0u8; AROUND];
    let n = read(from, &mut b);
    generated_stub(&b[..n], (addr - from) as usize)
}

/// Reads `b.len()` bytes at `offset` of the image file at `path` if it is still the mapped
/// file: a regular file (no link followed, no FIFO waited on) with the mapping's inode.
fn read_image(path: &str, inode: u64, offset: u64, b: &mut [u8]) -> usize {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let Ok(f) = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path) else {
        return 0;
    };
    match f.metadata() {
        Ok(md) if md.is_file() && md.ino() == inode => f.read_at(b, offset).unwrap_or(0),
        _ => 0,
    }
}

/// Names offset `off` of the block `b` (None when `b` is not the write-barrier block).
pub fn name_in_block(b: &[u8], off: usize) -> Option<&'static str> {
    const STORE: [u8; 3] = [0x48, 0x89, 0x37]; // mov [rdi], rsi
    if b.first() != Some(&0xC3) {
        return None;
    }
    let has_store = |at: usize| b.get(at..at + 3) == Some(&STORE[..]);
    // The unchecked barrier starts 16-byte aligned with the store; the checked one before it
    // ends with the same store (`NotInHeap:`).
    let barrier = (16..0x100).step_by(16).find(|&at| has_store(at))?;
    Some(match off {
        0 => "[stub] JIT_PatchedCodeStart",
        o if o < barrier => "[stub] JIT_CheckedWriteBarrier",
        _ => "[stub] JIT_WriteBarrier",
    })
}

/// Names the precode stub whose slot starts with `b` (CoreCLR 7+ on x64, rip-relative data
/// on the next page): FixupPrecode `jmp [rip+d]; mov r10, [rip+d]; jmp [rip+d]`, StubPrecode
/// `mov r10, [rip+d]; jmp [rip+d]`, CallCountingStub `mov rax, [rip+d]; dec word [rax]; je`.
pub fn precode(b: &[u8; 16]) -> Option<&'static str> {
    let at = |i: usize, p: &[u8]| b.get(i..i + p.len()) == Some(p);
    if at(0, &[0xFF, 0x25]) && at(6, &[0x4C, 0x8B, 0x15]) && at(13, &[0xFF, 0x25]) {
        Some("[stub] FixupPrecode")
    } else if at(0, &[0x4C, 0x8B, 0x15]) && at(7, &[0xFF, 0x25]) {
        Some("[stub] StubPrecode")
    } else if at(0, &[0x48, 0x8B, 0x05]) && at(7, &[0x66, 0xFF, 0x08, 0x74]) {
        Some("[stub] CallCountingStub")
    } else {
        None
    }
}

/// A ReadyToRun import thunk holding offset `at` of `b` (bytes read around the address):
/// a delay-load helper thunk (`xor eax, eax` or `mov rax, r11`, `push index`, `push [module]`,
/// `jmp [helper]`: its first call binds the import) or an import cell's `jmp [cell]`.
pub fn r2r_thunk(b: &[u8], at: usize) -> Option<&'static str> {
    let is = |i: usize, p: &[u8]| b.get(i..i + p.len()) == Some(p);
    for start in at.saturating_sub(12)..=at {
        let body = if is(start, &[0x33, 0xC0, 0x6A]) {
            start + 2
        } else if is(start, &[0x49, 0x8B, 0xC3, 0x6A]) {
            start + 3
        } else {
            continue;
        };
        if is(body + 2, &[0xFF, 0x35]) && is(body + 8, &[0xFF, 0x25]) && at < body + 14 {
            return Some("[stub] DelayLoadHelper thunk");
        }
    }
    // A jump through an import cell, among others like it (a table of 6-byte jumps).
    let jump = |i: usize| is(i, &[0xFF, 0x25]);
    (at.saturating_sub(5)..=at).find(|&i| jump(i) && (jump(i + 6) || (i >= 6 && jump(i - 6)))).map(|_| "[stub] ImportThunk")
}

/// A .NET Core 3.1 `FixupPrecode` in the 8-byte slot at `at` of `b` (its neighbours around it):
/// `call PrecodeFixupThunk` (E8) or, once patched, `jmp target` (E9), rel32, then the type
/// byte (5E, 5F patched), the MethodDesc chunk index and the precode's index in its chunk,
/// which counts down by one from slot to slot (to 0, the last before the chunk's MethodDesc).
pub fn fixup_precode_v3(b: &[u8], at: usize) -> bool {
    let slot = |i: usize| -> Option<u8> {
        let s = b.get(i..i + 8)?;
        (matches!(s[0], 0xE8 | 0xE9) && matches!(s[5], 0x5E | 0x5F)).then_some(s[7])
    };
    let Some(index) = slot(at) else { return false };
    // A neighbour in the same chunk confirms it: the next slot one lower, or the one before
    // one higher.
    (index > 0 && slot(at + 8) == Some(index - 1)) || (at >= 8 && slot(at - 8) == index.checked_add(1))
}

/// A stub made by the runtime's code generators holding offset `at` of `b` (bytes read around
/// the address): an unboxing stub `add rdi, 8` then `mov rax, target; jmp rax` or
/// `jmp target`; a generic dictionary lookup helper: loads from `rdi` (`mov rax, [rdi+d]`,
/// then `mov rax, [rax+d]`…), `test rax, rax; je +1; ret`, then `mov rsi, imm64; jmp helper`.
pub fn generated_stub(b: &[u8], at: usize) -> Option<&'static str> {
    const UNBOX: [u8; 4] = [0x48, 0x83, 0xC7, 0x08];
    const LOOKUP_TAIL: [u8; 8] = [0x48, 0x85, 0xC0, 0x74, 0x01, 0xC3, 0x48, 0xBE];
    let find = |p: &[u8], from: usize, to: usize| (from..=to.min(b.len().saturating_sub(p.len()))).find(|&i| b[i..].starts_with(p));
    // Unboxing stub: the address is one of its 2–3 instructions (at most 14 bytes in).
    if let Some(i) = find(&UNBOX, at.saturating_sub(14), at)
        && let Some(rest) = b.get(i + 4..)
    {
        let len = if rest.len() >= 12 && rest[0] == 0x48 && rest[1] == 0xB8 && rest[10] == 0xFF && rest[11] == 0xE0 {
            4 + 12
        } else if rest.first() == Some(&0xE9) {
            4 + 5
        } else {
            0
        };
        if at < i + len {
            return Some("[stub] UnboxingStub");
        }
    }
    // Dictionary lookup helper: the tail after the address (or the address in the tail's
    // last instructions), the loads before it.
    if let Some(t) = find(&LOOKUP_TAIL, at.saturating_sub(21), at + 48)
        && b.get(t + 16) == Some(&0xE9)
        && at < t + 21
        && (t.saturating_sub(48)..t).any(|i| b[i..].starts_with(&[0x48, 0x8B, 0x47]) || b[i..].starts_with(&[0x48, 0x8B, 0x87]))
    {
        return Some("[stub] DictionaryLookupHelper");
    }
    // Other dynamic helpers: arguments loaded (`mov reg, imm64`, `mov rsi, rdi`), then `jmp
    // target`; they start after the previous stub's `int3` padding.
    for s in at.saturating_sub(20).max(1)..=at {
        if b.get(s - 1) != Some(&0xCC) {
            continue;
        }
        let (mut p, mut loads) = (s, 0);
        loop {
            match b.get(p..p + 3) {
                Some([0x48 | 0x49, 0xB8..=0xBF, _]) => {
                    p += 10;
                    loads += 1;
                }
                Some([0x48, 0x8B, 0xF7]) => p += 3,
                _ => break,
            }
        }
        if loads > 0 && b.get(p) == Some(&0xE9) && p + 5 <= b.len() && at < p + 5 {
            return Some("[stub] DynamicHelper");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_write_barrier_block() {
        // As .NET 8.0.4 lays it out: ret; checked barrier (lea/cmp/jb…; mov [rdi],rsi; ret);
        // padding; the barrier at 0x30.
        let mut b = vec![0x90u8; BLOCK];
        b[0] = 0xC3;
        b[0x1f..0x23].copy_from_slice(&[0x48, 0x89, 0x37, 0xC3]);
        b[0x30..0x36].copy_from_slice(&[0x48, 0x89, 0x37, 0x49, 0x89, 0xF8]);
        assert_eq!(name_in_block(&b, 0), Some("[stub] JIT_PatchedCodeStart"));
        assert_eq!(name_in_block(&b, 0x8), Some("[stub] JIT_CheckedWriteBarrier"));
        assert_eq!(name_in_block(&b, 0x4a), Some("[stub] JIT_WriteBarrier"));
        b[0] = 0x55;
        assert_eq!(name_in_block(&b, 0x4a), None);
    }

    #[test]
    fn names_precodes() {
        let fixup = [0xFF, 0x25, 0xF8, 0x0F, 0, 0, 0x4C, 0x8B, 0x15, 0xF9, 0x0F, 0, 0, 0xFF, 0x25, 0xFA];
        assert_eq!(precode(&fixup), Some("[stub] FixupPrecode"));
        let mut stub = [0xCCu8; 16];
        stub[..13].copy_from_slice(&[0x4C, 0x8B, 0x15, 0xF9, 0x0F, 0, 0, 0xFF, 0x25, 0xFA, 0x0F, 0, 0]);
        assert_eq!(precode(&stub), Some("[stub] StubPrecode"));
        assert_eq!(precode(&[0x55; 16]), None);
    }
    #[test]
    fn names_r2r_thunks() {
        // .NET 8 CoreLib: xor eax, eax; push 3; push [rip+d]; jmp [rip+d] — one after another.
        let t = [0x33, 0xC0, 0x6A, 0x03, 0xFF, 0x35, 0xCE, 0x6D, 0x43, 0x00, 0xFF, 0x25, 0xE8, 0x6D, 0x43, 0x00];
        let b: Vec<u8> = t.iter().chain(t.iter()).copied().collect();
        for at in [0, 2, 4, 10, 16, 26] {
            assert_eq!(r2r_thunk(&b, at), Some("[stub] DelayLoadHelper thunk"), "at {at}");
        }
        // The method-call form: mov rax, r11; push 1; push [rip+d]; jmp [rip+d].
        let b = [0xCC, 0x49, 0x8B, 0xC3, 0x6A, 0x01, 0xFF, 0x35, 0x7D, 0x6D, 0x43, 0x00, 0xFF, 0x25, 0x8F, 0x6D, 0x43, 0x00, 0xCC];
        assert_eq!(r2r_thunk(&b, 1), Some("[stub] DelayLoadHelper thunk"));
        assert_eq!(r2r_thunk(&b, 12), Some("[stub] DelayLoadHelper thunk"));
        assert_eq!(r2r_thunk(&b, 18), None);
        // .NET Core 3.1 CoreLib: a table of jmp [rip+d].
        let b = [0xFF, 0x25, 0x47, 0xC8, 0xFC, 0xFF, 0xFF, 0x25, 0x49, 0xC8, 0xFC, 0xFF, 0x55];
        assert_eq!(r2r_thunk(&b, 6), Some("[stub] ImportThunk"));
        assert_eq!(r2r_thunk(&b, 0), Some("[stub] ImportThunk"));
        assert_eq!(r2r_thunk(&[0x55; 16], 6), None);
    }

    #[test]
    fn names_core31_fixup_precodes() {
        // Three slots as .NET Core 3.1 lays them out (one patched to a jmp), indexes 3f, 3e, 3d.
        let b = [
            0xE8, 0x9B, 0xAC, 0x40, 0x79, 0x5E, 0x39, 0x3F, 0xE8, 0x93, 0xAC, 0x40, 0x79, 0x5E, 0x3B, 0x3E, 0xE9, 0x8B, 0x7E,
            0x01, 0x00, 0x5F, 0x3E, 0x3D,
        ];
        assert!(fixup_precode_v3(&b, 8));
        assert!(fixup_precode_v3(&b, 16));
        assert!(fixup_precode_v3(&b, 0));
        let mut other = b;
        other[15] = 0x20;
        other[23] = 0x20;
        assert!(!fixup_precode_v3(&other, 8), "no neighbour in the same chunk");
        assert!(!fixup_precode_v3(&[0x55; 24], 8));
    }

    #[test]
    fn names_generated_stubs() {
        // .NET Core 3.1: add rdi, 8; mov rax, imm64; jmp rax (the address on the mov).
        let mut b = vec![0u8; 40];
        b.extend_from_slice(&[0x48, 0x83, 0xC7, 0x08, 0x48, 0xB8, 0x50, 0x31, 0x65, 0x5D, 0x86, 0x7F, 0, 0, 0xFF, 0xE0, 0x02, 0, 0, 0]);
        assert_eq!(generated_stub(&b, 44), Some("[stub] UnboxingStub"));
        assert_eq!(generated_stub(&b, 40), Some("[stub] UnboxingStub"));
        assert_eq!(generated_stub(&b, 56), None, "past the stub");
        // .NET 8: mov rax,[rdi+30]; mov rax,[rax]; mov rax,[rax+30]; test; je; ret; mov rsi, imm64; jmp.
        let mut b = vec![0u8; 28];
        b.extend_from_slice(&[
            0x48, 0x8B, 0x47, 0x30, 0x48, 0x8B, 0x40, 0x00, 0x48, 0x8B, 0x40, 0x30, 0x48, 0x85, 0xC0, 0x74, 0x01, 0xC3, 0x48, 0xBE,
            0x10, 0x03, 0xC3, 0xE1, 0x44, 0x7F, 0, 0, 0xE9, 0xE7, 0xAF, 0x50, 0x7E, 0xCC, 0xCC,
        ]);
        assert_eq!(generated_stub(&b, 40), Some("[stub] DictionaryLookupHelper"));
        assert_eq!(generated_stub(&b, 32), Some("[stub] DictionaryLookupHelper"));
        assert_eq!(generated_stub(&b, 56), Some("[stub] DictionaryLookupHelper"));
        b[28..31].copy_from_slice(&[0x55, 0x55, 0x55]);
        b[32..35].copy_from_slice(&[0x55, 0x55, 0x55]);
        b[36..39].copy_from_slice(&[0x55, 0x55, 0x55]);
        assert_eq!(generated_stub(&b, 40), None, "no loads from rdi before it");
        // .NET 8 dynamic helpers after int3 padding: mov rdi, imm64; jmp — and mov rsi, rdi;
        // mov rdi, imm64; jmp.
        let mut b = vec![0xCCu8; 8];
        b.extend_from_slice(&[0x48, 0xBF, 0xE8, 0x80, 0x29, 0x0C, 0xF4, 0x7F, 0, 0, 0xE9, 0x79, 0x3F, 0x52, 0x7E, 0xCC]);
        b.extend_from_slice(&[0x48, 0x8B, 0xF7, 0x48, 0xBF, 0xC0, 0x8F, 0x0F, 0x0C, 0xF4, 0x7F, 0, 0, 0xE9, 0x7E, 0xC3, 0, 0, 0xCC]);
        assert_eq!(generated_stub(&b, 8), Some("[stub] DynamicHelper"));
        assert_eq!(generated_stub(&b, 18), Some("[stub] DynamicHelper"));
        assert_eq!(generated_stub(&b, 24), Some("[stub] DynamicHelper"));
        assert_eq!(generated_stub(&b, 27), Some("[stub] DynamicHelper"));
        assert_eq!(generated_stub(&b, 23), None, "the padding between them");
    }
}
