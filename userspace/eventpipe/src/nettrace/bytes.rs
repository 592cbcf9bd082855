//! Bounds-checked little-endian cursor over an in-memory buffer (block bodies, metadata).

use super::error::BufError;

pub(crate) type BufResult<T> = Result<T, BufError>;

/// A forward-only reader of a byte slice. Every read checks bounds and reports the offset.
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// A cursor over `buf` at `pos` (offsets in errors stay relative to `buf`).
    #[inline]
    pub(crate) fn at(buf: &'a [u8], pos: usize) -> Self {
        Cursor { buf, pos }
    }

    #[inline]
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    #[inline]
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    #[inline]
    pub(crate) fn err(&self, reason: &'static str) -> BufError {
        BufError::new(self.pos, reason)
    }

    #[inline]
    pub(crate) fn bytes(&mut self, n: usize, what: &'static str) -> BufResult<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.err(what));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    pub(crate) fn skip(&mut self, n: usize, what: &'static str) -> BufResult<()> {
        self.bytes(n, what).map(|_| ())
    }

    /// Skips to the next multiple of `align` (relative to the buffer start), clamped to the end.
    #[inline]
    pub(crate) fn align(&mut self, align: usize) {
        let rem = self.pos % align;
        if rem != 0 {
            self.pos = (self.pos + align - rem).min(self.buf.len());
        }
    }

    #[inline]
    fn array<const N: usize>(&mut self, what: &'static str) -> BufResult<[u8; N]> {
        let s = self.bytes(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    #[inline]
    pub(crate) fn u8(&mut self, what: &'static str) -> BufResult<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    #[inline]
    pub(crate) fn u16(&mut self, what: &'static str) -> BufResult<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    #[inline]
    pub(crate) fn i16(&mut self, what: &'static str) -> BufResult<i16> {
        Ok(i16::from_le_bytes(self.array(what)?))
    }
    #[inline]
    pub(crate) fn u32(&mut self, what: &'static str) -> BufResult<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    #[inline]
    pub(crate) fn i32(&mut self, what: &'static str) -> BufResult<i32> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }
    #[inline]
    pub(crate) fn u64(&mut self, what: &'static str) -> BufResult<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    #[inline]
    pub(crate) fn i64(&mut self, what: &'static str) -> BufResult<i64> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }
    #[inline]
    pub(crate) fn guid(&mut self, what: &'static str) -> BufResult<[u8; 16]> {
        self.array(what)
    }

    /// LEB128 unsigned integer of at most 64 bits.
    #[inline(always)]
    pub(crate) fn varu64(&mut self, what: &'static str) -> BufResult<u64> {
        match self.buf.get(self.pos) {
            Some(&b) if b < 0x80 => {
                self.pos += 1;
                Ok(u64::from(b))
            }
            _ => match self.buf.get(self.pos..self.pos + 10) {
                Some(w) => self.varu64_window(w.try_into().unwrap_or([0; 10])),
                None => self.varu64_multi(what),
            },
        }
    }

    /// A varint with 10 bytes readable: no bounds check per byte.
    #[inline(always)]
    fn varu64_window(&mut self, w: [u8; 10]) -> BufResult<u64> {
        let mut result = 0u64;
        for (i, &b) in w.iter().enumerate() {
            result |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                if i == 9 && b > 1 {
                    return Err(self.err("varuint64 overflows 64 bits"));
                }
                self.pos += i + 1;
                return Ok(result);
            }
        }
        Err(self.err("varuint64 longer than 10 bytes"))
    }

    #[inline(never)]
    fn varu64_multi(&mut self, what: &'static str) -> BufResult<u64> {
        let mut result = 0u64;
        let mut shift = 0u32;
        loop {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(self.err(what));
            };
            self.pos += 1;
            if shift == 63 && b > 1 {
                return Err(self.err("varuint64 overflows 64 bits"));
            }
            result |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(result);
            }
            shift += 7;
            if shift > 63 {
                return Err(self.err("varuint64 longer than 10 bytes"));
            }
        }
    }

    /// LEB128 unsigned integer of at most 32 bits.
    #[inline(always)]
    pub(crate) fn varu32(&mut self, what: &'static str) -> BufResult<u32> {
        let start = self.pos;
        let v = self.varu64(what)?;
        u32::try_from(v).map_err(|_| BufError::new(start, "varuint32 overflows 32 bits"))
    }

    /// Zig-zag signed LEB128.
    pub(crate) fn vari64(&mut self, what: &'static str) -> BufResult<i64> {
        let v = self.varu64(what)?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// NUL-terminated UTF-16LE string (the terminator is consumed, not returned).
    pub(crate) fn utf16z(&mut self, what: &'static str) -> BufResult<String> {
        let rest = &self.buf[self.pos..];
        let mut units = Vec::new();
        let mut i = 0;
        loop {
            if i + 2 > rest.len() {
                return Err(self.err(what));
            }
            let u = u16::from_le_bytes([rest[i], rest[i + 1]]);
            i += 2;
            if u == 0 {
                break;
            }
            units.push(u);
        }
        self.pos += i;
        Ok(String::from_utf16_lossy(&units))
    }

    /// varuint32 length-prefixed UTF-8 string (V6).
    pub(crate) fn utf8(&mut self, what: &'static str) -> BufResult<String> {
        let len = self.varu32(what)? as usize;
        let s = self.bytes(len, what)?;
        Ok(String::from_utf8_lossy(s).into_owned())
    }

    /// A sub-cursor over the next `n` bytes; this cursor moves past them.
    pub(crate) fn sub(&mut self, n: usize, what: &'static str) -> BufResult<Cursor<'a>> {
        Ok(Cursor::new(self.bytes(n, what)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_values_and_reject_overlong() {
        let mut c = Cursor::new(&[0x7f, 0x80, 0x01, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(c.varu32("a").unwrap(), 127);
        assert_eq!(c.varu32("a").unwrap(), 128);
        assert_eq!(c.varu32("a").unwrap(), u32::MAX);
        assert!(c.is_empty());
        let mut c = Cursor::new(&[0xff, 0xff, 0xff, 0xff, 0x1f]);
        assert!(c.varu32("a").is_err());
        let mut c = Cursor::new(&[0xff; 11]);
        assert!(c.varu64("a").is_err());
        let mut c = Cursor::new(&[0x80]);
        assert_eq!(c.varu64("x").unwrap_err().reason, "x");
        let mut c = Cursor::new(&[0x03, 0x04]);
        assert_eq!(c.vari64("a").unwrap(), -2);
        assert_eq!(c.vari64("a").unwrap(), 2);
    }

    #[test]
    fn strings() {
        let mut c = Cursor::new(&[b'h', 0, b'i', 0, 0, 0, 2, b'o', b'k', b'x']);
        assert_eq!(c.utf16z("s").unwrap(), "hi");
        assert_eq!(c.utf8("s").unwrap(), "ok");
        assert!(c.utf16z("s").is_err());
    }
}
