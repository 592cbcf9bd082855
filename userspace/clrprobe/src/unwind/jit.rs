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

/// Bytes of a method's start read for prologue analysis.
pub const PROLOGUE_BYTES: usize = 64;

/// What a JIT method's prologue did before a given code offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Prologue {
    /// Registers pushed (8 bytes each).
    pub pushes: u64,
    /// Push index of RBP when it was pushed.
    pub rbp_push: Option<u64>,
    /// Bytes subtracted from RSP.
    pub sub: u64,
    /// RBP was made the frame pointer (`mov rbp, rsp` or `lea rbp, [rsp+d]`).
    pub frame: bool,
    /// An OSR method: it runs on top of its Tier0 frame (RBP holds the Tier0 frame pointer on
    /// entry) and its return address slot is not a return address.
    pub osr: bool,
}

/// Simulates the x64 prologue at the start of `code` (the method's first bytes) up to offset
/// `upto`: pushes, `sub rsp, imm` and establishing RBP, stopping at the first other
/// instruction (the body). The JIT emits exactly these forms.
pub fn analyze_prologue(code: &[u8], upto: usize) -> Prologue {
    let mut p = Prologue::default();
    let mut i = 0;
    let b = |k: usize| code.get(k).copied();
    while i < upto.min(code.len()) {
        let len = match (b(i), b(i + 1), b(i + 2), b(i + 3)) {
            (Some(0x55), ..) => {
                p.rbp_push = Some(p.pushes);
                p.pushes += 1;
                1
            }
            (Some(0x50..=0x57), ..) => {
                p.pushes += 1;
                1
            }
            (Some(0x41), Some(0x50..=0x57), ..) => {
                p.pushes += 1;
                2
            }
            (Some(0x48), Some(0x83), Some(0xEC), Some(imm)) => {
                p.sub += imm as u64;
                4
            }
            (Some(0x48), Some(0x81), Some(0xEC), _) => {
                let Some(imm) = code.get(i + 3..i + 7) else { break };
                p.sub += u32::from_le_bytes(imm.try_into().unwrap_or_default()) as u64;
                7
            }
            // mov rax, [rbp]: an OSR method's first instruction (it pushes the Tier0 frame's
            // saved RBP next, as its own).
            (Some(0x48), Some(0x8B), Some(0x45), Some(0x00)) if i == 0 => 4,
            (Some(0x48), Some(0x8B), Some(0xEC), _) | (Some(0x48), Some(0x89), Some(0xE5), _) => {
                p.frame = true;
                3
            }
            (Some(0x48), Some(0x8D), Some(0x6C), Some(0x24)) => {
                p.frame = true;
                5
            }
            (Some(0x48), Some(0x8D), Some(0xAC), Some(0x24)) => {
                p.frame = true;
                8
            }
            _ => break,
        };
        if i + len > upto {
            break;
        }
        i += len;
    }
    p
}

/// Unwinds one frame of a JIT method whose prologue is known: RBP frame once established,
/// else the return address above the pushes and the stack allocation.
pub fn step_with_prologue(sp: u64, bp: u64, p: Prologue, read: &mut dyn FnMut(u64) -> Option<u64>) -> Option<JitStep> {
    if p.frame {
        if bp <= sp {
            return None;
        }
        let ra = read(bp.checked_add(8)?)?;
        let next_bp = read(bp)?;
        return Some(JitStep { return_address: ra, sp: bp + 16, bp: next_bp, scanned: false });
    }
    let cfa = sp.checked_add(p.sub + 8 * p.pushes + 8)?;
    let ra = read(cfa - 8)?;
    let next_bp = match p.rbp_push {
        Some(j) => read(cfa - 16 - 8 * j)?,
        None => bp,
    };
    Some(JitStep { return_address: ra, sp: cfa, bp: next_bp, scanned: false })
}

/// Unwinds an OSR method's frame together with the Tier0 frame under it, as the runtime's own
/// stack walk does. An OSR method runs on top of its Tier0 method's frame: its return address
/// slot holds a return address into the Tier0 method (the patchpoint call), and its RBP chain
/// skips the Tier0 frame. So both frames are unwound from SP with their prologues: `osr` the
/// OSR method's, `tier0` the Tier0 method's (the method holding the OSR frame's return
/// address). Returns the OSR frame's return address slot value too (the Tier0 code address).
pub fn step_osr(
    sp: u64,
    bp: u64,
    osr: Prologue,
    tier0: &mut dyn FnMut(u64) -> Option<Prologue>,
    read: &mut dyn FnMut(u64) -> Option<u64>,
) -> Option<(JitStep, u64)> {
    let own = step_with_prologue(sp, bp, Prologue { frame: false, ..osr }, read)?;
    let t0 = tier0(own.return_address)?;
    let step = step_with_prologue(own.sp, own.bp, Prologue { frame: false, ..t0 }, read)?;
    Some((step, own.return_address))
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
    fn prologues() {
        // push rbp; push rbx; sub rsp, 0x18; lea rbp, [rsp+0x20]; (body) mov eax, 1
        let framed = [0x55, 0x53, 0x48, 0x83, 0xEC, 0x18, 0x48, 0x8D, 0x6C, 0x24, 0x20, 0xB8, 1, 0, 0, 0];
        let p = analyze_prologue(&framed, framed.len());
        assert_eq!(p, Prologue { pushes: 2, rbp_push: Some(0), sub: 0x18, frame: true, osr: false });
        // Stopped inside the prologue (before the lea): no frame yet.
        let p = analyze_prologue(&framed, 6);
        assert_eq!(p, Prologue { pushes: 2, rbp_push: Some(0), sub: 0x18, frame: false, osr: false });
        // push rax (alignment) then a call: frameless.
        let frameless = [0x50, 0xE8, 0, 0, 0, 0];
        let p = analyze_prologue(&frameless, 6);
        assert_eq!(p, Prologue { pushes: 1, rbp_push: None, sub: 0, frame: false, osr: false });
        let words = [(0x1000u64, 0x77u64), (0x1008, 0xAAAA)];
        let mut read = |a: u64| words.iter().find(|w| w.0 == a).map(|w| w.1);
        let s = step_with_prologue(0x1000, 0x5000, p, &mut read).unwrap();
        assert_eq!(s, JitStep { return_address: 0xAAAA, sp: 0x1010, bp: 0x5000, scanned: false });
        // push r15; sub rsp, 0x100 (imm32)
        let big = [0x41, 0x57, 0x48, 0x81, 0xEC, 0, 1, 0, 0, 0x90];
        assert_eq!(analyze_prologue(&big, 10), Prologue { pushes: 1, rbp_push: None, sub: 0x100, frame: false, osr: false });
        // An OSR method as the JIT emits it: mov rax,[rbp]; push rax; sub rsp,0x80; movs...
        let osr_code = [0x48, 0x8B, 0x45, 0x00, 0x50, 0x48, 0x81, 0xEC, 0x80, 0, 0, 0, 0x4C, 0x89, 0xBC, 0x24];
        let osr = Prologue { osr: true, ..analyze_prologue(&osr_code, 16) };
        assert_eq!(osr, Prologue { pushes: 1, rbp_push: None, sub: 0x80, frame: false, osr: true });
        // Its frame: 0x80 bytes, the pushed word, then the slot holding a Tier0 code address
        // (0x7000) at 0x1088; the Tier0 frame (push rbp; sub rsp,0x50) above: saved RBP at
        // 0x10e0, return address into the caller at 0x10e8.
        let words = [(0x1088u64, 0x7000u64), (0x10e0, 0x9000), (0x10e8, 0xCAFE)];
        let mut read = |a: u64| words.iter().find(|w| w.0 == a).map(|w| w.1);
        let t0 = Prologue { pushes: 1, rbp_push: Some(0), sub: 0x50, frame: true, osr: false };
        let mut tier0 = |a: u64| (a == 0x7000).then_some(t0);
        let (s, pseudo) = step_osr(0x1000, 0x5555, osr, &mut tier0, &mut read).unwrap();
        assert_eq!(pseudo, 0x7000);
        assert_eq!(s, JitStep { return_address: 0xCAFE, sp: 0x10f0, bp: 0x9000, scanned: false });
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
