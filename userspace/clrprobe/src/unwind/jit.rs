//! Unwinding one frame of JIT code (code outside any ELF file: CoreCLR's
//! `memfd:doublemapper` heap, anonymous executable memory), where there are no unwind tables
//! clrprobe can read.
//!
//! The JIT gives most methods an RBP frame, but not all (small methods that only call one
//! other method, for example): following RBP from such a method skips its caller. So before
//! taking the frame-pointer rule, the words between SP and RBP are scanned for a return
//! address — a value pointing into executable memory right after a call instruction. A
//! method without a frame keeps its return address there (after its pushes and locals); a
//! method with a frame keeps only locals there, which rarely hold such values.

/// How far above SP a return address is looked for when RBP does not bound the frame.
pub const SCAN_BYTES: u64 = 512;
/// Frames with RBP further than this above SP are not scanned up to RBP, only SCAN_BYTES.
pub const MAX_FRAME: u64 = 4096;

/// Is `before` (the 8 bytes preceding an address) the end of a call instruction? Knows
/// `call rel32` and `call r/m64` (opcode FF /2, with an optional REX prefix, any ModRM/SIB
/// and displacement form).
pub fn ends_with_call(before: &[u8; 8]) -> bool {
    if before[3] == 0xE8 {
        return true;
    }
    for len in 2..=7usize {
        let mut i = 8 - len;
        let mut prefix = 0;
        if (0x40..=0x4F).contains(&before[i]) {
            i += 1;
            prefix = 1;
        }
        if i + 1 >= 8 || before[i] != 0xFF {
            continue;
        }
        let modrm = before[i + 1];
        if (modrm >> 3) & 7 != 2 {
            continue;
        }
        let md = modrm >> 6;
        let rm = modrm & 7;
        let mut n = 2;
        if md != 3 && rm == 4 {
            // SIB byte; base 5 with mod 0 means disp32.
            let Some(&sib) = before.get(i + 2) else { continue };
            n += 1;
            if md == 0 && sib & 7 == 5 {
                n += 4;
            }
        }
        n += match (md, rm) {
            (0, 5) => 4,
            (1, _) => 1,
            (2, _) => 4,
            _ => 0,
        };
        if prefix + n == len {
            return true;
        }
    }
    false
}

/// The result of unwinding one JIT frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JitStep {
    pub return_address: u64,
    pub sp: u64,
    pub bp: u64,
    /// The return address came from the scan, not from RBP.
    pub scanned: bool,
}

/// Unwinds one JIT frame from `sp`/`bp`. `read` reads a stack word; `is_return_address`
/// says whether a value is a return address in executable memory. `at_ret`: the frame's ip
/// is a `ret` instruction (leaf frames only).
pub fn step(
    sp: u64,
    bp: u64,
    at_ret: bool,
    read: &mut dyn FnMut(u64) -> Option<u64>,
    is_return_address: &mut dyn FnMut(u64) -> bool,
) -> Option<JitStep> {
    if at_ret {
        let ra = read(sp)?;
        return Some(JitStep { return_address: ra, sp: sp + 8, bp, scanned: true });
    }
    let limit = if bp > sp && bp - sp <= MAX_FRAME { bp } else { sp + SCAN_BYTES };
    let mut s = sp;
    while s < limit {
        let Some(v) = read(s) else { break };
        if is_return_address(v) {
            return Some(JitStep { return_address: v, sp: s + 8, bp, scanned: true });
        }
        s += 8;
    }
    if bp <= sp || bp == 0 {
        return None;
    }
    let ra = read(bp.checked_add(8)?)?;
    let next_bp = read(bp)?;
    Some(JitStep { return_address: ra, sp: bp + 16, bp: next_bp, scanned: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tail(bytes: &[u8]) -> [u8; 8] {
        let mut b = [0x90u8; 8];
        b[8 - bytes.len()..].copy_from_slice(bytes);
        b
    }

    #[test]
    fn recognises_calls() {
        assert!(ends_with_call(&tail(&[0xE8, 1, 2, 3, 4])));
        assert!(ends_with_call(&tail(&[0xFF, 0xD0]))); // call rax
        assert!(ends_with_call(&tail(&[0x41, 0xFF, 0xD3]))); // call r11
        assert!(ends_with_call(&tail(&[0x41, 0xFF, 0x13]))); // call [r11]
        assert!(ends_with_call(&tail(&[0xFF, 0x15, 1, 2, 3, 4]))); // call [rip+x]
        assert!(ends_with_call(&tail(&[0xFF, 0x50, 0x20]))); // call [rax+0x20]
        assert!(ends_with_call(&tail(&[0xFF, 0x54, 0x24, 0x08]))); // call [rsp+8]
        assert!(!ends_with_call(&tail(&[0x48, 0x89, 0xC3]))); // mov rbx, rax
        assert!(!ends_with_call(&tail(&[0xFF, 0xE0]))); // jmp rax
        assert!(!ends_with_call(&[0; 8]));
    }

    #[test]
    fn frameless_method_keeps_its_caller() {
        // sp: [pad][ra_main]  bp points far above at an older frame.
        let words = [(0x1000u64, 0u64), (0x1008, 0xAAAA), (0x2000, 0x3000), (0x2008, 0xBBBB)];
        let mut read = |a: u64| words.iter().find(|w| w.0 == a).map(|w| w.1).or(Some(0));
        let mut is_ra = |v: u64| v == 0xAAAA || v == 0xBBBB;
        let s = step(0x1000, 0x2000, false, &mut read, &mut is_ra).unwrap();
        assert_eq!(s, JitStep { return_address: 0xAAAA, sp: 0x1010, bp: 0x2000, scanned: true });
        // From there, nothing in [0x1010, 0x2000) is a return address: the RBP rule.
        let s = step(0x1010, 0x2000, false, &mut read, &mut is_ra).unwrap();
        assert_eq!(s, JitStep { return_address: 0xBBBB, sp: 0x2010, bp: 0x3000, scanned: false });
    }
}
