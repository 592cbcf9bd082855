//! Writing decoded events as JSON (or `name=value` text) straight into a byte buffer, without
//! building intermediate values: strings are escaped from the payload's UTF-16, numbers
//! formatted with `itoa`/`ryu`.
//!
//! Field names are the manifest's (`AllocationAmount`, `TypeName`, `ClrInstanceID`); fields
//! a payload's version does not carry are left out; value maps (GC reason, heap kind…) are
//! written as their names, and an unmapped value as its number.
//!
//! ```
//! use clr_events::json::{Fields, Style};
//!
//! let mut out = Vec::new();
//! let mut f = Fields::begin(&mut out, Style::Json);
//! f.field("Count", &7u32).field("TypeName", "a\"b");
//! f.end();
//! assert_eq!(out, br#"{"Count":7,"TypeName":"a\"b"}"#);
//!
//! let mut out = Vec::new();
//! let mut f = Fields::begin(&mut out, Style::Text);
//! f.field("Count", &7u32).field("TypeName", "a b");
//! f.end();
//! assert_eq!(out, br#"Count=7 TypeName="a b""#);
//! ```

use crate::Utf16Str;
use crate::guid::Guid;

/// A value that writes itself as one JSON value.
pub trait ToJson {
    fn write_json(&self, out: &mut Vec<u8>);
}

/// How [`Fields`] lays out an event's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A JSON object: `{"Name":value,…}`.
    Json,
    /// `Name=value Name=value` (values as JSON).
    Text,
}

/// The fields of one object being written.
pub struct Fields<'b> {
    out: &'b mut Vec<u8>,
    style: Style,
    first: bool,
}

impl<'b> Fields<'b> {
    pub fn begin(out: &'b mut Vec<u8>, style: Style) -> Self {
        if style == Style::Json {
            out.push(b'{');
        }
        Fields {
            out,
            style,
            first: true,
        }
    }

    /// Starts a field and returns the buffer to write its value into. `name` is written as is
    /// (field names are plain ASCII identifiers); see [`Fields::field_escaped`] otherwise.
    pub fn key(&mut self, name: &str) -> &mut Vec<u8> {
        self.sep();
        match self.style {
            Style::Json => {
                self.out.push(b'"');
                put(self.out, name.as_bytes());
                self.out.extend_from_slice(b"\":");
            }
            Style::Text => {
                put(self.out, name.as_bytes());
                self.out.push(b'=');
            }
        }
        self.out
    }

    #[inline]
    fn sep(&mut self) {
        if !self.first {
            self.out.push(if self.style == Style::Json {
                b','
            } else {
                b' '
            });
        }
        self.first = false;
    }

    pub fn field<T: ToJson + ?Sized>(&mut self, name: &str, value: &T) -> &mut Self {
        value.write_json(self.key(name));
        self
    }

    /// A field whose value is present only in some versions: left out when `None`.
    pub fn opt<T: ToJson>(&mut self, name: &str, value: &Option<T>) -> &mut Self {
        if let Some(v) = value {
            self.field(name, v);
        }
        self
    }

    /// A field whose name comes from outside (an EventSource's metadata): escaped.
    pub fn field_escaped<T: ToJson + ?Sized>(&mut self, name: &str, value: &T) -> &mut Self {
        value.write_json(self.key_escaped(name));
        self
    }

    /// [`Fields::key`] for a name from outside: escaped (JSON style).
    pub fn key_escaped(&mut self, name: &str) -> &mut Vec<u8> {
        self.sep();
        match self.style {
            Style::Json => {
                write_str(name, self.out);
                self.out.push(b':');
            }
            Style::Text => {
                self.out.extend_from_slice(name.as_bytes());
                self.out.push(b'=');
            }
        }
        self.out
    }

    pub fn end(self) {
        if self.style == Style::Json {
            self.out.push(b'}');
        }
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends a short slice (numbers, field names) without a call to `memcpy`: copies of a
/// constant size, overlapping when the length is not one of them. Output stays the same as
/// `extend_from_slice`; only the per-event cost goes down.
#[inline(always)]
pub fn put(out: &mut Vec<u8>, s: &[u8]) {
    let n = s.len();
    if n > 32 {
        out.extend_from_slice(s);
        return;
    }
    let len = out.len();
    out.extend_from_slice(&[0u8; 32]);
    let d = &mut out[len..len + 32];
    if n >= 16 {
        d[..16].copy_from_slice(&s[..16]);
        d[n - 16..n].copy_from_slice(&s[n - 16..]);
    } else if n >= 8 {
        d[..8].copy_from_slice(&s[..8]);
        d[n - 8..n].copy_from_slice(&s[n - 8..]);
    } else if n >= 4 {
        d[..4].copy_from_slice(&s[..4]);
        d[n - 4..n].copy_from_slice(&s[n - 4..]);
    } else if n > 0 {
        d[0] = s[0];
        d[n / 2] = s[n / 2];
        d[n - 1] = s[n - 1];
    }
    out.truncate(len + n);
}

/// Which bytes of ASCII need escaping inside a JSON string.
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

fn escape_byte(b: u8, out: &mut Vec<u8>) {
    match b {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        _ => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 15)],
        ]),
    }
}

/// Writes `s` as a JSON string.
pub fn write_str(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if needs_escape(b) {
            out.extend_from_slice(&bytes[start..i]);
            escape_byte(b, out);
            start = i + 1;
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Writes a UTF-16LE string as a JSON string (unpaired surrogates become U+FFFD).
pub fn write_utf16(s: &Utf16Str<'_>, out: &mut Vec<u8>) {
    out.push(b'"');
    let raw = s.as_bytes();
    out.reserve(raw.len() / 2 + 1);
    let mut i = 0;
    // Eight plain ASCII units (nothing to escape) at a time.
    while let Some(units) = raw.get(i..i + 16) {
        let mut chunk = [0u8; 8];
        let mut plain = true;
        for (k, c) in chunk.iter_mut().enumerate() {
            let (lo, hi) = (units[2 * k], units[2 * k + 1]);
            plain &= hi == 0 && (0x20..0x80).contains(&lo) && lo != b'"' && lo != b'\\';
            *c = lo;
        }
        if !plain {
            break;
        }
        out.extend_from_slice(&chunk);
        i += 16;
    }
    // ASCII fast path, two bytes per unit.
    while i + 1 < raw.len() {
        let (lo, hi) = (raw[i], raw[i + 1]);
        if hi != 0 || lo >= 0x80 {
            break;
        }
        if needs_escape(lo) {
            escape_byte(lo, out);
        } else {
            out.push(lo);
        }
        i += 2;
    }
    if i + 1 < raw.len() {
        let rest = Utf16Str::from_raw(&raw[i..]);
        let mut buf = [0u8; 4];
        for r in char::decode_utf16(rest.units()) {
            let c = r.unwrap_or(char::REPLACEMENT_CHARACTER);
            if c.is_ascii() && needs_escape(c as u8) {
                escape_byte(c as u8, out);
            } else {
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// Writes bytes as one JSON string of lowercase hex digits.
pub fn write_hex(bytes: &[u8], out: &mut Vec<u8>) {
    out.reserve(bytes.len() * 2 + 2);
    out.push(b'"');
    // 16 bytes at a time through a local buffer: one append per 32 digits.
    let mut chunks = bytes.chunks_exact(16);
    for chunk in &mut chunks {
        let mut digits = [0u8; 32];
        for (i, &b) in chunk.iter().enumerate() {
            digits[2 * i] = HEX[usize::from(b >> 4)];
            digits[2 * i + 1] = HEX[usize::from(b & 15)];
        }
        out.extend_from_slice(&digits);
    }
    for &b in chunks.remainder() {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 15)]);
    }
    out.push(b'"');
}

macro_rules! int_json {
    ($($t:ty),*) => {$(
        impl ToJson for $t {
            fn write_json(&self, out: &mut Vec<u8>) {
                put(out, itoa::Buffer::new().format(*self).as_bytes());
            }
        }
    )*};
}
int_json!(u8, u16, u32, u64, i8, i16, i32, i64, usize);

macro_rules! float_json {
    ($($t:ty),*) => {$(
        impl ToJson for $t {
            /// NaN and infinities (no JSON number) are written as null.
            fn write_json(&self, out: &mut Vec<u8>) {
                if self.is_finite() {
                    out.extend_from_slice(ryu::Buffer::new().format_finite(*self).as_bytes());
                } else {
                    out.extend_from_slice(b"null");
                }
            }
        }
    )*};
}
float_json!(f32, f64);

impl ToJson for bool {
    fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(if *self { b"true" } else { b"false" });
    }
}

impl ToJson for str {
    fn write_json(&self, out: &mut Vec<u8>) {
        write_str(self, out);
    }
}

impl ToJson for Utf16Str<'_> {
    fn write_json(&self, out: &mut Vec<u8>) {
        write_utf16(self, out);
    }
}

impl ToJson for Guid {
    fn write_json(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        out.push(b'"');
        let _ = write!(out, "{self}");
        out.push(b'"');
    }
}

impl<T: ToJson> ToJson for Option<T> {
    fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Some(v) => v.write_json(out),
            None => out.extend_from_slice(b"null"),
        }
    }
}

impl<T: ToJson> ToJson for [T] {
    fn write_json(&self, out: &mut Vec<u8>) {
        out.push(b'[');
        for (i, v) in self.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            v.write_json(out);
        }
        out.push(b']');
    }
}

impl<T: ToJson> ToJson for Vec<T> {
    fn write_json(&self, out: &mut Vec<u8>) {
        self.as_slice().write_json(out);
    }
}

impl<T: ToJson + ?Sized> ToJson for &T {
    fn write_json(&self, out: &mut Vec<u8>) {
        (**self).write_json(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json<T: ToJson + ?Sized>(v: &T) -> String {
        let mut out = Vec::new();
        v.write_json(&mut out);
        String::from_utf8(out).unwrap()
    }

    fn utf16(s: &str) -> Vec<u8> {
        s.encode_utf16().flat_map(|u| u.to_le_bytes()).collect()
    }

    #[test]
    fn strings_escape_like_json() {
        for s in [
            "plain",
            "q\"b\\s",
            "ctl\u{1}\n\t\r",
            "é 😀 System.Byte[]",
            "",
            "x\u{7f}",
            "System.Collections.Generic.Dictionary`2[[System.String],[System.Int32]]",
            "sixteen units ok\"then a quote after sixteen\\ and é beyond, ctl\u{1f} too",
        ] {
            let want = serde_json_like(s);
            assert_eq!(json(s), want, "{s:?}");
            let raw = utf16(s);
            assert_eq!(json(&Utf16Str::from_raw(&raw)), want, "{s:?} from UTF-16");
        }
        // An unpaired surrogate after ASCII.
        let raw = [0x41u8, 0, 0x00, 0xd8, 0x42, 0];
        assert_eq!(json(&Utf16Str::from_raw(&raw)), "\"A\u{fffd}B\"");
    }

    /// The escaping JSON requires: quote, backslash and control characters.
    fn serde_json_like(s: &str) -> String {
        let mut o = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => o.push_str("\\\""),
                '\\' => o.push_str("\\\\"),
                '\n' => o.push_str("\\n"),
                '\r' => o.push_str("\\r"),
                '\t' => o.push_str("\\t"),
                c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
                c => o.push(c),
            }
        }
        o.push('"');
        o
    }

    #[test]
    fn numbers_and_containers() {
        assert_eq!(json(&u64::MAX), "18446744073709551615");
        assert_eq!(json(&-5i32), "-5");
        assert_eq!(json(&1.5f64), "1.5");
        assert_eq!(json(&f64::NAN), "null");
        assert_eq!(json(&Some(3u8)), "3");
        assert_eq!(json(&None::<u8>), "null");
        assert_eq!(json(&vec![1u32, 2][..]), "[1,2]");
        let mut out = Vec::new();
        write_hex(&[0, 0xab, 0x10], &mut out);
        assert_eq!(out, b"\"00ab10\"");
    }

    #[test]
    fn put_appends_like_extend() {
        let src: Vec<u8> = (0..80u8).map(|i| b'a' + i % 26).collect();
        for n in 0..=40 {
            let mut a = b"head".to_vec();
            let mut b = a.clone();
            put(&mut a, &src[..n]);
            b.extend_from_slice(&src[..n]);
            assert_eq!(a, b, "{n}");
        }
        for n in 0..40 {
            let bytes: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37)).collect();
            let mut out = Vec::new();
            write_hex(&bytes, &mut out);
            let want: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(out, format!("\"{want}\"").into_bytes());
        }
    }

    #[test]
    fn optional_fields_are_left_out() {
        let mut out = Vec::new();
        let mut f = Fields::begin(&mut out, Style::Json);
        f.opt("A", &None::<u32>)
            .opt("B", &Some(2u32))
            .field_escaped("we\"ird", &1u8);
        f.end();
        assert_eq!(out, br#"{"B":2,"we\"ird":1}"#);
    }
}
