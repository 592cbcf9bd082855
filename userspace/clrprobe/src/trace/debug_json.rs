//! The typed runtime events' fields as JSON, from their `Debug` text (derived, one line):
//! `Name { a: 1, b: Some("x") }` → `{"a":1,"b":"x"}`; `Some(v)` and other one-field tuples →
//! `v`; `None` → `null`; a bare name (a unit variant such as a GC reason) → `"Name"`;
//! `[..]` and `(..)` → arrays; Rust string and char literals → JSON strings; NaN and infinity
//! → `null`. One pass, no intermediate values: the dump stays a stream.
use std::fmt::Write as _;

/// Converts one `Debug` value to JSON, appending to `out`. Returns false (and leaves `out`
/// holding a JSON string of the raw text) when the text is not of the shape above.
pub fn convert(debug: &str, out: &mut String) -> bool {
    let start = out.len();
    let mut p = Parser { src: debug, s: debug.as_bytes(), i: 0 };
    if p.value(out).is_some() && p.rest_is_blank() {
        return true;
    }
    out.truncate(start);
    json_string(debug, out);
    false
}

/// The leading identifier of a `Debug` text (the variant name), and the rest of it.
pub fn variant(debug: &str) -> (&str, &str) {
    let end = debug.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(debug.len());
    (&debug[..end], &debug[end..])
}

pub fn json_string(s: &str, out: &mut String) {
    out.push('"');
    // Most strings need no escaping: copy them whole.
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

struct Parser<'a> {
    /// The text; `s` is its bytes. Slices cut at ASCII bytes are `str` slices of it.
    src: &'a str,
    s: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn blank(&mut self) {
        while self.peek() == Some(b' ') {
            self.i += 1;
        }
    }

    fn rest_is_blank(&mut self) -> bool {
        self.blank();
        self.i == self.s.len()
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        self.blank();
        (self.peek() == Some(b)).then(|| self.i += 1)
    }

    fn ident(&mut self) -> &'a str {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
            self.i += 1;
        }
        let src: &'a str = self.src;
        src.get(start..self.i).unwrap_or("")
    }

    fn value(&mut self, out: &mut String) -> Option<()> {
        self.blank();
        match self.peek()? {
            b'"' => self.string(b'"', out),
            b'\'' => self.string(b'\'', out),
            b'[' => {
                self.i += 1;
                self.seq(b']', out)
            }
            b'(' => {
                self.i += 1;
                self.seq(b')', out)
            }
            b'{' => {
                self.i += 1;
                self.fields(out)
            }
            c if c == b'-' || c.is_ascii_digit() => self.number(out),
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let name = self.ident();
                self.blank();
                match self.peek() {
                    Some(b'{') => {
                        self.i += 1;
                        self.fields(out)
                    }
                    Some(b'(') => {
                        self.i += 1;
                        // One field: the value itself (Some(x), newtypes); more: an array.
                        let mark = out.len();
                        let n = self.items(b')', out)?;
                        if n != 1 {
                            let inner = out[mark..].to_owned();
                            out.truncate(mark);
                            out.push('[');
                            out.push_str(&inner);
                            out.push(']');
                        }
                        Some(())
                    }
                    _ => {
                        match name {
                            "None" => out.push_str("null"),
                            "true" | "false" => out.push_str(name),
                            "NaN" | "inf" => out.push_str("null"),
                            _ => json_string(name, out),
                        }
                        Some(())
                    }
                }
            }
            _ => None,
        }
    }

    /// Comma-separated values up to `close`, written with commas; returns how many.
    fn items(&mut self, close: u8, out: &mut String) -> Option<usize> {
        let mut n = 0;
        loop {
            self.blank();
            if self.peek()? == close {
                self.i += 1;
                return Some(n);
            }
            if n > 0 {
                self.eat(b',')?;
                self.blank();
                if self.peek()? == close {
                    self.i += 1;
                    return Some(n);
                }
                out.push(',');
            }
            self.value(out)?;
            n += 1;
        }
    }

    fn seq(&mut self, close: u8, out: &mut String) -> Option<()> {
        out.push('[');
        self.items(close, out)?;
        out.push(']');
        Some(())
    }

    fn fields(&mut self, out: &mut String) -> Option<()> {
        out.push('{');
        let mut first = true;
        loop {
            self.blank();
            match self.peek()? {
                b'}' => {
                    self.i += 1;
                    out.push('}');
                    return Some(());
                }
                b',' if !first => {
                    self.i += 1;
                    continue;
                }
                b'.' => {
                    // `..` of a non-exhaustive Debug.
                    self.i += 2;
                    continue;
                }
                _ => {}
            }
            let key = self.ident();
            if key.is_empty() {
                return None;
            }
            self.eat(b':')?;
            if !first {
                out.push(',');
            }
            first = false;
            json_string(key, out);
            out.push(':');
            self.value(out)?;
        }
    }

    fn number(&mut self, out: &mut String) -> Option<()> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'+' || c == b'-') {
            self.i += 1;
        }
        let src: &'a str = self.src;
        let text = src.get(start..self.i)?;
        let digits = text.strip_prefix('-').unwrap_or(text);
        if text.ends_with("inf") {
            out.push_str("null");
        } else if (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())) || text.parse::<f64>().is_ok() {
            out.push_str(text);
        } else {
            return None;
        }
        Some(())
    }

    /// A Rust string or char literal as written by `Debug`, re-escaped for JSON.
    fn string(&mut self, quote: u8, out: &mut String) -> Option<()> {
        self.i += 1;
        // Fast path: no escape before the closing quote.
        let src: &'a str = self.src;
        let rest = &self.s[self.i..];
        if let Some(end) = rest.iter().position(|&b| b == quote || b == b'\\')
            && rest[end] == quote
        {
            json_string(src.get(self.i..self.i + end)?, out);
            self.i += end + 1;
            return Some(());
        }
        let mut text = String::new();
        loop {
            let c = self.peek()?;
            self.i += 1;
            match c {
                c if c == quote => break,
                b'\\' => {
                    let e = self.peek()?;
                    self.i += 1;
                    match e {
                        b'n' => text.push('\n'),
                        b'r' => text.push('\r'),
                        b't' => text.push('\t'),
                        b'0' => text.push('\0'),
                        b'u' => {
                            self.eat(b'{')?;
                            let start = self.i;
                            while self.peek()? != b'}' {
                                self.i += 1;
                            }
                            let hex = std::str::from_utf8(&self.s[start..self.i]).ok()?;
                            self.i += 1;
                            text.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
                        }
                        other => text.push(other as char),
                    }
                }
                _ => {
                    // Copy the whole UTF-8 sequence.
                    let start = self.i - 1;
                    let len = utf8_len(c);
                    self.i = start + len;
                    text.push_str(std::str::from_utf8(self.s.get(start..start + len)?).ok()?);
                }
            }
        }
        json_string(&text, out);
        Some(())
    }
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xf0..=0xff => 4,
        0xe0..=0xef => 3,
        0xc0..=0xdf => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn j(s: &str) -> serde_json::Value {
        let mut out = String::new();
        assert!(convert(s, &mut out), "{s} → {out}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{s} → {out}: {e}"))
    }

    #[test]
    fn debug_shapes_become_json_values() {
        use serde_json::json;
        assert_eq!(
            j("GcStart { count: 7, depth: Some(2), reason: Induced, kind: None, f: -1.5, ok: true }"),
            json!({"count": 7, "depth": 2, "reason": "Induced", "kind": null, "f": -1.5, "ok": true})
        );
        assert_eq!(j(r#"X { name: "a \"q\" \u{e9}\n", c: 'x', v: [1, 2], t: (3, "y") }"#), json!({"name": "a \"q\" é\n", "c": "x", "v": [1, 2], "t": [3, "y"]}));
        assert_eq!(j("Wrapper(Inner { a: 1 })"), json!({"a": 1}));
        assert_eq!(j("Pair(1, 2)"), json!([1, 2]));
        assert_eq!(j("E { x: NaN, y: inf, z: -inf }"), json!({"x": null, "y": null, "z": null}));
        assert_eq!(j("Unit"), json!("Unit"));
        assert_eq!(j("S { a: 1, .. }"), json!({"a": 1}));
        let mut out = String::new();
        assert!(!convert("S { a: @ }", &mut out));
        assert_eq!(serde_json::from_str::<serde_json::Value>(&out).unwrap(), json!("S { a: @ }"));
        assert_eq!(variant("GcStart(GcStart { count: 1 })"), ("GcStart", "(GcStart { count: 1 })"));
    }
}
