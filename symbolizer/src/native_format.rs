//! The "native format" encodings ReadyToRun uses for its lookup structures: variable-length
//! unsigned/signed numbers, `NativeArray` (sparse arrays in blocks of 16) and `NativeHashtable`.
//! Offsets are relative to the slice handed in (a whole R2R section).
use crate::FormatError;
use crate::reader::Bytes;

const BLOCK_SIZE: u32 = 16;

/// Decodes an unsigned number at `pos`; returns (value, next position).
pub fn decode_unsigned(b: Bytes<'_>, pos: u64) -> Result<(u32, u64), FormatError> {
    let v = b.u8(pos)? as u32;
    Ok(if v & 1 == 0 {
        (v >> 1, pos + 1)
    } else if v & 2 == 0 {
        ((v >> 2) | (b.u8(pos + 1)? as u32) << 6, pos + 2)
    } else if v & 4 == 0 {
        ((v >> 3) | (b.u8(pos + 1)? as u32) << 5 | (b.u8(pos + 2)? as u32) << 13, pos + 3)
    } else if v & 8 == 0 {
        ((v >> 4) | (b.u8(pos + 1)? as u32) << 4 | (b.u8(pos + 2)? as u32) << 12 | (b.u8(pos + 3)? as u32) << 20, pos + 4)
    } else if v & 16 == 0 {
        (b.u32(pos + 1)?, pos + 5)
    } else {
        return Err(FormatError::invalid(b.what, format!("bad number encoding {v:#x} at {pos:#x}")));
    })
}

/// Decodes a signed number at `pos`; returns (value, next position).
pub fn decode_signed(b: Bytes<'_>, pos: u64) -> Result<(i32, u64), FormatError> {
    let v = b.u8(pos)? as u32;
    let sx = |x: u8| x as i8 as i32;
    Ok(if v & 1 == 0 {
        (sx(v as u8) >> 1, pos + 1)
    } else if v & 2 == 0 {
        ((v >> 2) as i32 | sx(b.u8(pos + 1)?) << 6, pos + 2)
    } else if v & 4 == 0 {
        ((v >> 3) as i32 | (b.u8(pos + 1)? as i32) << 5 | sx(b.u8(pos + 2)?) << 13, pos + 3)
    } else if v & 8 == 0 {
        (
            (v >> 4) as i32 | (b.u8(pos + 1)? as i32) << 4 | (b.u8(pos + 2)? as i32) << 12 | sx(b.u8(pos + 3)?) << 20,
            pos + 4,
        )
    } else if v & 16 == 0 {
        (b.u32(pos + 1)? as i32, pos + 5)
    } else {
        return Err(FormatError::invalid(b.what, format!("bad signed number encoding {v:#x} at {pos:#x}")));
    })
}

/// A sparse array indexed by a number (e.g. MethodDef RID - 1).
#[derive(Debug, Clone, Copy)]
pub struct NativeArray<'a> {
    b: Bytes<'a>,
    base: u64,
    len: u32,
    entry_index_size: u32,
}

impl<'a> NativeArray<'a> {
    pub fn new(b: Bytes<'a>, pos: u64) -> Result<Self, FormatError> {
        let (header, base) = decode_unsigned(b, pos)?;
        let entry_index_size = header & 3;
        if entry_index_size > 2 {
            return Err(FormatError::invalid(b.what, "NativeArray entry index size 3"));
        }
        Ok(NativeArray { b, base, len: header >> 2, entry_index_size })
    }

    pub fn len(&self) -> u32 {
        self.len
    }

    /// Offset of element `index`'s data, or None if the element is absent.
    pub fn get(&self, index: u32) -> Result<Option<u64>, FormatError> {
        if index >= self.len {
            return Ok(None);
        }
        let block = (index / BLOCK_SIZE) as u64;
        let rel = match self.entry_index_size {
            0 => self.b.u8(self.base + block)? as u64,
            1 => self.b.u16(self.base + 2 * block)? as u64,
            _ => self.b.u32(self.base + 4 * block)? as u64,
        };
        let mut offset = self.base + rel;
        let mut bit = BLOCK_SIZE >> 1;
        while bit > 0 {
            let (val, next) = decode_unsigned(self.b, offset)?;
            if index & bit != 0 {
                if val & 2 != 0 {
                    offset += (val >> 2) as u64;
                    bit >>= 1;
                    continue;
                }
            } else if val & 1 != 0 {
                offset = next;
                bit >>= 1;
                continue;
            }
            // A special leaf: this index alone lives under the node.
            if val & 3 == 0 && (val >> 2) == index & (BLOCK_SIZE - 1) {
                return Ok(Some(next));
            }
            return Ok(None);
        }
        Ok(Some(offset))
    }
}

/// All entries of a `NativeHashtable`: the offset of each entry's data, in bucket order.
pub fn hashtable_entries(b: Bytes<'_>, pos: u64) -> Result<Vec<u64>, FormatError> {
    let header = b.u8(pos)? as u32;
    let base = pos + 1;
    let shift = header >> 2;
    if shift > 31 {
        return Err(FormatError::invalid(b.what, format!("NativeHashtable bucket shift {shift}")));
    }
    let entry_index_size = header & 3;
    let read = |i: u64| -> Result<u64, FormatError> {
        Ok(match entry_index_size {
            0 => b.u8(base + i)? as u64,
            1 => b.u16(base + 2 * i)? as u64,
            2 => b.u32(base + 4 * i)? as u64,
            _ => return Err(FormatError::invalid(b.what, "NativeHashtable entry index size 3")),
        })
    };
    let buckets = 1u64 << shift;
    let mut out = Vec::new();
    for bucket in 0..buckets {
        let start = base + read(bucket)?;
        let end = base + read(bucket + 1)?;
        let mut p = start;
        while p < end {
            let _low_hash = b.u8(p)?;
            let at = p + 1;
            let (delta, next) = decode_signed(b, at)?;
            let target = at
                .checked_add_signed(delta as i64)
                .ok_or_else(|| FormatError::invalid(b.what, format!("hashtable entry offset underflows at {at:#x}")))?;
            out.push(target);
            p = next;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip_known_encodings() {
        let b = |d: &'static [u8]| Bytes::new(d, "test");
        assert_eq!(decode_unsigned(b(&[0x08]), 0).unwrap(), (4, 1));
        // 2-byte form: low bits 01, value = (b0 >> 2) | b1 << 6
        assert_eq!(decode_unsigned(b(&[0x05, 0x02]), 0).unwrap(), (1 | 2 << 6, 2));
        assert_eq!(decode_unsigned(b(&[0x0F, 0x78, 0x56, 0x34, 0x12]), 0).unwrap(), (0x12345678, 5));
        assert_eq!(decode_signed(b(&[0xFE]), 0).unwrap(), (-1, 1));
        assert_eq!(decode_signed(b(&[0x01, 0xFF]), 0).unwrap(), (-64, 2));
        assert!(decode_unsigned(b(&[0x1F]), 0).is_err(), "5 low ones is no encoding");
        assert!(decode_unsigned(b(&[0x03]), 0).is_err(), "truncated 3-byte form");
    }
}
