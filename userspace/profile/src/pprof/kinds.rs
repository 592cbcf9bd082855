//! Frame kinds carried in standard pprof fields only (no comments), so that a file rewritten
//! by `go tool pprof -proto` or merged by a backend still says which frames are JIT code,
//! ReadyToRun code, native code or the kernel:
//!
//! * a frame with a real mapping keeps it (`/usr/lib/.../libc.so.6`, `memfd:doublemapper`,
//!   `/.../System.Private.CoreLib.dll`); the reader tells the kind from its path;
//! * a frame without one gets a pseudo mapping named for its kind (`[jit]`,
//!   `[kernel.kallsyms]`, `[clrprobe]` for made-up frames, ...), start and limit 0;
//! * `Function.filename` is the frame's module (assembly or library), or the pseudo name when
//!   the frame has none;
//! * a frame nothing named is a `Location` without `Line`s (an address, as pprof writes
//!   unsymbolized code); the reader names it `module+0xOFFSET` from its mapping.

use crate::model::{Frame, FrameKind};

pub(crate) const JIT: &str = "[jit]";
pub(crate) const KERNEL: &str = "[kernel.kallsyms]";
pub(crate) const SYNTHETIC: &str = "[clrprobe]";
const INTERPRETED: &str = "[interpreted]";
const R2R: &str = "[r2r]";
const NATIVE: &str = "[native]";

/// The pseudo mapping of a frame without a real one (none for unknown frames).
pub(crate) fn pseudo_mapping(kind: FrameKind) -> Option<&'static str> {
    match kind {
        FrameKind::Kernel => Some(KERNEL),
        FrameKind::Native => Some(NATIVE),
        FrameKind::Jit => Some(JIT),
        FrameKind::ReadyToRun => Some(R2R),
        FrameKind::Interpreted => Some(INTERPRETED),
        FrameKind::Synthetic => Some(SYNTHETIC),
        FrameKind::Unknown => None,
    }
}

/// Is `name` one of the pseudo mapping names?
pub(crate) fn is_pseudo(name: &str) -> bool {
    FrameKind::ALL.into_iter().any(|k| pseudo_mapping(k) == Some(name))
}

/// `Function.filename` of a frame: its module, else its kind's pseudo name.
pub(crate) fn function_file(f: &Frame) -> &str {
    if !f.module.is_empty() {
        return &f.module;
    }
    pseudo_mapping(f.kind).unwrap_or("")
}

fn is_assembly(path: &str) -> bool {
    let p = path.to_ascii_lowercase();
    p.ends_with(".dll") || p.ends_with(".exe")
}

/// The kind of a frame from its mapping's path (empty when it has none) and its function's
/// file (empty when it has no function).
pub(crate) fn infer(mapping: &str, file: &str) -> FrameKind {
    for name in [mapping, file] {
        match name {
            JIT => return FrameKind::Jit,
            KERNEL | "[kernel]" | "[vmlinux]" => return FrameKind::Kernel,
            SYNTHETIC => return FrameKind::Synthetic,
            INTERPRETED => return FrameKind::Interpreted,
            R2R => return FrameKind::ReadyToRun,
            NATIVE => return FrameKind::Native,
            _ => {}
        }
    }
    if mapping.starts_with("memfd:") || mapping.starts_with("[anon") || mapping == "//anon" {
        return FrameKind::Jit;
    }
    if mapping.starts_with("[kernel") {
        return FrameKind::Kernel;
    }
    if is_assembly(mapping) || (mapping.is_empty() && is_assembly(file)) {
        return FrameKind::ReadyToRun;
    }
    if !mapping.is_empty() || !file.is_empty() {
        return FrameKind::Native;
    }
    FrameKind::Unknown
}

/// The name of a frame without a function: `module+0xOFFSET` inside a file or memfd
/// mapping, else the bare address.
pub(crate) fn unnamed_name(mapping: Option<(&str, u64, u64)>, address: u64) -> (String, String) {
    match mapping {
        Some((path, start, offset)) if !path.is_empty() && !path.starts_with('[') && address >= start => {
            let module = path.rsplit('/').next().unwrap_or(path).to_owned();
            (format!("{module}+{:#x}", address - start + offset), module)
        }
        _ => (format!("{address:#x}"), String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_standard_fields() {
        assert_eq!(infer("/usr/lib/x86_64-linux-gnu/libc.so.6", "libc.so.6"), FrameKind::Native);
        assert_eq!(infer("memfd:doublemapper", "Cpu"), FrameKind::Jit);
        assert_eq!(infer("/dotnet/shared/System.Private.CoreLib.dll", "System.Private.CoreLib.dll"), FrameKind::ReadyToRun);
        assert_eq!(infer("[kernel.kallsyms]", "[kernel]"), FrameKind::Kernel);
        assert_eq!(infer("[clrprobe]", "[clrprobe]"), FrameKind::Synthetic);
        assert_eq!(infer("", ""), FrameKind::Unknown);
        for k in FrameKind::ALL {
            if let Some(m) = pseudo_mapping(k) {
                assert_eq!(infer(m, ""), k);
            }
        }
        assert_eq!(unnamed_name(Some(("/lib/libcoreclr.so", 0x1000, 0x2000)), 0x1010).0, "libcoreclr.so+0x2010");
    }
}
