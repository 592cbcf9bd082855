//! What a symbolized address becomes.

/// Where a frame's code comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// Kernel text (from /proc/kallsyms).
    Kernel,
    /// Native code of an ELF module (libcoreclr.so, libc, the host).
    Native,
    /// Code the JIT produced, named by the runtime's perf map.
    Jit,
    /// Precompiled code of a ReadyToRun image (or a `[PreJIT]` perf-map record).
    ReadyToRun,
    /// Nothing names it; `name` is `module+0xoffset` or the bare address.
    Unknown,
}

/// One symbolized address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Symbol name (`Namespace.Type::Method` for managed code) or `module+0xoffset` if unknown.
    pub name: String,
    /// Module file name (e.g. `libcoreclr.so`, `System.Private.CoreLib.dll`), if any.
    pub module: Option<String>,
    pub kind: FrameKind,
    /// JIT tier (`OptimizedTier1`, `Tier0`, `PreJIT`, ...), from the perf map.
    pub tier: Option<String>,
    /// Offset of the address inside the symbol, or inside the module when unknown.
    pub offset: u64,
}

impl Frame {
    /// A frame nothing could name: `module+0xoffset` or `0xaddress`.
    pub fn unknown(module: Option<String>, offset: u64, addr: u64) -> Self {
        let name = match &module {
            Some(m) => format!("{m}+{offset:#x}"),
            None => format!("{addr:#x}"),
        };
        let offset = if module.is_some() { offset } else { addr };
        Frame { name, module, kind: FrameKind::Unknown, tier: None, offset }
    }
}
