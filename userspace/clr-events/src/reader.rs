//! A small bounds-checked little-endian cursor over an event payload.
//!
//! Every read names the field it reads so that a short payload produces an error saying which
//! field of which layout ran out of bytes. Nothing here panics on any input.

use crate::error::DecodeError;
use crate::guid::Guid;
use crate::utf16::Utf16Str;

#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    pointer_size: u8,
    event: &'static str,
}

impl<'a> Cursor<'a> {
    /// A cursor over `buf` for the layout named `event`. `pointer_size` must be 4 or 8.
    pub fn new(buf: &'a [u8], pointer_size: u8, event: &'static str) -> Result<Self, DecodeError> {
        if pointer_size != 4 && pointer_size != 8 {
            return Err(DecodeError::BadPointerSize {
                event,
                size: pointer_size,
            });
        }
        Ok(Cursor {
            buf,
            pos: 0,
            pointer_size,
            event,
        })
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn pointer_size(&self) -> u8 {
        self.pointer_size
    }

    pub fn event(&self) -> &'static str {
        self.event
    }

    /// Takes the next `n` bytes.
    #[inline]
    pub fn bytes(&mut self, n: usize, field: &str) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(self.truncated(n, field));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    #[cold]
    fn truncated(&self, needed: usize, field: &str) -> DecodeError {
        DecodeError::Truncated {
            event: self.event,
            field: field.to_string(),
            offset: self.pos,
            needed,
            available: self.remaining(),
        }
    }

    #[inline]
    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], DecodeError> {
        let b = self.bytes(N, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    #[inline]
    pub fn u8(&mut self, field: &str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(field)?[0])
    }

    #[inline]
    pub fn i8(&mut self, field: &str) -> Result<i8, DecodeError> {
        Ok(i8::from_le_bytes(self.array(field)?))
    }

    #[inline]
    pub fn u16(&mut self, field: &str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    #[inline]
    pub fn i16(&mut self, field: &str) -> Result<i16, DecodeError> {
        Ok(i16::from_le_bytes(self.array(field)?))
    }

    #[inline]
    pub fn u32(&mut self, field: &str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    #[inline]
    pub fn i32(&mut self, field: &str) -> Result<i32, DecodeError> {
        Ok(i32::from_le_bytes(self.array(field)?))
    }

    #[inline]
    pub fn u64(&mut self, field: &str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    #[inline]
    pub fn i64(&mut self, field: &str) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.array(field)?))
    }

    #[inline]
    pub fn f32(&mut self, field: &str) -> Result<f32, DecodeError> {
        Ok(f32::from_le_bytes(self.array(field)?))
    }

    #[inline]
    pub fn f64(&mut self, field: &str) -> Result<f64, DecodeError> {
        Ok(f64::from_le_bytes(self.array(field)?))
    }

    /// A `win:Pointer`: 4 or 8 bytes depending on the target's pointer size, widened to u64.
    #[inline]
    pub fn pointer(&mut self, field: &str) -> Result<u64, DecodeError> {
        if self.pointer_size == 4 {
            Ok(u64::from(self.u32(field)?))
        } else {
            self.u64(field)
        }
    }

    /// A `win:Boolean` (Win32 BOOL, 4 bytes); any non-zero value is true.
    #[inline]
    pub fn bool32(&mut self, field: &str) -> Result<bool, DecodeError> {
        Ok(self.u32(field)? != 0)
    }

    #[inline]
    pub fn guid(&mut self, field: &str) -> Result<Guid, DecodeError> {
        Ok(Guid::from_bytes_le(self.array(field)?))
    }

    /// A NUL-terminated UTF-16LE string. The returned view excludes the terminator; the cursor
    /// moves past it. The terminator is searched on 2-byte boundaries from the string start.
    pub fn utf16z(&mut self, field: &str) -> Result<Utf16Str<'a>, DecodeError> {
        let start = self.pos;
        let rest = &self.buf[start..];
        let mut i = 0;
        // Four units at a time: the lowest lane flagged by `(w - 1) & !w & 0x8000` (per 16-bit
        // lane) is the first zero unit (a borrow only leaves a zero lane).
        const L: u64 = 0x0001_0001_0001_0001;
        // Sixteen at a time first.
        while let Some(b) = rest.get(i..i + 32).and_then(|b| <&[u8; 32]>::try_from(b).ok()) {
            if let Some(k) = first_zero_unit(b) {
                i += 2 * k;
                self.pos = start + i + 2;
                return Ok(Utf16Str::from_raw(&rest[..i]));
            }
            i += 32;
        }
        while let Some(b) = rest.get(i..i + 8) {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            let w = u64::from_le_bytes(a);
            let zero = w.wrapping_sub(L) & !w & (0x8000 * L);
            if zero != 0 {
                i += (zero.trailing_zeros() / 16) as usize * 2;
                self.pos = start + i + 2;
                return Ok(Utf16Str::from_raw(&rest[..i]));
            }
            i += 8;
        }
        while i + 1 < rest.len() {
            if rest[i] == 0 && rest[i + 1] == 0 {
                self.pos = start + i + 2;
                return Ok(Utf16Str::from_raw(&rest[..i]));
            }
            i += 2;
        }
        Err(DecodeError::UnterminatedString {
            event: self.event,
            field: field.to_string(),
            offset: start,
        })
    }

    /// Checks that `count` elements of at least `elem_size` bytes each can still fit, so that a
    /// corrupt count cannot make a caller allocate or loop far beyond the payload.
    pub fn check_count(&self, count: u64, elem_size: u64, field: &str) -> Result<(), DecodeError> {
        let needed = count.saturating_mul(elem_size);
        if needed > self.remaining() as u64 {
            return Err(DecodeError::CountTooLarge {
                event: self.event,
                field: field.to_string(),
                offset: self.pos,
                count,
                needed,
                available: self.remaining(),
            });
        }
        Ok(())
    }

    /// True if at least `n` more bytes are present (used for fields appended by later versions
    /// that some runtimes emit without bumping the version).
    pub fn has(&self, n: usize) -> bool {
        self.remaining() >= n
    }
}

/// The index of the first zero unit among sixteen UTF-16 units (SSE2: every x86-64 has it).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn first_zero_unit(units: &[u8; 32]) -> Option<usize> {
    #[target_feature(enable = "sse2")]
    fn sse2(units: &[u8; 32]) -> Option<usize> {
        use std::arch::x86_64::{
            _mm_cmpeq_epi16, _mm_movemask_epi8, _mm_set_epi64x, _mm_setzero_si128,
        };
        let q = |k: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&units[8 * k..8 * k + 8]);
            i64::from_le_bytes(b)
        };
        let zero = _mm_setzero_si128();
        let low = _mm_movemask_epi8(_mm_cmpeq_epi16(_mm_set_epi64x(q(1), q(0)), zero)) as u32;
        let high = _mm_movemask_epi8(_mm_cmpeq_epi16(_mm_set_epi64x(q(3), q(2)), zero)) as u32;
        // Two mask bits per unit.
        let mask = low | high << 16;
        (mask != 0).then(|| mask.trailing_zeros() as usize / 2)
    }
    // SAFETY: the build targets x86-64 with SSE2 (cfg above), so the CPU has it.
    unsafe { sse2(units) }
}

/// [`first_zero_unit`] without SSE2.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn first_zero_unit(units: &[u8; 32]) -> Option<usize> {
    units.chunks_exact(2).position(|u| u == [0, 0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_reports_truncation() {
        let buf = [1u8, 0, 2, 0, 0, 0, 0xff];
        let mut c = Cursor::new(&buf, 8, "T").unwrap();
        assert_eq!(c.u16("a").unwrap(), 1);
        assert_eq!(c.u32("b").unwrap(), 2);
        let err = c.u16("c").unwrap_err();
        assert_eq!(
            err,
            DecodeError::Truncated {
                event: "T",
                field: "c".into(),
                offset: 6,
                needed: 2,
                available: 1
            }
        );
        // A failed read does not move the cursor.
        assert_eq!(c.position(), 6);
        assert_eq!(c.u8("d").unwrap(), 0xff);
    }

    #[test]
    fn pointer_width_follows_pointer_size() {
        let buf = [0x78u8, 0x56, 0x34, 0x12, 0xaa, 0xbb, 0xcc, 0xdd];
        let mut c4 = Cursor::new(&buf, 4, "T").unwrap();
        assert_eq!(c4.pointer("p").unwrap(), 0x1234_5678);
        assert_eq!(c4.remaining(), 4);
        let mut c8 = Cursor::new(&buf, 8, "T").unwrap();
        assert_eq!(c8.pointer("p").unwrap(), 0xddcc_bbaa_1234_5678);
        assert!(matches!(
            Cursor::new(&buf, 2, "T"),
            Err(DecodeError::BadPointerSize { size: 2, .. })
        ));
    }

    #[test]
    fn utf16z_needs_aligned_terminator() {
        // "A" then NUL, then a trailing byte.
        let buf = [b'A', 0, 0, 0, 7];
        let mut c = Cursor::new(&buf, 8, "T").unwrap();
        assert_eq!(c.utf16z("s").unwrap().to_string_lossy(), "A");
        assert_eq!(c.position(), 4);
        // 0x0100 followed by 0x0000 split across an odd boundary is not a terminator.
        let buf = [0x00u8, 0x01, 0x00, 0x41];
        let mut c = Cursor::new(&buf, 8, "T").unwrap();
        assert!(matches!(
            c.utf16z("s"),
            Err(DecodeError::UnterminatedString { offset: 0, .. })
        ));
    }

    #[test]
    fn utf16z_finds_the_first_terminator_at_every_offset() {
        // Units around the zero lane that could fool a lane test: 0x0001, 0x8000, 0x0100.
        let fill = [0x0041u16, 0x0001, 0x8000, 0x0100, 0xffff];
        for len in 0..40 {
            for f in fill {
                let mut units = vec![f; len];
                units.push(0);
                units.extend([0x8000, 0, 0x0001]);
                let buf: Vec<u8> = units.iter().flat_map(|u| u.to_le_bytes()).collect();
                let mut c = Cursor::new(&buf, 8, "T").unwrap();
                assert_eq!(c.utf16z("s").unwrap().len_units(), len, "{len} {f:x}");
                assert_eq!(c.position(), 2 * len + 2);
            }
        }
    }

    #[test]
    fn check_count_rejects_impossible_counts() {
        let buf = [0u8; 16];
        let c = Cursor::new(&buf, 8, "T").unwrap();
        assert!(c.check_count(2, 8, "v").is_ok());
        assert!(matches!(
            c.check_count(3, 8, "v"),
            Err(DecodeError::CountTooLarge { count: 3, .. })
        ));
        assert!(c.check_count(u64::MAX, u64::MAX, "v").is_err());
    }
}
