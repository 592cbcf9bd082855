//! Runtime code in the JIT region that no perf map or method event names: CoreCLR (.NET 7+,
//! W^X on) copies its patched write-barrier block (`JIT_PatchedCodeStart`..`Last`: the checked
//! and unchecked write barriers) into the first executable page of its `memfd:doublemapper`
//! at start-up, before any perf map can be switched on, and every reference store in managed
//! code calls it. Recognised by place (the double mapper's page at file offset 0) and content
//! (`ret` — the empty `JIT_PatchedCodeStart` — then a barrier's `mov [rdi], rsi`).
use std::{fs::File, os::unix::fs::FileExt};

use clrprobe_symbolizer::{Backing, Mapping};

/// Bytes of the block read to recognise it (it is about 0x200 long).
const BLOCK: usize = 0x200;

/// Precode stubs are laid out in 24-byte slots on interleaved code pages (4 KiB here), their
/// data on the page after.
const PRECODE_SLOT: u64 = 24;
const PAGE: u64 = 4096;

/// The name of runtime code at `addr` in `m`: the write-barrier block in the double mapper's
/// first page (read from the live process; an exited one is judged by place), or a precode
/// stub recognised by its instructions (live process only).
pub fn name(pid: u32, m: &Mapping, addr: u64) -> Option<&'static str> {
    let is_doublemapper = matches!(&m.backing, Backing::Memfd { name } if name.starts_with("doublemapper"));
    if !is_doublemapper || !m.executable || addr < m.start {
        return None;
    }
    if m.offset != 0 || addr - m.start >= BLOCK as u64 {
        let page = addr & !(PAGE - 1);
        let slot = page + (addr - page) / PRECODE_SLOT * PRECODE_SLOT;
        let mut b = [0u8; 16];
        File::open(format!("/proc/{pid}/mem")).and_then(|f| f.read_exact_at(&mut b, slot)).ok()?;
        return precode(&b);
    }
    let off = (addr - m.start) as usize;
    let mut b = [0u8; BLOCK];
    let read = File::open(format!("/proc/{pid}/mem")).and_then(|f| f.read_at(&mut b, m.start)).unwrap_or(0);
    if read < BLOCK {
        // Gone: the page at offset 0 has held this block in every CoreCLR that has a double mapper.
        return Some(if off == 0 { "[stub] JIT_PatchedCodeStart" } else { "[stub] JIT_WriteBarrier" });
    }
    name_in_block(&b, off)
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
}
