//! Method load/unload events (runtime ids 141–144) and their rundown counterparts
//! (MethodDCStart/DCEnd(Verbose), rundown ids 141–144). All share one layout:
//! MethodID, ModuleID, MethodStartAddress (u64 each, even on 32-bit), MethodSize,
//! MethodToken, MethodFlags (u32), [verbose: Namespace, Name, Signature as UTF-16z],
//! [V1+: ClrInstanceID u16], [V2+: ReJITID u64].

use crate::error::DecodeError;
use crate::reader::Cursor;
use crate::utf16::Utf16Str;

/// MethodFlagsMap bits plus the optimization tier in bits 7..=9.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MethodFlags(pub u32);

impl MethodFlags {
    pub const DYNAMIC: u32 = 0x1;
    pub const GENERIC: u32 = 0x2;
    pub const HAS_SHARED_GENERIC_CODE: u32 = 0x4;
    pub const JITTED: u32 = 0x8;
    pub const JIT_HELPER: u32 = 0x10;
    pub const PROFILER_REJECTED_PRECOMPILED_CODE: u32 = 0x20;
    pub const READY_TO_RUN_REJECTED_PRECOMPILED_CODE: u32 = 0x40;

    pub fn is_dynamic(self) -> bool {
        self.0 & Self::DYNAMIC != 0
    }
    pub fn is_generic(self) -> bool {
        self.0 & Self::GENERIC != 0
    }
    pub fn has_shared_generic_code(self) -> bool {
        self.0 & Self::HAS_SHARED_GENERIC_CODE != 0
    }
    pub fn is_jitted(self) -> bool {
        self.0 & Self::JITTED != 0
    }
    pub fn is_jit_helper(self) -> bool {
        self.0 & Self::JIT_HELPER != 0
    }
    /// Raw optimization tier, `(flags >> 7) & 7`.
    pub fn optimization_tier(self) -> u8 {
        ((self.0 >> 7) & 0x7) as u8
    }
}

/// One method-load-shaped event. Names are `None` for the non-verbose events.
#[derive(Debug, Clone, PartialEq)]
pub struct MethodInfo<'a> {
    /// MethodDesc*.
    pub method_id: u64,
    /// Module*.
    pub module_id: u64,
    pub start_address: u64,
    pub size: u32,
    pub token: u32,
    pub flags: MethodFlags,
    pub namespace: Option<Utf16Str<'a>>,
    pub name: Option<Utf16Str<'a>>,
    pub signature: Option<Utf16Str<'a>>,
    /// V1+.
    pub clr_instance_id: Option<u16>,
    /// V2+.
    pub rejit_id: Option<u64>,
}

impl<'a> MethodInfo<'a> {
    /// Decodes the verbose (with names) or plain layout of the given version.
    pub fn decode(
        payload: &'a [u8],
        version: u8,
        pointer_size: u8,
        verbose: bool,
        name: &'static str,
    ) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, name)?;
        let method_id = c.u64("MethodID")?;
        let module_id = c.u64("ModuleID")?;
        let start_address = c.u64("MethodStartAddress")?;
        let size = c.u32("MethodSize")?;
        let token = c.u32("MethodToken")?;
        let flags = MethodFlags(c.u32("MethodFlags")?);
        let (namespace, mname, signature) = if verbose {
            (
                Some(c.utf16z("MethodNamespace")?),
                Some(c.utf16z("MethodName")?),
                Some(c.utf16z("MethodSignature")?),
            )
        } else {
            (None, None, None)
        };
        let clr_instance_id = if version >= 1 {
            Some(c.u16("ClrInstanceID")?)
        } else {
            None
        };
        let rejit_id = if version >= 2 {
            Some(c.u64("ReJITID")?)
        } else {
            None
        };
        Ok(MethodInfo {
            method_id,
            module_id,
            start_address,
            size,
            token,
            flags,
            namespace,
            name: mname,
            signature,
            clr_instance_id,
            rejit_id,
        })
    }

    /// Half-open code range `[start, start + size)`.
    pub fn code_range(&self) -> std::ops::Range<u64> {
        self.start_address..self.start_address.saturating_add(u64::from(self.size))
    }

    /// "Namespace.Name" (or just the name when the namespace is empty), decoded lossily.
    pub fn full_name(&self) -> String {
        let ns = self
            .namespace
            .map(|s| s.to_string_lossy())
            .unwrap_or_default();
        let n = self.name.map(|s| s.to_string_lossy()).unwrap_or_default();
        if ns.is_empty() {
            n
        } else {
            format!("{ns}.{n}")
        }
    }
}
