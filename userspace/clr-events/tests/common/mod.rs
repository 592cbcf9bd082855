//! Test helpers: a payload builder that writes manifest fields one by one, and a checker that
//! decodes a payload exactly, with a longer tail, and at every truncated length.
#![allow(dead_code)]

use clr_events::{ClrEvent, DecodeError, RawEvent, decode};

/// Builds a payload field by field, little-endian, as the runtime writes it.
#[derive(Default, Clone)]
pub struct Payload {
    pub buf: Vec<u8>,
    pub pointer_size: u8,
}

impl Payload {
    pub fn new(pointer_size: u8) -> Self {
        Payload {
            buf: Vec::new(),
            pointer_size,
        }
    }
    pub fn u8(mut self, v: u8) -> Self {
        self.buf.push(v);
        self
    }
    pub fn u16(mut self, v: u16) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i16(mut self, v: i16) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(mut self, v: u32) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i32(mut self, v: i32) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i64(mut self, v: i64) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn f32(mut self, v: f32) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn f64(mut self, v: f64) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// win:Pointer: 4 or 8 bytes.
    pub fn ptr(self, v: u64) -> Self {
        if self.pointer_size == 4 {
            self.u32(v as u32)
        } else {
            self.u64(v)
        }
    }
    /// win:UnicodeString: UTF-16LE + NUL.
    pub fn str(mut self, s: &str) -> Self {
        for u in s.encode_utf16() {
            self.buf.extend_from_slice(&u.to_le_bytes());
        }
        self.buf.extend_from_slice(&[0, 0]);
        self
    }
    /// win:GUID from its text form's fields.
    pub fn guid(mut self, d1: u32, d2: u16, d3: u16, d4: [u8; 8]) -> Self {
        self.buf.extend_from_slice(&d1.to_le_bytes());
        self.buf.extend_from_slice(&d2.to_le_bytes());
        self.buf.extend_from_slice(&d3.to_le_bytes());
        self.buf.extend_from_slice(&d4);
        self
    }
    pub fn bytes(mut self, b: &[u8]) -> Self {
        self.buf.extend_from_slice(b);
        self
    }
}

pub fn raw<'a>(
    provider: &'a str,
    id: u16,
    version: u8,
    pointer_size: u8,
    payload: &'a [u8],
) -> RawEvent<'a> {
    RawEvent {
        provider,
        event_id: id,
        version,
        payload,
        pointer_size,
    }
}

/// Decodes `p` for (provider, id, version) and hands the result to `check`; then checks that a
/// longer payload decodes to the same event and that every shorter prefix is an error whose
/// message names `layout`.
pub fn check_event(
    provider: &str,
    id: u16,
    version: u8,
    p: &Payload,
    layout: &str,
    check: impl Fn(&ClrEvent<'_>),
) {
    let ev = decode(&raw(provider, id, version, p.pointer_size, &p.buf))
        .unwrap_or_else(|e| panic!("{layout}: full payload failed: {e}"));
    check(&ev);

    let mut longer = p.buf.clone();
    longer.extend_from_slice(&[0xAB, 0xCD, 0x00, 0x00, 0x17, 0x2A, 0xFF]);
    let ev_long = decode(&raw(provider, id, version, p.pointer_size, &longer))
        .unwrap_or_else(|e| panic!("{layout}: longer payload failed: {e}"));
    assert_eq!(
        ev_long, ev,
        "{layout}: tail bytes changed the decoded event"
    );

    for n in 0..p.buf.len() {
        match decode(&raw(provider, id, version, p.pointer_size, &p.buf[..n])) {
            Ok(ev) => panic!(
                "{layout}: truncated to {n}/{} bytes decoded as {ev:?}",
                p.buf.len()
            ),
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(layout),
                    "{layout}: error for {n} bytes does not name the layout: {msg}"
                );
                assert!(
                    matches!(
                        e,
                        DecodeError::Truncated { .. }
                            | DecodeError::UnterminatedString { .. }
                            | DecodeError::CountTooLarge { .. }
                    ),
                    "{layout}: unexpected error kind {e:?}"
                );
            }
        }
    }
}
