//! Payload primitives: little-endian integers and u32-length-prefixed, NUL-terminated UTF-16 strings.
use super::error::{DecodeError, EncodeError};

/// Builds a request payload.
#[derive(Debug, Default, Clone)]
pub struct PayloadWriter {
    buf: Vec<u8>,
}

impl PayloadWriter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }

    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(v as u8)
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// A count prefix for an `array<T>`.
    pub fn count(&mut self, what: &'static str, count: usize) -> Result<&mut Self, EncodeError> {
        let n = u32::try_from(count).map_err(|_| EncodeError::TooMany { what, count })?;
        Ok(self.u32(n))
    }

    /// `string`: u32 length in UTF-16 units including the NUL, the units, then `\0\0`.
    /// The empty string is written as length 0 (what the runtime reads as "no string").
    pub fn string(&mut self, s: &str) -> Result<&mut Self, EncodeError> {
        if s.is_empty() {
            return Ok(self.u32(0));
        }
        let units: Vec<u16> = s.encode_utf16().collect();
        let len = u32::try_from(units.len() + 1).map_err(|_| EncodeError::StringTooLong(units.len()))?;
        self.u32(len);
        for u in units {
            self.buf.extend_from_slice(&u.to_le_bytes());
        }
        self.buf.extend_from_slice(&[0, 0]);
        Ok(self)
    }

    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads a reply payload; every read checks bounds and names the field on failure.
#[derive(Debug, Clone)]
pub struct PayloadReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> PayloadReader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let available = self.remaining();
        if n > available {
            return Err(DecodeError::Truncated { what, needed: n, available });
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub fn guid(&mut self, what: &'static str) -> Result<[u8; 16], DecodeError> {
        self.array(what)
    }

    /// `string`: length 0 is the empty string; otherwise the last unit must be NUL.
    pub fn string(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let units = self.u32(what)?;
        if units == 0 {
            return Ok(String::new());
        }
        let nbytes = usize::try_from(units)
            .ok()
            .and_then(|u| u.checked_mul(2))
            .ok_or(DecodeError::LengthOverflow { what, units })?;
        let raw = self.take(nbytes, what)?;
        let mut chars: Vec<u16> = raw.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
        if chars.pop() != Some(0) {
            return Err(DecodeError::MissingNul { what });
        }
        String::from_utf16(&chars).map_err(|_| DecodeError::InvalidUtf16 { what })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_round_trip_and_layout() {
        let mut w = PayloadWriter::new();
        w.string("ab").unwrap().string("").unwrap().u64(7);
        let b = w.into_bytes();
        assert_eq!(&b[..10], &[3, 0, 0, 0, b'a', 0, b'b', 0, 0, 0]);
        assert_eq!(&b[10..14], &[0, 0, 0, 0]);
        let mut r = PayloadReader::new(&b);
        assert_eq!(r.string("a").unwrap(), "ab");
        assert_eq!(r.string("b").unwrap(), "");
        assert_eq!(r.u64("c").unwrap(), 7);
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn string_errors_are_typed() {
        // length says 3 units but only 2 bytes follow
        let mut r = PayloadReader::new(&[3, 0, 0, 0, b'a', 0]);
        assert_eq!(r.string("cmd"), Err(DecodeError::Truncated { what: "cmd", needed: 6, available: 2 }));
        // no NUL terminator
        let mut r = PayloadReader::new(&[1, 0, 0, 0, b'a', 0]);
        assert_eq!(r.string("cmd"), Err(DecodeError::MissingNul { what: "cmd" }));
        // lone surrogate
        let mut r = PayloadReader::new(&[2, 0, 0, 0, 0x00, 0xD8, 0, 0]);
        assert_eq!(r.string("cmd"), Err(DecodeError::InvalidUtf16 { what: "cmd" }));
        // huge length must not allocate or panic
        let mut r = PayloadReader::new(&[0xFF, 0xFF, 0xFF, 0xFF]);
        assert!(matches!(r.string("cmd"), Err(DecodeError::Truncated { .. })));
    }
}
