//! Writing decoded events as JSON (or `name=value` text) straight into a byte buffer, without
//! building intermediate values: strings are escaped from the payload's UTF-16, numbers
//! formatted in place (floats with `ryu`).
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

    /// Continues an object whose `{` and first fields are already in `out`.
    pub fn continued(out: &'b mut Vec<u8>, style: Style) -> Self {
        Fields { out, style, first: false }
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

    /// Starts a field named by a [`Key`] (its separator, quotes and colon are one append).
    #[inline(always)]
    pub fn key_of(&mut self, key: &Key) -> &mut Vec<u8> {
        let (spelled, n) = match self.style {
            Style::Json => (key.json, key.json_len),
            Style::Text => (key.text, key.text_len),
        };
        // The first field has no separator.
        let skip = usize::from(self.first);
        self.first = false;
        let n = n - skip;
        match spelled.get(skip..skip + KEY_PAD) {
            Some(padded) if n <= KEY_PAD => {
                let len = self.out.len();
                let mut fixed = [0u8; KEY_PAD];
                fixed.copy_from_slice(padded);
                self.out.extend_from_slice(&fixed);
                self.out.truncate(len + n);
            }
            _ => self.out.extend_from_slice(&spelled[skip..skip + n]),
        }
        self.out
    }

    /// A field named by a plain ASCII name (`"Count"`) or a [`Key`] (`key!("Count")`).
    #[inline]
    pub fn field<N: FieldName + ?Sized, T: ToJson + ?Sized>(&mut self, name: &N, value: &T) -> &mut Self {
        value.write_json(name.start(self));
        self
    }

    /// A field whose value is present only in some versions: left out when `None`.
    #[inline]
    pub fn opt<N: FieldName + ?Sized, T: ToJson>(&mut self, name: &N, value: &Option<T>) -> &mut Self {
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

/// A field name spelled once for each style, separator included: `,"Name":` and ` Name=`
/// (made by [`key!`](crate::key) from a literal). Each spelling is followed by 32 bytes of
/// padding, so that it is appended with one copy of a fixed size.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    json: &'static [u8],
    json_len: usize,
    text: &'static [u8],
    text_len: usize,
}

/// The padding [`key!`](crate::key) puts after each spelling.
#[doc(hidden)]
pub const KEY_PAD: usize = 32;

impl Key {
    /// `json` is `,"Name":` and `text` ` Name=`, each followed by [`KEY_PAD`] bytes of
    /// padding (`*_len` are the lengths without it): use [`key!`](crate::key).
    pub const fn spelled(json: &'static str, json_len: usize, text: &'static str, text_len: usize) -> Key {
        assert!(json.len() == json_len + KEY_PAD && text.len() == text_len + KEY_PAD);
        Key {
            json: json.as_bytes(),
            json_len,
            text: text.as_bytes(),
            text_len,
        }
    }
}

/// The [`Key`] of a plain ASCII field name literal: `key!("Count")`.
#[macro_export]
macro_rules! key {
    ($name:literal) => {{
        // Made at compile time (a call in place would run at every use).
        const KEY: $crate::json::Key = $crate::json::Key::spelled(
            concat!(",\"", $name, "\":", "                                "),
            concat!(",\"", $name, "\":").len(),
            concat!(" ", $name, "=", "                                "),
            concat!(" ", $name, "=").len(),
        );
        KEY
    }};
}

/// What names a field: a plain ASCII `&str` (written as is) or a [`Key`].
pub trait FieldName {
    /// Writes the separator and the name; returns the buffer for the value.
    fn start<'f>(&self, f: &'f mut Fields<'_>) -> &'f mut Vec<u8>;
}

impl FieldName for str {
    #[inline]
    fn start<'f>(&self, f: &'f mut Fields<'_>) -> &'f mut Vec<u8> {
        f.key(self)
    }
}

impl FieldName for Key {
    #[inline(always)]
    fn start<'f>(&self, f: &'f mut Fields<'_>) -> &'f mut Vec<u8> {
        f.key_of(self)
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

/// Four UTF-16LE units (one little-endian word) as their four ASCII bytes, when every one is
/// printable ASCII that JSON writes as is (not `"` or `\\`); `None` otherwise. Each 16-bit
/// lane is tested at once: no sum below carries out of its lane.
#[inline(always)]
fn plain4(w: u64) -> Option<u32> {
    const L: u64 = 0x0001_0001_0001_0001;
    if w & (0xff80 * L) != 0 {
        return None; // a unit >= 0x80
    }
    // Each lane v < 0x80 now: v >= 0x20 sets bit 7 of v + 0x60; v != c sets bit 15 of
    // (v ^ c) + 0x7fff.
    let printable = (w + 0x60 * L) & (0x80 * L);
    let not_quote = ((w ^ (0x22 * L)) + 0x7fff * L) & (0x8000 * L);
    let not_backslash = ((w ^ (0x5c * L)) + 0x7fff * L) & (0x8000 * L);
    if printable != 0x80 * L || not_quote != 0x8000 * L || not_backslash != 0x8000 * L {
        return None;
    }
    let x = (w | w >> 8) & 0x0000_ffff_0000_ffff;
    Some(((x | x >> 16) & 0xffff_ffff) as u32)
}

/// Sixteen UTF-16LE units as their sixteen ASCII bytes (a little-endian `u128`) when every one is printable ASCII that
/// JSON writes as is; `None` otherwise. SSE2 (every x86-64 has it): the units are packed to
/// bytes with unsigned saturation (a unit above 0xff becomes 0xff, one of 0x8000 and above 0),
/// and a byte passes when it is at least 0x20 as a signed byte (so below 0x80) and no quote
/// or backslash.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn plain16(units: &[u8; 32]) -> Option<u128> {
    // SAFETY: the build targets x86-64 with SSE2 (cfg above), so the CPU has it.
    unsafe { plain16_sse2(units) }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[target_feature(enable = "sse2")]
fn plain16_sse2(units: &[u8; 32]) -> Option<u128> {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_cvtsi128_si64, _mm_movemask_epi8, _mm_or_si128,
        _mm_packus_epi16, _mm_set_epi64x, _mm_set1_epi8, _mm_unpackhi_epi64,
    };
    let q = |k: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&units[8 * k..8 * k + 8]);
        i64::from_le_bytes(b)
    };
    let bytes = _mm_packus_epi16(_mm_set_epi64x(q(1), q(0)), _mm_set_epi64x(q(3), q(2)));
    let bad = _mm_or_si128(
        _mm_cmplt_epi8(bytes, _mm_set1_epi8(0x20)),
        _mm_or_si128(
            _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'"' as i8)),
            _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'\\' as i8)),
        ),
    );
    if _mm_movemask_epi8(bad) != 0 {
        return None;
    }
    let low = _mm_cvtsi128_si64(bytes) as u64;
    let high = _mm_cvtsi128_si64(_mm_unpackhi_epi64(bytes, bytes)) as u64;
    Some(u128::from(low) | u128::from(high) << 64)
}

/// [`plain16`] without SSE2: four words of [`plain4`].
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn plain16(units: &[u8; 32]) -> Option<u128> {
    let mut out = 0u128;
    for k in 0..4 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&units[8 * k..8 * k + 8]);
        out |= u128::from(plain4(u64::from_le_bytes(b))?) << (32 * k);
    }
    Some(out)
}

/// Sixteen UTF-16LE units packed to bytes (a little-endian `u128`, as [`plain16`] makes
/// them) and a mask with bit `k` set when unit `k` is not one JSON writes as is: a NUL, a
/// control, a quote, a backslash or a unit of 0x80 and above (the packing saturates those to
/// 0 or 0xff, both flagged).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn scan16(units: &[u8; 32]) -> (u32, u128) {
    // SAFETY: the build targets x86-64 with SSE2 (cfg above), so the CPU has it.
    unsafe { scan16_sse2(units) }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[target_feature(enable = "sse2")]
fn scan16_sse2(units: &[u8; 32]) -> (u32, u128) {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_cvtsi128_si64, _mm_movemask_epi8, _mm_or_si128,
        _mm_packus_epi16, _mm_set_epi64x, _mm_set1_epi8, _mm_unpackhi_epi64,
    };
    let q = |k: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&units[8 * k..8 * k + 8]);
        i64::from_le_bytes(b)
    };
    let bytes = _mm_packus_epi16(_mm_set_epi64x(q(1), q(0)), _mm_set_epi64x(q(3), q(2)));
    let bad = _mm_or_si128(
        _mm_cmplt_epi8(bytes, _mm_set1_epi8(0x20)),
        _mm_or_si128(
            _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'"' as i8)),
            _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'\\' as i8)),
        ),
    );
    let low = _mm_cvtsi128_si64(bytes) as u64;
    let high = _mm_cvtsi128_si64(_mm_unpackhi_epi64(bytes, bytes)) as u64;
    (_mm_movemask_epi8(bad) as u32, u128::from(low) | u128::from(high) << 64)
}

/// [`scan16`] without SSE2: one unit at a time.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn scan16(units: &[u8; 32]) -> (u32, u128) {
    let (mut bad, mut packed) = (0u32, 0u128);
    for k in 0..16 {
        let u = u16::from_le_bytes([units[2 * k], units[2 * k + 1]]);
        if u >= 0x80 || needs_escape(u as u8) {
            bad |= 1 << k;
        }
        packed |= u128::from(u.min(0xff) as u8) << (8 * k);
    }
    (bad, packed)
}

/// Writes the NUL-terminated UTF-16LE string at the start of `raw` as a JSON string, finding
/// its end in the same pass: sixteen units at a time are checked for a unit to escape (the
/// terminator is one) and written narrowed when there is none. Writes what
/// [`crate::reader::Cursor::utf16z`] then [`write_utf16`] write (the terminator is searched on
/// 2-byte boundaries) and returns the bytes read, terminator included; `None` when `raw` has no
/// terminator (`out` then holds part of a string: truncate it).
pub fn write_utf16z(raw: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    out.push(b'"');
    let mut i = 0;
    loop {
        let (bad, packed, avail) = match raw.get(i..i + 32).and_then(|u| <&[u8; 32]>::try_from(u).ok()) {
            Some(units) => {
                let (bad, packed) = scan16(units);
                if bad == 0 {
                    out.extend_from_slice(&packed.to_le_bytes());
                    i += 32;
                    continue;
                }
                (bad, packed, 16)
            }
            None => scan_tail(raw, i),
        };
        let plain = bad.trailing_zeros() as usize;
        if plain >= avail {
            return None;
        }
        let len = out.len();
        out.extend_from_slice(&packed.to_le_bytes());
        out.truncate(len + plain);
        i += 2 * plain;
        let unit = |i: usize| raw.get(i..i + 2).map(|u| u16::from_le_bytes([u[0], u[1]]));
        let u = unit(i)?;
        i += 2;
        if u == 0 {
            out.push(b'"');
            return Some(i);
        }
        if u < 0x80 {
            escape_byte(u as u8, out);
            continue;
        }
        push_non_ascii(u, raw, &mut i, out);
    }
}

/// [`scan16`] of the units left at `i` (fewer than sixteen; an odd last byte is no unit), with
/// the flag of the unit just past them set: `(flags, packed, units left)`. The window of
/// sixteen units ending there is scanned and shifted down (no copy), or, in a payload shorter
/// than that, a zero-padded copy.
#[inline(always)]
fn scan_tail(raw: &[u8], i: usize) -> (u32, u128, usize) {
    let avail = (raw.len() - i) / 2;
    if avail == 0 {
        return (1, 0, 0);
    }
    let skip = 16 - avail;
    let window = i
        .checked_sub(2 * skip)
        .and_then(|w| raw.get(w..w + 32))
        .and_then(|u| <&[u8; 32]>::try_from(u).ok());
    let (bad, packed) = match window {
        Some(units) => {
            let (bad, packed) = scan16(units);
            (bad >> skip, packed >> (8 * skip))
        }
        None => {
            let mut pad = [0u8; 32];
            pad[..2 * avail].copy_from_slice(&raw[i..i + 2 * avail]);
            scan16(&pad)
        }
    };
    (bad | 1 << avail, packed, avail)
}

/// Writes the non-ASCII unit `u` (read just before `*i`) as UTF-8: a high surrogate takes the
/// low one at `*i` with it; an unpaired surrogate (or one before the terminator) becomes
/// U+FFFD and the next unit is read on its own.
#[inline(always)]
fn push_non_ascii(u: u16, raw: &[u8], i: &mut usize, out: &mut Vec<u8>) {
    let unit = |i: usize| raw.get(i..i + 2).map(|u| u16::from_le_bytes([u[0], u[1]]));
    let c = match u {
        0xd800..=0xdbff => match unit(*i) {
            Some(lo @ 0xdc00..=0xdfff) => {
                *i += 2;
                let c = 0x10000 + ((u32::from(u) - 0xd800) << 10) + (u32::from(lo) - 0xdc00);
                char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER)
            }
            _ => char::REPLACEMENT_CHARACTER,
        },
        0xdc00..=0xdfff => char::REPLACEMENT_CHARACTER,
        _ => char::from_u32(u32::from(u)).unwrap_or(char::REPLACEMENT_CHARACTER),
    };
    let mut buf = [0u8; 4];
    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

/// Writes a name this crate spells (an enum value's, plain ASCII with nothing to escape) as a
/// JSON string, without looking for escapes.
#[inline]
pub fn write_plain(name: &'static str, out: &mut Vec<u8>) {
    debug_assert!(!name.bytes().any(|b| needs_escape(b) || b >= 0x80), "{name}");
    out.push(b'"');
    put(out, name.as_bytes());
    out.push(b'"');
}

/// Writes a UTF-16LE string as a JSON string (unpaired surrogates become U+FFFD).
pub fn write_utf16(s: &Utf16Str<'_>, out: &mut Vec<u8>) {
    out.push(b'"');
    let raw = s.as_bytes();
    out.reserve(raw.len() / 2 + 1);
    let word = |i: usize| -> Option<u64> {
        let b: [u8; 8] = raw.get(i..i + 8)?.try_into().ok()?;
        Some(u64::from_le_bytes(b))
    };
    let mut i = 0;
    while i + 1 < raw.len() {
        // Plain ASCII: sixteen, then four units at a time.
        while let Some(units) = raw.get(i..i + 32).and_then(|u| <&[u8; 32]>::try_from(u).ok()) {
            match plain16(units) {
                Some(b) => {
                    out.extend_from_slice(&b.to_le_bytes());
                    i += 32;
                }
                None => break,
            }
        }
        // A tail shorter than sixteen units (or four): the window of that size ending at
        // the string's end, overlapping units already written, checked at once; only the
        // tail's bytes are kept.
        let rest = raw.len() - i;
        if rest == 0 {
            break;
        }
        if rest < 32 && raw.len() >= 32 {
            let window = <&[u8; 32]>::try_from(&raw[raw.len() - 32..]).ok();
            if let Some(b) = window.and_then(plain16) {
                let len = out.len();
                out.extend_from_slice(&(b >> (4 * (32 - rest))).to_le_bytes());
                out.truncate(len + rest / 2);
                break;
            }
        }
        if let Some(a) = word(i).and_then(plain4) {
            out.extend_from_slice(&a.to_le_bytes());
            i += 8;
            continue;
        }
        if rest < 8
            && raw.len() >= 8
            && let Some(a) = word(raw.len() - 8).and_then(plain4)
        {
            let len = out.len();
            out.extend_from_slice(&(a >> (4 * (8 - rest))).to_le_bytes());
            out.truncate(len + rest / 2);
            break;
        }
        // One unit (or a surrogate pair) at a time.
        let unit = |i: usize| raw.get(i..i + 2).map(|u| u16::from_le_bytes([u[0], u[1]]));
        let Some(u) = unit(i) else { break };
        i += 2;
        if u < 0x80 {
            if needs_escape(u as u8) {
                escape_byte(u as u8, out);
            } else {
                out.push(u as u8);
            }
            continue;
        }
        push_non_ascii(u, raw, &mut i, out);
    }
    out.push(b'"');
}

/// The 16 lowercase hex digits of `v` as the bytes of a little-endian `u128` (most significant
/// digit in the lowest byte): all nibbles at once, in registers.
#[inline]
pub fn hex16(v: u64) -> u128 {
    u128::from(hex8((v >> 32) as u32)) | u128::from(hex8(v as u32)) << 64
}

/// The eight lowercase hex digits of `h` as the bytes of a little-endian `u64`, most
/// significant in the lowest byte.
#[inline(always)]
fn hex8(h: u32) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    // Byte k holds nibble k.
    let mut x = u64::from(h);
    x = (x | x << 16) & 0x0000_ffff_0000_ffff;
    x = (x | x << 8) & 0x00ff_00ff_00ff_00ff;
    x = (x | x << 4) & 0x0f0f_0f0f_0f0f_0f0f;
    // '0' + n, and 'a' - '0' - 10 more for n >= 10 (n + 6 carries into bit 4).
    let letters = ((x + 6 * ONES) >> 4) & ONES;
    (x + b'0' as u64 * ONES + letters * (b'a' - b'0' - 10) as u64).swap_bytes()
}

/// Appends `v` as `"0x…"` (lowercase, no leading zeros).
#[inline(always)]
pub fn put_hex_string(out: &mut Vec<u8>, v: u64) {
    let digits = (64 - v.leading_zeros() as usize).div_ceil(4).max(1);
    out.extend_from_slice(b"\"0x");
    let len = out.len();
    if digits <= 8 {
        // A 32-bit value (every handle of a 32-bit process): half the work.
        out.extend_from_slice(&(hex8(v as u32) >> (8 * (8 - digits))).to_le_bytes());
    } else {
        out.extend_from_slice(&(hex16(v) >> (8 * (16 - digits))).to_le_bytes());
    }
    out.truncate(len + digits);
    out.push(b'"');
}

/// The 32 lowercase hex digits of 16 bytes (the first byte's digits first), as two
/// little-endian `u128`s: SSE2, every nibble at once.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn hex32(bytes: u128) -> (u128, u128) {
    // SAFETY: the build targets x86-64 with SSE2 (cfg above), so the CPU has it.
    unsafe { hex32_sse2(bytes) }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[target_feature(enable = "sse2")]
fn hex32_sse2(bytes: u128) -> (u128, u128) {
    use std::arch::x86_64::{
        __m128i, _mm_add_epi8, _mm_and_si128, _mm_cmpgt_epi8, _mm_cvtsi128_si64, _mm_set_epi64x, _mm_set1_epi8,
        _mm_srli_epi16, _mm_unpackhi_epi8, _mm_unpackhi_epi64, _mm_unpacklo_epi8,
    };
    let v = _mm_set_epi64x((bytes >> 64) as i64, bytes as i64);
    let nibble = _mm_set1_epi8(0x0f);
    let high = _mm_and_si128(_mm_srli_epi16(v, 4), nibble);
    let low = _mm_and_si128(v, nibble);
    // '0' + n, and 'a' - '0' - 10 more above 9.
    let ascii = |n: __m128i| {
        let letters = _mm_and_si128(_mm_cmpgt_epi8(n, _mm_set1_epi8(9)), _mm_set1_epi8((b'a' - b'0' - 10) as i8));
        _mm_add_epi8(_mm_add_epi8(n, _mm_set1_epi8(b'0' as i8)), letters)
    };
    let to_u128 = |x: __m128i| {
        let lo = _mm_cvtsi128_si64(x) as u64;
        let hi = _mm_cvtsi128_si64(_mm_unpackhi_epi64(x, x)) as u64;
        u128::from(lo) | u128::from(hi) << 64
    };
    (to_u128(ascii(_mm_unpacklo_epi8(high, low))), to_u128(ascii(_mm_unpackhi_epi8(high, low))))
}

/// [`hex32`] without SSE2: two [`hex16`].
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn hex32(bytes: u128) -> (u128, u128) {
    let b = bytes.to_le_bytes();
    let word = |k: usize| u64::from_be_bytes(b[8 * k..8 * k + 8].try_into().unwrap_or_default());
    (hex16(word(0)), hex16(word(1)))
}

/// Writes bytes as one JSON string of lowercase hex digits.
pub fn write_hex(bytes: &[u8], out: &mut Vec<u8>) {
    out.reserve(bytes.len() * 2 + 2);
    out.push(b'"');
    // 16 bytes (32 digits) at a time, then 8.
    let mut wide = bytes.chunks_exact(16);
    for chunk in &mut wide {
        let mut b = [0u8; 16];
        b.copy_from_slice(chunk);
        let (first, second) = hex32(u128::from_le_bytes(b));
        out.extend_from_slice(&first.to_le_bytes());
        out.extend_from_slice(&second.to_le_bytes());
    }
    let mut chunks = wide.remainder().chunks_exact(8);
    for chunk in &mut chunks {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        out.extend_from_slice(&hex16(u64::from_be_bytes(b)).to_le_bytes());
    }
    for &b in chunks.remainder() {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 15)]);
    }
    out.push(b'"');
}

/// The eight decimal digits of `x` (below 10^8, leading zeros included) as byte values 0..=9,
/// the first digit in the lowest byte. All lanes at once, in a register: no digit goes through
/// memory (digits stored one by one and then copied as one wide load stall the store buffer).
#[inline(always)]
fn digits8(x: u32) -> u64 {
    let x = u64::from(x);
    // 32-bit lanes: the first four digits, the last four.
    let y = (x / 10_000) | ((x % 10_000) << 32);
    // 16-bit lanes: /100 and %100 of each (n * 10486 >> 20 is n / 100 below 10^4).
    let q = ((y * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let y = q | ((y - q * 100) << 16);
    // Bytes: /10 and %10 of each (n * 103 >> 10 is n / 10 below 100).
    let q = ((y * 103) >> 10) & 0x000f_000f_000f_000f;
    q | ((y - q * 10) << 8)
}

const ASCII_ZEROS: u64 = 0x3030_3030_3030_3030;

/// The number of decimal digits of `v` (1 for 0), from its bit length: a few operations, so
/// that where the next output goes does not wait for the digits.
#[inline(always)]
fn decimal_len(v: u64) -> usize {
    const POW10: [u64; 20] = {
        let mut p = [1u64; 20];
        let mut i = 1;
        while i < 20 {
            p[i] = p[i - 1] * 10;
            i += 1;
        }
        p
    };
    // 1233 / 4096 is just above log10(2): t is the length or one more.
    let x = v | 1;
    let t = (((64 - x.leading_zeros()) * 1233) >> 12) as usize;
    t + 1 - usize::from(x < POW10[t.min(19)])
}

/// Appends `v` (below 10^8) in decimal.
#[inline(always)]
fn put_below_1e8(out: &mut Vec<u8>, v: u32) {
    let n = decimal_len(u64::from(v));
    let d = digits8(v) + ASCII_ZEROS;
    let len = out.len();
    out.extend_from_slice(&(d >> (8 * (8 - n))).to_le_bytes());
    out.truncate(len + n);
}

/// Appends `v` in decimal. Inlined for the common values below 10^8.
#[inline(always)]
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    if v < 100_000_000 {
        put_below_1e8(out, v as u32);
    } else {
        put_large(out, v);
    }
}

/// [`put_u64`] of 10^8 and above.
#[inline(never)]
fn put_large(out: &mut Vec<u8>, v: u64) {
    let n = decimal_len(v);
    let (head, low) = (v / 100_000_000, (v % 100_000_000) as u32);
    let low = digits8(low) + ASCII_ZEROS;
    let len = out.len();
    if head < 100_000_000 {
        // The head's digits without leading zeros, then all eight low digits: two
        // overlapping stores.
        let h = n - 8;
        let d = digits8(head as u32) + ASCII_ZEROS;
        out.extend_from_slice(&[0u8; 16]);
        let dst = &mut out[len..len + 16];
        dst[..8].copy_from_slice(&(d >> (8 * (8 - h))).to_le_bytes());
        dst[h..h + 8].copy_from_slice(&low.to_le_bytes());
        out.truncate(len + n);
    } else {
        put_large(out, head);
        out.extend_from_slice(&low.to_le_bytes());
    }
}

/// Writes values that mostly grow by little (a stream's timestamps) in decimal, keeping the
/// digits above the last six of the last value written: a value in the same million then
/// costs its last six digits.
#[derive(Debug, Default)]
pub struct NearbyU64 {
    /// `v / 10^6` of the last value of 10^6 and above (0: none yet), its digits and their count.
    high: u64,
    spelled: [u8; 16],
    len: usize,
}

impl NearbyU64 {
    /// Appends `v` in decimal (what [`put_u64`] appends).
    #[inline(always)]
    pub fn put(&mut self, out: &mut Vec<u8>, v: u64) {
        if v < 1_000_000 {
            put_u64(out, v);
            return;
        }
        let high = v / 1_000_000;
        if high != self.high {
            self.spell(high);
        }
        let low = (v - high * 1_000_000) as u32;
        let len = out.len();
        out.extend_from_slice(&self.spelled);
        out.truncate(len + self.len);
        // The six low digits of the eight (the first two are zeros).
        out.extend_from_slice(&((digits8(low) + ASCII_ZEROS) >> 16).to_le_bytes());
        out.truncate(len + self.len + 6);
    }

    /// Remembers the digits of `high` (1 to 10^14).
    #[inline(never)]
    fn spell(&mut self, high: u64) {
        let n = decimal_len(high);
        let mut b = [0u8; 24];
        if high < 100_000_000 {
            let d = digits8(high as u32) + ASCII_ZEROS;
            b[..8].copy_from_slice(&(d >> (8 * (8 - n))).to_le_bytes());
        } else {
            let h = n - 8;
            let d = digits8((high / 100_000_000) as u32) + ASCII_ZEROS;
            b[..8].copy_from_slice(&(d >> (8 * (8 - h))).to_le_bytes());
            b[h..h + 8].copy_from_slice(&(digits8((high % 100_000_000) as u32) + ASCII_ZEROS).to_le_bytes());
        }
        self.spelled.copy_from_slice(&b[..16]);
        self.high = high;
        self.len = n;
    }
}

/// A few fields gathered in a fixed array whose length stays in a register (appends to a `Vec`
/// reload and store its length around every byte they write: a `u8` store may alias it),
/// then appended at once. Up to `N - 32` bytes.
pub(crate) struct Local<const N: usize> {
    b: [u8; N],
    n: usize,
}

impl<const N: usize> Local<N> {
    #[inline(always)]
    pub fn new() -> Self {
        Local { b: [0; N], n: 0 }
    }

    /// Appends up to 32 bytes.
    #[inline(always)]
    pub fn put(&mut self, s: &[u8]) {
        let n = s.len().min(32);
        let mut fixed = [0u8; 32];
        fixed[..n].copy_from_slice(&s[..n]);
        if let Some(d) = self.b.get_mut(self.n..self.n + 32) {
            d.copy_from_slice(&fixed);
            self.n += n;
        }
    }

    /// Appends the first `n` of `bytes` (a copy of a fixed size).
    #[inline(always)]
    pub fn put_word<const K: usize>(&mut self, bytes: [u8; K], n: usize) {
        if let Some(d) = self.b.get_mut(self.n..self.n + K) {
            d.copy_from_slice(&bytes);
            self.n += n.min(K);
        }
    }

    /// A [`Key`]'s JSON spelling, separator included (`first`: without it).
    #[inline(always)]
    pub fn key(&mut self, key: &Key, first: bool) {
        let skip = usize::from(first);
        let n = key.json_len - skip;
        if let Some(padded) = key.json.get(skip..skip + KEY_PAD) {
            let mut fixed = [0u8; KEY_PAD];
            fixed.copy_from_slice(padded);
            self.put_word(fixed, n);
        }
    }

    /// `v` as `"0x…"` ([`put_hex_string`]).
    #[inline(always)]
    pub fn hex(&mut self, v: u64) {
        let digits = (64 - v.leading_zeros() as usize).div_ceil(4).max(1);
        self.put_word(*b"\"0x\0", 3);
        if digits <= 8 {
            self.put_word((hex8(v as u32) >> (8 * (8 - digits))).to_le_bytes(), digits);
        } else {
            self.put_word((hex16(v) >> (8 * (16 - digits))).to_le_bytes(), digits);
        }
        self.put_word([b'"'], 1);
    }

    /// `v` in decimal ([`put_u64`]).
    #[inline(always)]
    pub fn dec(&mut self, v: u32) {
        let n = decimal_len(u64::from(v));
        if v < 100_000_000 {
            self.put_word(((digits8(v) + ASCII_ZEROS) >> (8 * (8 - n))).to_le_bytes(), n);
        } else {
            // Ten digits at most: the head's one or two, then eight.
            let h = n - 8;
            let d = digits8(v / 100_000_000) + ASCII_ZEROS;
            self.put_word((d >> (8 * (8 - h))).to_le_bytes(), h);
            self.put_word((digits8(v % 100_000_000) + ASCII_ZEROS).to_le_bytes(), 8);
        }
    }

    /// Appends what was gathered to `out`.
    #[inline(always)]
    pub fn flush(&self, out: &mut Vec<u8>) {
        let len = out.len();
        out.extend_from_slice(&self.b);
        out.truncate(len + self.n);
    }
}

/// Appends `v` in decimal.
#[inline(always)]
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    put_u64(out, u64::from(v));
}

macro_rules! int_json {
    ($($t:ty => $put:ident as $w:ty),*) => {$(
        impl ToJson for $t {
            #[inline]
            fn write_json(&self, out: &mut Vec<u8>) {
                if *self < 0 {
                    out.push(b'-');
                }
                $put(out, self.unsigned_abs() as $w);
            }
        }
    )*};
}
int_json!(i8 => put_u32 as u32, i16 => put_u32 as u32, i32 => put_u32 as u32, i64 => put_u64 as u64);

macro_rules! uint_json {
    ($($t:ty => $put:ident as $w:ty),*) => {$(
        impl ToJson for $t {
            #[inline]
            fn write_json(&self, out: &mut Vec<u8>) {
                $put(out, *self as $w);
            }
        }
    )*};
}
uint_json!(u8 => put_u32 as u32, u16 => put_u32 as u32, u32 => put_u32 as u32, u64 => put_u64 as u64, usize => put_u64 as u64);

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
        for n in 0..80 {
            let bytes: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37)).collect();
            let mut out = Vec::new();
            write_hex(&bytes, &mut out);
            let want: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(out, format!("\"{want}\"").into_bytes());
        }
    }

    /// A xorshift stream for the randomized comparisons below.
    fn rng(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// A UTF-16 unit drawn mostly from printable ASCII, with quotes, backslashes, controls,
    /// non-ASCII and surrogates (paired and not) mixed in.
    fn pick(r: u64) -> u16 {
        match r % 16 {
            0 => b'"' as u16,
            1 => b'\\' as u16,
            2 => (r >> 8) as u16 % 0x20,
            3 => 0x7f + (r >> 8) as u16 % 0x100,
            4 => 0xd800 + (r >> 8) as u16 % 0x800,
            5 => 0xe000 + (r >> 8) as u16 % 0x2000,
            6 => 0x8000 + (r >> 8) as u16 % 0x100,
            _ => 0x20 + (r >> 8) as u16 % 0x5f,
        }
    }

    #[test]
    fn utf16_fast_paths_equal_the_plain_decode() {
        let mut next = rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            let len = (next() % 70) as usize;
            let plain_run = next().is_multiple_of(3);
            let units: Vec<u16> = (0..len)
                .map(|_| {
                    let r = next();
                    if plain_run { b'a' as u16 + (r % 26) as u16 } else { pick(r) }
                })
                .collect();
            let raw: Vec<u8> = units.iter().flat_map(|u| u.to_le_bytes()).collect();
            let decoded: String =
                char::decode_utf16(units.iter().copied()).map(|r| r.unwrap_or(char::REPLACEMENT_CHARACTER)).collect();
            assert_eq!(json(&Utf16Str::from_raw(&raw)), serde_json_like(&decoded), "{units:x?}");
        }
    }

    #[test]
    fn utf16z_in_one_pass_equals_find_then_write() {
        let mut next = rng(0x51f1_5eed_0bad_cafe);
        for _ in 0..30_000 {
            let len = (next() % 70) as usize;
            let plain_run = next().is_multiple_of(3);
            let mut raw: Vec<u8> = (0..len)
                .flat_map(|_| {
                    let r = next();
                    let u = if plain_run { b'a' as u16 + (r % 26) as u16 } else { pick(r) };
                    u.to_le_bytes()
                })
                .collect();
            // A terminator (or none), then a tail, maybe of odd length, maybe with a
            // NUL byte pair off the 2-byte grid.
            match next() % 4 {
                0 => {}
                1 => raw.push(0),
                _ => raw.extend_from_slice(&[0, 0]),
            }
            let tail = (next() % 12) as usize;
            raw.extend((0..tail).map(|_| if next().is_multiple_of(4) { 0 } else { b'x' }));
            let mut c = crate::reader::Cursor::new(&raw, 8, "t").unwrap();
            let want = c.utf16z("s").ok().map(|s| (json(&s), c.position()));
            let mut out = b"head".to_vec();
            let got = write_utf16z(&raw, &mut out).map(|n| (String::from_utf8(out[4..].to_vec()).unwrap(), n));
            assert_eq!(got, want, "{raw:x?}");
        }
    }

    #[test]
    fn hex_digits_equal_the_format() {
        let mut next = rng(0x1234_5678_9abc_def1);
        for v in (0..64).map(|s| 1u64 << s).chain([0, u64::MAX]).chain((0..10_000).map(|_| {
            let r = next();
            r >> (r % 64)
        })) {
            assert_eq!(hex16(v).to_le_bytes(), *format!("{v:016x}").as_bytes(), "{v:x}");
            let mut out = Vec::new();
            put_hex_string(&mut out, v);
            assert_eq!(out, format!("\"0x{v:x}\"").into_bytes());
        }
    }

    #[test]
    fn integers_print_like_display() {
        let mut next = rng(0xdead_beef_cafe_f00d);
        let mut values: Vec<u64> = vec![0, 9, 10, 99, 100, 101, 999, 1000, u64::MAX, u64::from(u32::MAX)];
        values.extend((0..20).map(|k| 10u64.pow(k)));
        values.extend((1..20).map(|k| 10u64.pow(k) - 1));
        values.extend((0..20_000).map(|_| {
            let r = next();
            r >> (r % 64)
        }));
        for v in values {
            assert_eq!(json(&v), v.to_string());
            assert_eq!(json(&(v as u32)), (v as u32).to_string());
            assert_eq!(json(&(v as i64)), (v as i64).to_string());
            assert_eq!(json(&(v as i32)), (v as i32).to_string());
            assert_eq!(json(&(v as i16)), (v as i16).to_string());
            assert_eq!(json(&(v as i8)), (v as i8).to_string());
            assert_eq!(json(&(v as u16)), (v as u16).to_string());
            assert_eq!(json(&(v as u8)), (v as u8).to_string());
        }
        assert_eq!(json(&i64::MIN), i64::MIN.to_string());
    }

    #[test]
    fn local_fields_print_like_display() {
        let mut next = rng(0x10ca_1f1e_1d5a_beef);
        for k in 0..50_000 {
            let r = next();
            let v = if k < 64 { 1u64 << k } else { r >> (r % 64) };
            let mut l = Local::<96>::new();
            l.put(b"{");
            l.key(&crate::key!("A"), true);
            l.dec(v as u32);
            l.key(&crate::key!("B"), false);
            l.dec(v as u32);
            l.key(&crate::key!("C"), false);
            l.hex(v);
            let mut out = b"x".to_vec();
            l.flush(&mut out);
            assert_eq!(String::from_utf8(out).unwrap(), format!("x{{\"A\":{},\"B\":{},\"C\":\"0x{v:x}\"", v as u32, v as u32));
        }
    }

    #[test]
    fn nearby_values_print_like_display() {
        let mut next = rng(0x7e57_ca5e_0ff1_ce00);
        let mut w = NearbyU64::default();
        let mut v = 0u64;
        for k in 0..200_000u32 {
            let r = next();
            v = match k % 1000 {
                0 => r >> (r % 64),
                1 => u64::MAX - r % 3_000_000,
                _ => v.wrapping_add(r % if r.is_multiple_of(5) { 10_000_000 } else { 1000 }),
            };
            let mut out = b"x".to_vec();
            w.put(&mut out, v);
            assert_eq!(out[1..], *v.to_string().as_bytes(), "{v}");
        }
    }

    #[test]
    fn keys_spell_like_names() {
        for style in [Style::Json, Style::Text] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let mut f = Fields::begin(&mut a, style);
            f.field("Count", &7u32).opt("No", &None::<u8>).field("Name", "x");
            f.end();
            let mut f = Fields::begin(&mut b, style);
            f.field(&crate::key!("Count"), &7u32)
                .opt(&crate::key!("No"), &None::<u8>)
                .field(&crate::key!("Name"), "x");
            f.end();
            assert_eq!(a, b);
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
