//! Bounds-checked little-endian reads over a byte slice.
use crate::FormatError;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Bytes<'a> {
    pub data: &'a [u8],
    pub what: &'static str,
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8], what: &'static str) -> Self {
        Bytes { data, what }
    }

    pub fn slice(&self, offset: u64, len: u64) -> Result<&'a [u8], FormatError> {
        let end = offset.checked_add(len);
        match end {
            Some(end) if end <= self.data.len() as u64 => Ok(&self.data[offset as usize..end as usize]),
            _ => Err(FormatError::Truncated { what: self.what, offset, needed: len, len: self.data.len() as u64 }),
        }
    }

    pub fn sub(&self, offset: u64, len: u64, what: &'static str) -> Result<Bytes<'a>, FormatError> {
        Ok(Bytes { data: self.slice(offset, len)?, what })
    }

    pub fn u8(&self, offset: u64) -> Result<u8, FormatError> {
        Ok(self.slice(offset, 1)?[0])
    }

    pub fn u16(&self, offset: u64) -> Result<u16, FormatError> {
        let b = self.slice(offset, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u32(&self, offset: u64) -> Result<u32, FormatError> {
        let b = self.slice(offset, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&self, offset: u64) -> Result<u64, FormatError> {
        let b = self.slice(offset, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// A 2- or 4-byte index (ECMA-335 heap and table indexes).
    pub fn index(&self, offset: u64, wide: bool) -> Result<u32, FormatError> {
        if wide { self.u32(offset) } else { self.u16(offset).map(u32::from) }
    }

    /// NUL-terminated string at `offset` (lossy UTF-8).
    pub fn cstr(&self, offset: u64) -> Result<&'a [u8], FormatError> {
        let rest = self.slice(offset, (self.data.len() as u64).saturating_sub(offset))?;
        match memchr::memchr(0, rest) {
            Some(n) => Ok(&rest[..n]),
            None => Err(FormatError::invalid(self.what, format!("string at {offset:#x} has no terminating NUL"))),
        }
    }
}
