//! Module load/unload events (runtime ids 152/153) and their rundown counterparts
//! (ModuleDCStart/DCEnd, rundown ids 153/154), versions 0–2.

use crate::error::DecodeError;
use crate::guid::Guid;
use crate::reader::Cursor;
use crate::utf16::Utf16Str;

/// ModuleFlagsMap bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ModuleFlags(pub u32);

impl ModuleFlags {
    pub const DOMAIN_NEUTRAL: u32 = 0x1;
    pub const NATIVE: u32 = 0x2;
    pub const DYNAMIC: u32 = 0x4;
    pub const MANIFEST: u32 = 0x8;
    pub const IBC_OPTIMIZED: u32 = 0x10;
    pub const READY_TO_RUN: u32 = 0x20;
    pub const PARTIAL_READY_TO_RUN: u32 = 0x40;

    pub fn is_dynamic(self) -> bool {
        self.0 & Self::DYNAMIC != 0
    }
    pub fn is_ready_to_run(self) -> bool {
        self.0 & Self::READY_TO_RUN != 0
    }
    pub fn is_native(self) -> bool {
        self.0 & Self::NATIVE != 0
    }
}

/// A PDB reference (V2+): CodeView signature, age and build path.
#[derive(Debug, Clone, PartialEq)]
pub struct PdbInfo<'a> {
    pub signature: Guid,
    pub age: u32,
    pub build_path: Utf16Str<'a>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModuleInfo<'a> {
    /// Module*.
    pub module_id: u64,
    pub assembly_id: u64,
    pub flags: ModuleFlags,
    /// Path of the IL image (empty for dynamic modules).
    pub il_path: Utf16Str<'a>,
    /// Path of the native image (NGen), usually empty on .NET Core.
    pub native_path: Utf16Str<'a>,
    /// V1+.
    pub clr_instance_id: Option<u16>,
    /// V2+: the managed (IL) PDB.
    pub managed_pdb: Option<PdbInfo<'a>>,
    /// V2+: the native-image / R2R PDB.
    pub native_pdb: Option<PdbInfo<'a>>,
}

impl<'a> ModuleInfo<'a> {
    pub fn decode(
        payload: &'a [u8],
        version: u8,
        pointer_size: u8,
        name: &'static str,
    ) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, name)?;
        let module_id = c.u64("ModuleID")?;
        let assembly_id = c.u64("AssemblyID")?;
        let flags = ModuleFlags(c.u32("ModuleFlags")?);
        let _reserved = c.u32("Reserved1")?;
        let il_path = c.utf16z("ModuleILPath")?;
        let native_path = c.utf16z("ModuleNativePath")?;
        let clr_instance_id = if version >= 1 {
            Some(c.u16("ClrInstanceID")?)
        } else {
            None
        };
        let (managed_pdb, native_pdb) = if version >= 2 {
            let managed = PdbInfo {
                signature: c.guid("ManagedPdbSignature")?,
                age: c.u32("ManagedPdbAge")?,
                build_path: c.utf16z("ManagedPdbBuildPath")?,
            };
            let native = PdbInfo {
                signature: c.guid("NativePdbSignature")?,
                age: c.u32("NativePdbAge")?,
                build_path: c.utf16z("NativePdbBuildPath")?,
            };
            (Some(managed), Some(native))
        } else {
            (None, None)
        };
        Ok(ModuleInfo {
            module_id,
            assembly_id,
            flags,
            il_path,
            native_path,
            clr_instance_id,
            managed_pdb,
            native_pdb,
        })
    }
}
