//! Writes event payloads field by field, little-endian, as the runtime lays them out (the
//! manifest's field types). Tests of every transport build their events with it.

/// Builds a payload field by field, little-endian, as the runtime writes it.
#[derive(Default, Clone, Debug)]
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
