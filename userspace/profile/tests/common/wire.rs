//! A minimal protobuf wire-format walker, independent of prost and of the crate's reader, used
//! to check the pprof bytes against profile.proto's field numbers.
#![allow(dead_code)]

#[derive(Debug, Clone, Copy)]
pub enum Val<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

pub fn varint(buf: &[u8], pos: &mut usize) -> u64 {
    let mut out = 0u64;
    for shift in (0..64).step_by(7) {
        let b = buf[*pos];
        *pos += 1;
        out |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return out;
        }
    }
    panic!("varint longer than 10 bytes");
}

/// All (field number, value) pairs of one message, in order.
pub fn fields(buf: &[u8]) -> Vec<(u64, Val<'_>)> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < buf.len() {
        let key = varint(buf, &mut pos);
        let (field, wire) = (key >> 3, key & 7);
        let v = match wire {
            0 => Val::Varint(varint(buf, &mut pos)),
            1 => {
                let v = u64::from_le_bytes(buf[pos..pos + 8].try_into().unwrap());
                pos += 8;
                Val::Fixed64(v)
            }
            2 => {
                let len = varint(buf, &mut pos) as usize;
                let v = &buf[pos..pos + len];
                pos += len;
                Val::Bytes(v)
            }
            5 => {
                let v = u32::from_le_bytes(buf[pos..pos + 4].try_into().unwrap());
                pos += 4;
                Val::Fixed32(v)
            }
            w => panic!("unexpected wire type {w} for field {field}"),
        };
        out.push((field, v));
    }
    out
}

/// Values of a repeated integer field (packed or not).
pub fn ints(msg: &[(u64, Val<'_>)], field: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for (f, v) in msg {
        if *f != field {
            continue;
        }
        match v {
            Val::Varint(x) => out.push(*x),
            Val::Bytes(b) => {
                let mut pos = 0;
                while pos < b.len() {
                    out.push(varint(b, &mut pos));
                }
            }
            other => panic!("field {field}: not an integer: {other:?}"),
        }
    }
    out
}

/// A singular integer field, 0 when absent (proto3 default).
pub fn int(msg: &[(u64, Val<'_>)], field: u64) -> u64 {
    ints(msg, field).last().copied().unwrap_or(0)
}

/// Sub-messages / byte strings of a field.
pub fn bytes<'a>(msg: &[(u64, Val<'a>)], field: u64) -> Vec<&'a [u8]> {
    msg.iter()
        .filter(|(f, _)| *f == field)
        .map(|(_, v)| match v {
            Val::Bytes(b) => *b,
            other => panic!("field {field}: not length-delimited: {other:?}"),
        })
        .collect()
}
