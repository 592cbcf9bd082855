//! Just enough of ECMA-335 / ReadyToRun signature decoding to read the method token of an
//! instance-method entry and step over the signature to the entry-point data behind it.
use crate::FormatError;
use crate::reader::Bytes;

const SIG_UPDATE_CONTEXT: u32 = 0x80;
const SIG_OWNER_TYPE: u32 = 0x40;
const SIG_CONSTRAINED: u32 = 0x20;
const SIG_MEMBER_REF_TOKEN: u32 = 0x10;
const SIG_SLOT_INSTEAD_OF_TOKEN: u32 = 0x08;
const SIG_METHOD_INSTANTIATION: u32 = 0x04;

/// What a method signature names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodRef {
    /// MethodDef RID, or MemberRef RID if `member_ref`.
    pub rid: u32,
    pub member_ref: bool,
    /// TypeDef RID of the owner type, when the signature carries one that is a TypeDef.
    pub owner_typedef: Option<u32>,
    /// The token belongs to another module of the version bubble.
    pub other_module: bool,
}

pub(crate) struct SigReader<'a> {
    b: Bytes<'a>,
    pub pos: u64,
    depth: u32,
}

impl<'a> SigReader<'a> {
    pub fn new(b: Bytes<'a>, pos: u64) -> Self {
        SigReader { b, pos, depth: 0 }
    }

    /// ECMA-335 II.23.2 compressed unsigned integer.
    fn uint(&mut self) -> Result<u32, FormatError> {
        let b0 = self.b.u8(self.pos)? as u32;
        let (v, n) = if b0 & 0x80 == 0 {
            (b0, 1)
        } else if b0 & 0xC0 == 0x80 {
            ((b0 & 0x3F) << 8 | self.b.u8(self.pos + 1)? as u32, 2)
        } else if b0 & 0xE0 == 0xC0 {
            let b = self.b.slice(self.pos, 4)?;
            ((b0 & 0x1F) << 24 | (b[1] as u32) << 16 | (b[2] as u32) << 8 | b[3] as u32, 4)
        } else {
            return Err(FormatError::invalid(self.b.what, format!("bad compressed integer {b0:#x} at {:#x}", self.pos)));
        };
        self.pos += n;
        Ok(v)
    }

    fn byte(&mut self) -> Result<u8, FormatError> {
        let v = self.b.u8(self.pos)?;
        self.pos += 1;
        Ok(v)
    }

    /// Reads a method signature (ZapSig method encoding).
    pub fn method(&mut self) -> Result<MethodRef, FormatError> {
        let flags = self.uint()?;
        let mut other_module = false;
        if flags & SIG_UPDATE_CONTEXT != 0 {
            let _module = self.uint()?;
            other_module = true;
        }
        let mut owner_typedef = None;
        if flags & SIG_OWNER_TYPE != 0 {
            owner_typedef = self.skip_type()?;
        }
        if flags & SIG_SLOT_INSTEAD_OF_TOKEN != 0 {
            return Err(FormatError::invalid(self.b.what, "method signature with a slot instead of a token"));
        }
        let rid = self.uint()?;
        if flags & SIG_METHOD_INSTANTIATION != 0 {
            let n = self.uint()?;
            for _ in 0..n {
                self.skip_type()?;
            }
        }
        if flags & SIG_CONSTRAINED != 0 {
            self.skip_type()?;
        }
        Ok(MethodRef { rid, member_ref: flags & SIG_MEMBER_REF_TOKEN != 0, owner_typedef, other_module })
    }

    /// Steps over one type; returns the TypeDef RID if the type is (an instantiation of) a TypeDef.
    pub fn skip_type(&mut self) -> Result<Option<u32>, FormatError> {
        self.depth += 1;
        if self.depth > 64 {
            return Err(FormatError::invalid(self.b.what, "type signature nests deeper than 64"));
        }
        let r = self.skip_type_inner();
        self.depth -= 1;
        r
    }

    fn typedef_of(coded: u32) -> Option<u32> {
        // TypeDefOrRefOrSpecEncoded: low 2 bits tag, 0 = TypeDef.
        (coded & 3 == 0).then_some(coded >> 2)
    }

    fn skip_type_inner(&mut self) -> Result<Option<u32>, FormatError> {
        let et = self.byte()?;
        Ok(match et {
            0x01..=0x0E | 0x16 | 0x18 | 0x19 | 0x1C | 0x3E | 0x41 => None,
            0x0F | 0x10 | 0x1D | 0x45 => {
                self.skip_type()?;
                None
            }
            0x11 | 0x12 => Self::typedef_of(self.uint()?),
            0x13 | 0x1E => {
                self.uint()?;
                None
            }
            0x14 => {
                self.skip_type()?;
                let _rank = self.uint()?;
                let nsizes = self.uint()?;
                for _ in 0..nsizes {
                    self.uint()?;
                }
                let nlo = self.uint()?;
                for _ in 0..nlo {
                    self.uint()?;
                }
                None
            }
            0x15 => {
                let t = self.skip_type()?;
                let n = self.uint()?;
                for _ in 0..n {
                    self.skip_type()?;
                }
                t
            }
            0x1B => {
                let _conv = self.byte()?;
                let n = self.uint()?;
                for _ in 0..=n {
                    self.skip_type()?;
                }
                None
            }
            0x1F | 0x20 => {
                self.uint()?;
                self.skip_type()?
            }
            // ELEMENT_TYPE_MODULE_ZAPSIG: module index, then a type of that module.
            0x3F => {
                self.uint()?;
                self.skip_type()?;
                None
            }
            // ELEMENT_TYPE_NATIVE_VALUETYPE_ZAPSIG
            0x3D => {
                self.skip_type()?;
                None
            }
            _ => return Err(FormatError::invalid(self.b.what, format!("unknown element type {et:#x} at {:#x}", self.pos - 1))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_instantiated_method_sig() {
        // flags = OwnerType|MethodInstantiation, owner = GENERICINST CLASS TypeDef#5 <int32>,
        // rid = 0x123 (2-byte compressed), 1 type arg: SZARRAY string; then trailing byte.
        let sig = [0x44, 0x15, 0x12, 5 << 2, 1, 0x08, 0x81, 0x23, 1, 0x1D, 0x0E, 0xAA];
        let mut r = SigReader::new(Bytes::new(&sig, "sig"), 0);
        let m = r.method().expect("decodes");
        assert_eq!(m, MethodRef { rid: 0x123, member_ref: false, owner_typedef: Some(5), other_module: false });
        assert_eq!(r.pos, 11);
        let truncated = [0x00, 0x99];
        assert!(SigReader::new(Bytes::new(&truncated, "sig"), 0).method().is_err(), "2-byte rid cut short");
        let deep = [0x0F; 200];
        let err = SigReader::new(Bytes::new(&deep, "sig"), 0).skip_type().expect_err("too deep");
        assert!(err.to_string().contains("deeper"), "{err}");
    }
}
