//! Exception events: ExceptionThrown_V1 (id 80) and the ExceptionHandling template of
//! ExceptionCatchStart/FinallyStart/FilterStart (ids 250/252/254). The Stop events carry no
//! payload.

use crate::error::DecodeError;
use crate::reader::Cursor;
use crate::utf16::Utf16Str;

/// ExceptionThrown flags bits (ExceptionThrownFlagsMap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExceptionFlags(pub u16);

impl ExceptionFlags {
    pub const HAS_INNER_EXCEPTION: u16 = 0x1;
    pub const NESTED: u16 = 0x2;
    pub const RETHROWN: u16 = 0x4;
    pub const CORRUPTED_STATE: u16 = 0x8;
    pub const CLS_COMPLIANT: u16 = 0x10;

    pub fn has_inner_exception(self) -> bool {
        self.0 & Self::HAS_INNER_EXCEPTION != 0
    }
    pub fn nested(self) -> bool {
        self.0 & Self::NESTED != 0
    }
    pub fn rethrown(self) -> bool {
        self.0 & Self::RETHROWN != 0
    }
    pub fn corrupted_state(self) -> bool {
        self.0 & Self::CORRUPTED_STATE != 0
    }
    pub fn cls_compliant(self) -> bool {
        self.0 & Self::CLS_COMPLIANT != 0
    }
}

/// ExceptionThrown_V1.
#[derive(Debug, Clone, PartialEq)]
pub struct ExceptionThrown<'a> {
    /// Full type name, e.g. "System.InvalidOperationException".
    pub exception_type: Utf16Str<'a>,
    pub message: Utf16Str<'a>,
    /// Instruction pointer of the throw.
    pub eip: u64,
    pub hresult: u32,
    pub flags: ExceptionFlags,
    pub clr_instance_id: u16,
}

impl<'a> ExceptionThrown<'a> {
    pub fn decode(payload: &'a [u8], pointer_size: u8) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, "ExceptionThrown_V1")?;
        Ok(ExceptionThrown {
            exception_type: c.utf16z("ExceptionType")?,
            message: c.utf16z("ExceptionMessage")?,
            eip: c.pointer("ExceptionEIP")?,
            hresult: c.u32("ExceptionHRESULT")?,
            flags: ExceptionFlags(c.u16("ExceptionFlags")?),
            clr_instance_id: c.u16("ClrInstanceID")?,
        })
    }
}

/// The ExceptionHandling template: entering a catch, finally or filter clause.
#[derive(Debug, Clone, PartialEq)]
pub struct ExceptionHandling<'a> {
    /// Entry address of the handler (UInt64 in the manifest, not pointer-sized).
    pub entry_eip: u64,
    /// MethodDesc of the method containing the handler.
    pub method_id: u64,
    pub method_name: Utf16Str<'a>,
    pub clr_instance_id: u16,
}

impl<'a> ExceptionHandling<'a> {
    pub fn decode(
        payload: &'a [u8],
        pointer_size: u8,
        name: &'static str,
    ) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, name)?;
        Ok(ExceptionHandling {
            entry_eip: c.u64("EntryEIP")?,
            method_id: c.u64("MethodID")?,
            method_name: c.utf16z("MethodName")?,
            clr_instance_id: c.u16("ClrInstanceID")?,
        })
    }
}
