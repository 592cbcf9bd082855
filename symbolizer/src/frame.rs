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

/// Splits a perf-map method name like `instance void [System.Private.CoreLib]
/// System.String::Concat(string,string)` into the assembly (`System.Private.CoreLib`) and
/// `System.String::Concat`, the form ReadyToRun frames use. Names that do not look like a
/// managed method (stubs) come back whole.
pub fn split_managed_name(full: &str) -> (Option<String>, String) {
    let Some(sep) = full.find("::") else { return (None, full.to_string()) };
    let (head, tail) = full.split_at(sep);
    let method_end = tail.find('(').unwrap_or(tail.len());
    let method = &tail[..method_end];
    // Assembly: the last `[Name] ` in the head; the type follows it.
    let (module, ty) = match head.rfind("] ") {
        Some(close) => match head[..close].rfind('[') {
            Some(open) => (Some(head[open + 1..close].to_string()), &head[close + 2..]),
            None => (None, head),
        },
        None => (None, head.rsplit(' ').next().unwrap_or(head)),
    };
    if ty.is_empty() {
        return (None, full.to_string());
    }
    (module, format!("{ty}{method}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_perf_map_names() {
        assert_eq!(split_managed_name("void [Cpu] Cpu::HotA()"), (Some("Cpu".into()), "Cpu::HotA".into()));
        assert_eq!(
            split_managed_name("instance void [System.Private.CoreLib] System.Collections.Generic.List`1[System.__Canon]::Add(!0)"),
            (Some("System.Private.CoreLib".into()), "System.Collections.Generic.List`1[System.__Canon]::Add".into())
        );
        assert_eq!(
            split_managed_name("string [System.Private.CoreLib] System.String::Concat(string,string)"),
            (Some("System.Private.CoreLib".into()), "System.String::Concat".into())
        );
        assert_eq!(split_managed_name("stub<1> AllocateTemporaryEntryPoints<PRECODE_STUB>").1, "stub<1> AllocateTemporaryEntryPoints<PRECODE_STUB>");
        assert_eq!(split_managed_name("[x] ::M()").1, "[x] ::M()");
    }
}
