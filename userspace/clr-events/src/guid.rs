//! A GUID as stored in event payloads (Windows GUID layout: first three groups little-endian).

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Guid {
    pub data1: u32,
    pub data2: u16,
    pub data3: u16,
    pub data4: [u8; 8],
}

impl Guid {
    /// From the 16 payload bytes (data1..data3 little-endian, data4 as is).
    pub fn from_bytes_le(b: [u8; 16]) -> Self {
        let mut data4 = [0u8; 8];
        data4.copy_from_slice(&b[8..16]);
        Guid {
            data1: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            data2: u16::from_le_bytes([b[4], b[5]]),
            data3: u16::from_le_bytes([b[6], b[7]]),
            data4,
        }
    }

    pub fn is_nil(&self) -> bool {
        *self == Guid::default()
    }
}

impl fmt::Display for Guid {
    /// Lower-case hyphenated form, e.g. `3c98ebf4-c98a-410f-ab1e-6ea2faa600de`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.data4;
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
            self.data1, self.data2, self.data3, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_windows_layout() {
        let bytes = [
            0xf4, 0xeb, 0x98, 0x3c, 0x8a, 0xc9, 0x0f, 0x41, 0xab, 0x1e, 0x6e, 0xa2, 0xfa, 0xa6,
            0x00, 0xde,
        ];
        assert_eq!(
            Guid::from_bytes_le(bytes).to_string(),
            "3c98ebf4-c98a-410f-ab1e-6ea2faa600de"
        );
    }
}
