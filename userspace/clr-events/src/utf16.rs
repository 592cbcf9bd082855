//! Borrowed UTF-16LE strings: payload strings are kept as raw bytes and only decoded when a
//! consumer asks, because most decoded events never have their strings looked at.

use std::fmt;

use crate::error::DecodeError;

/// A UTF-16LE string borrowed from a payload, without its NUL terminator. Always an even number
/// of bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Utf16Str<'a> {
    raw: &'a [u8],
}

impl<'a> Utf16Str<'a> {
    /// `raw` must have even length; a trailing odd byte is ignored.
    pub fn from_raw(raw: &'a [u8]) -> Self {
        let even = raw.len() & !1;
        Utf16Str { raw: &raw[..even] }
    }

    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// Length in UTF-16 code units.
    pub fn len_units(&self) -> usize {
        self.raw.len() / 2
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    pub fn units(&self) -> impl Iterator<Item = u16> + 'a {
        self.raw
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
    }

    /// Decodes, replacing unpaired surrogates with U+FFFD.
    pub fn to_string_lossy(&self) -> String {
        let mut out = String::with_capacity(self.len_units());
        self.push_lossy(&mut out);
        out
    }

    /// Appends the decoded string to `out` (U+FFFD for unpaired surrogates), so a consumer that
    /// only looks a name up can reuse one buffer. ASCII — type names, exception types — is
    /// copied byte by byte without the surrogate decoder.
    pub fn push_lossy(&self, out: &mut String) {
        // ASCII goes through a stack buffer 64 units at a time, appended as one `str` (a
        // `char` pushed at a time was ~30 instructions per unit, a tenth of an allocation
        // event's cost in the aggregator).
        let start = out.len();
        out.reserve(self.len_units());
        let mut buf = [0u8; 64];
        for chunk in self.raw.chunks(2 * buf.len()) {
            let mut high = 0u8;
            for (b, c) in buf.iter_mut().zip(chunk.chunks_exact(2)) {
                *b = c[0];
                high |= c[1] | (c[0] & 0x80);
            }
            match std::str::from_utf8(&buf[..chunk.len() / 2]) {
                Ok(ascii) if high == 0 => out.push_str(ascii),
                _ => {
                    out.truncate(start);
                    out.extend(char::decode_utf16(self.units()).map(|r| r.unwrap_or(char::REPLACEMENT_CHARACTER)));
                    return;
                }
            }
        }
    }

    /// Decodes, failing on an unpaired surrogate.
    pub fn to_string_checked(&self) -> Result<String, DecodeError> {
        let mut out = String::with_capacity(self.len_units());
        for (i, r) in char::decode_utf16(self.units()).enumerate() {
            match r {
                Ok(c) => out.push(c),
                Err(_) => return Err(DecodeError::InvalidUtf16 { unit_index: i }),
            }
        }
        Ok(out)
    }

    /// Compares with a Rust string without allocating.
    pub fn eq_str(&self, s: &str) -> bool {
        self.units().eq(s.encode_utf16())
    }
}

impl fmt::Display for Utf16Str<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        for r in char::decode_utf16(self.units()) {
            f.write_char(r.unwrap_or(char::REPLACEMENT_CHARACTER))?;
        }
        Ok(())
    }
}

impl fmt::Debug for Utf16Str<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string_lossy())
    }
}

impl PartialEq<str> for Utf16Str<'_> {
    fn eq(&self, other: &str) -> bool {
        self.eq_str(other)
    }
}

impl PartialEq<&str> for Utf16Str<'_> {
    fn eq(&self, other: &&str) -> bool {
        self.eq_str(other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(s: &str) -> Vec<u8> {
        s.encode_utf16().flat_map(|u| u.to_le_bytes()).collect()
    }

    #[test]
    fn decodes_and_compares() {
        let raw = enc("System.Byte[] é 😀");
        let s = Utf16Str::from_raw(&raw);
        assert_eq!(s.to_string_lossy(), "System.Byte[] é 😀");
        assert_eq!(s.to_string_checked().unwrap(), "System.Byte[] é 😀");
        assert!(s == "System.Byte[] é 😀");
        assert!(s != "System.Byte[]");
        assert_eq!(format!("{s}"), "System.Byte[] é 😀");
    }

    #[test]
    fn push_lossy_appends_ascii_and_not() {
        let mut out = String::from(">");
        for text in ["System.Int64[]", "", "Dictionary`2[Ą,😀]", "\u{7f}x"] {
            let raw = enc(text);
            Utf16Str::from_raw(&raw).push_lossy(&mut out);
            out.push('|');
        }
        assert_eq!(out, ">System.Int64[]||Dictionary`2[Ą,😀]|\u{7f}x|");
        // A byte below 0x80 with a high byte set is not ASCII (U+0141 is 0x41 0x01).
        assert_eq!(Utf16Str::from_raw(&[0x41, 0x01]).to_string_lossy(), "Ł");
    }

    #[test]
    fn push_lossy_past_one_buffer() {
        let long: String = (0..150).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        let late = format!("{long}Ą{long}");
        for text in [long.as_str(), late.as_str()] {
            let mut out = String::from("<");
            Utf16Str::from_raw(&enc(text)).push_lossy(&mut out);
            assert_eq!(out, format!("<{text}"));
        }
    }

    #[test]
    fn unpaired_surrogate() {
        let raw = [0x41u8, 0, 0x00, 0xd8, 0x42, 0];
        let s = Utf16Str::from_raw(&raw);
        assert_eq!(s.to_string_lossy(), "A\u{fffd}B");
        assert_eq!(
            s.to_string_checked(),
            Err(DecodeError::InvalidUtf16 { unit_index: 1 })
        );
    }
}
