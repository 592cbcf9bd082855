//! Runtime events written as JSON straight from their payload, in one pass: what decoding them
//! ([`crate::decode_as`]) and [`ClrEvent::write_fields`](crate::ClrEvent::write_fields) write,
//! without the decoded value in between (strings are escaped in the pass that finds their end,
//! [`json::write_utf16z`]). For the events a dump sees by the ten thousand: verbose method
//! events (rundown), allocation ticks, CPU samples and the GC suspension events.
//!
//! ```
//! use clr_events::direct_json::{Direct, write_direct_json};
//! use clr_events::Family;
//!
//! let (kind, name) = Direct::of(Family::SampleProfiler, 0).unwrap();
//! let mut out = Vec::new();
//! assert!(write_direct_json(kind, &2u32.to_le_bytes(), 0, 8, &mut out));
//! assert_eq!((name, out.as_slice()), ("ThreadSample", &br#"{"Type":"Managed"}"#[..]));
//! ```

use crate::Family;
use crate::alloc::HeapKind;
use crate::event_json::Hex;
use crate::gc_enums::SuspendReason;
use crate::json::{self, Fields, Style};
use crate::key;

/// A layout [`write_direct_json`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direct {
    /// Method{Load,Unload}Verbose, MethodDC{Start,End}Verbose.
    MethodVerbose,
    /// GCAllocationTick, versions 0–4.
    AllocationTick,
    /// The sample profiler's ThreadSample.
    ThreadSample,
    /// GCSuspendEEBegin.
    SuspendEeBegin,
    /// GCSuspendEEEnd, GCRestartEEBegin, GCRestartEEEnd: a ClrInstanceID from version 1.
    ClrInstanceOnly,
}

impl Direct {
    /// The layout of the family's event `event_id` and the event's name, when it is written
    /// directly.
    pub fn of(family: Family, event_id: u16) -> Option<(Direct, &'static str)> {
        use crate::ids::{rundown as d, runtime as r, sample_profiler as s};
        use Direct as D;
        Some(match (family, event_id) {
            (Family::Runtime, r::METHOD_LOAD_VERBOSE) => (D::MethodVerbose, "MethodLoadVerbose"),
            (Family::Runtime, r::METHOD_UNLOAD_VERBOSE) => (D::MethodVerbose, "MethodUnloadVerbose"),
            (Family::Rundown, d::METHOD_DC_START_VERBOSE) => (D::MethodVerbose, "MethodDCStartVerbose"),
            (Family::Rundown, d::METHOD_DC_END_VERBOSE) => (D::MethodVerbose, "MethodDCEndVerbose"),
            (Family::Runtime, r::GC_ALLOCATION_TICK) => (D::AllocationTick, "GCAllocationTick"),
            (Family::SampleProfiler, s::THREAD_SAMPLE) => (D::ThreadSample, "ThreadSample"),
            (Family::Runtime, r::GC_SUSPEND_EE_BEGIN) => (D::SuspendEeBegin, "GCSuspendEEBegin"),
            (Family::Runtime, r::GC_SUSPEND_EE_END) => (D::ClrInstanceOnly, "GCSuspendEEEnd"),
            (Family::Runtime, r::GC_RESTART_EE_BEGIN) => (D::ClrInstanceOnly, "GCRestartEEBegin"),
            (Family::Runtime, r::GC_RESTART_EE_END) => (D::ClrInstanceOnly, "GCRestartEEEnd"),
            _ => return None,
        })
    }
}

/// Writes the event's fields as a JSON object; false when the payload does not decode (`out`
/// is then as it was, and [`crate::decode_as`] gives the error).
#[inline]
pub fn write_direct_json(kind: Direct, payload: &[u8], version: u8, pointer_size: u8, out: &mut Vec<u8>) -> bool {
    let mark = out.len();
    let wide = match pointer_size {
        4 => false,
        8 => true,
        _ => return false,
    };
    let p = Payload(payload);
    let written = match kind {
        Direct::MethodVerbose => method_verbose(p, version, out),
        Direct::AllocationTick => allocation_tick(p, version, wide, out),
        Direct::ThreadSample => thread_sample(p, out),
        Direct::SuspendEeBegin => suspend_begin(p, version, out),
        Direct::ClrInstanceOnly => clr_instance_only(p, version, out),
    };
    if written.is_none() {
        out.truncate(mark);
    }
    written.is_some()
}

/// Little-endian reads at a position; `None` past the end.
#[derive(Clone, Copy)]
struct Payload<'a>(&'a [u8]);

impl<'a> Payload<'a> {
    #[inline(always)]
    fn u64(self, i: usize) -> Option<u64> {
        Some(u64::from_le_bytes(self.0.get(i..i + 8)?.try_into().ok()?))
    }
    #[inline(always)]
    fn u32(self, i: usize) -> Option<u32> {
        Some(u32::from_le_bytes(self.0.get(i..i + 4)?.try_into().ok()?))
    }
    #[inline(always)]
    fn u16(self, i: usize) -> Option<u16> {
        Some(u16::from_le_bytes(self.0.get(i..i + 2)?.try_into().ok()?))
    }
    /// A pointer-sized value and its size.
    #[inline(always)]
    fn pointer(self, i: usize, wide: bool) -> Option<(u64, usize)> {
        if wide { Some((self.u64(i)?, 8)) } else { Some((u64::from(self.u32(i)?), 4)) }
    }
    #[inline(always)]
    fn from(self, i: usize) -> Option<&'a [u8]> {
        self.0.get(i..)
    }
}

#[inline(always)]
fn method_verbose(p: Payload<'_>, version: u8, out: &mut Vec<u8>) -> Option<()> {
    // The fixed fields (180 bytes at most) gathered first.
    let mut l = json::Local::<224>::new();
    l.put(b"{");
    l.key(&key!("MethodID"), true);
    l.hex(p.u64(0)?);
    l.key(&key!("ModuleID"), false);
    l.hex(p.u64(8)?);
    l.key(&key!("MethodStartAddress"), false);
    l.hex(p.u64(16)?);
    l.key(&key!("MethodSize"), false);
    l.dec(p.u32(24)?);
    l.key(&key!("MethodToken"), false);
    l.dec(p.u32(28)?);
    l.key(&key!("MethodFlags"), false);
    l.dec(p.u32(32)?);
    l.flush(out);
    let mut f = Fields::continued(out, Style::Json);
    let mut pos = 36;
    for k in [key!("MethodNamespace"), key!("MethodName"), key!("MethodSignature")] {
        pos += json::write_utf16z(p.from(pos)?, f.key_of(&k))?;
    }
    if version >= 1 {
        f.field(&key!("ClrInstanceID"), &p.u16(pos)?);
        pos += 2;
    }
    if version >= 2 {
        f.field(&key!("ReJITID"), &p.u64(pos)?);
    }
    f.end();
    Some(())
}

#[inline(always)]
fn allocation_tick(p: Payload<'_>, version: u8, wide: bool, out: &mut Vec<u8>) -> Option<()> {
    let mut f = Fields::begin(out, Style::Json);
    f.field(&key!("AllocationAmount"), &p.u32(0)?)
        .field(&key!("AllocationKind"), &HeapKind::from_allocation_kind(p.u32(4)?));
    let mut pos = 8;
    if version >= 1 {
        f.field(&key!("ClrInstanceID"), &p.u16(pos)?);
        pos += 2;
    }
    if version >= 2 {
        f.field(&key!("AllocationAmount64"), &p.u64(pos)?);
        let (type_id, n) = p.pointer(pos + 8, wide)?;
        f.field(&key!("TypeID"), &Hex(type_id));
        pos += 8 + n;
        pos += json::write_utf16z(p.from(pos)?, f.key_of(&key!("TypeName")))?;
        f.field(&key!("HeapIndex"), &p.u32(pos)?);
        pos += 4;
    }
    if version >= 3 {
        let (address, n) = p.pointer(pos, wide)?;
        f.field(&key!("Address"), &Hex(address));
        pos += n;
    }
    if version >= 4 {
        f.field(&key!("ObjectSize"), &p.u64(pos)?);
    }
    f.end();
    Some(())
}

#[inline(always)]
fn thread_sample(p: Payload<'_>, out: &mut Vec<u8>) -> Option<()> {
    let name: &'static [u8] = match p.u32(0)? {
        0 => br#"{"Type":"Error"}"#,
        1 => br#"{"Type":"External"}"#,
        2 => br#"{"Type":"Managed"}"#,
        other => {
            let mut f = Fields::begin(out, Style::Json);
            f.field(&key!("Type"), &other);
            f.end();
            return Some(());
        }
    };
    json::put(out, name);
    Some(())
}

#[inline(always)]
fn suspend_begin(p: Payload<'_>, version: u8, out: &mut Vec<u8>) -> Option<()> {
    let mut f = Fields::begin(out, Style::Json);
    if version == 0 {
        f.field(&key!("Reason"), &SuspendReason::from_u32(u32::from(p.u16(0)?)));
    } else {
        f.field(&key!("Reason"), &SuspendReason::from_u32(p.u32(0)?))
            .field(&key!("Count"), &p.u32(4)?)
            .field(&key!("ClrInstanceID"), &p.u16(8)?);
    }
    f.end();
    Some(())
}

#[inline(always)]
fn clr_instance_only(p: Payload<'_>, version: u8, out: &mut Vec<u8>) -> Option<()> {
    if version == 0 {
        out.extend_from_slice(b"{}");
        return Some(());
    }
    let mut f = Fields::begin(out, Style::Json);
    f.field(&key!("ClrInstanceID"), &p.u16(0)?);
    f.end();
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RawEvent;

    fn rng(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    fn utf16z(s: &str) -> Vec<u8> {
        let mut b: Vec<u8> = s.encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
        b.extend_from_slice(&[0, 0]);
        b
    }

    /// Every truncation of `p`, versions 0–5, pointer sizes 4, 8 and 3: the direct writer
    /// writes what decoding then writing the fields writes, or fails where decoding fails.
    fn same_as_decoded(family: Family, id: u16, p: &[u8]) {
        let (kind, name) = Direct::of(family, id).unwrap();
        for version in 0..6u8 {
            for pointer_size in [4u8, 8, 3] {
                for len in 0..=p.len() {
                    let raw = RawEvent { provider: "", event_id: id, version, payload: &p[..len], pointer_size };
                    let want = crate::decode_as(family, &raw).ok().map(|e| {
                        assert_eq!(e.name(), name);
                        let mut out = Vec::new();
                        e.write_fields(&mut out, Style::Json);
                        String::from_utf8(out).unwrap()
                    });
                    let mut out = b"x".to_vec();
                    let ok = write_direct_json(kind, &p[..len], version, pointer_size, &mut out);
                    assert!(ok || out == b"x");
                    let got = ok.then(|| String::from_utf8(out[1..].to_vec()).unwrap());
                    assert_eq!(got, want, "{family:?} {id} v{version} {pointer_size} {len} {p:x?}");
                }
            }
        }
    }

    #[test]
    fn method_verbose_from_the_payload_equals_decode_then_write() {
        let mut p: Vec<u8> = Vec::new();
        for v in [0x1122_3344_5566_7788u64, 0, 0x7f00_dead_beef] {
            p.extend_from_slice(&v.to_le_bytes());
        }
        for v in [0x40u32, 0x0600_0123, 0x1_2345] {
            p.extend_from_slice(&v.to_le_bytes());
        }
        for s in ["System.Collections.Generic.List`1[System.Int32]", "get_\"Item\"\\é\u{1F600}", ""] {
            p.extend(utf16z(s));
        }
        p.extend_from_slice(&7u16.to_le_bytes());
        p.extend_from_slice(&u64::MAX.to_le_bytes());
        p.push(0x55);
        for (family, id) in [(Family::Runtime, 143), (Family::Runtime, 144), (Family::Rundown, 143), (Family::Rundown, 144)] {
            same_as_decoded(family, id, &p);
        }
        assert_eq!(Direct::of(Family::Runtime, 141), None);
        assert_eq!(Direct::of(Family::Other, 143), None);
        assert_eq!(Direct::of(Family::Rundown, 10), None);
    }

    #[test]
    fn small_layouts_from_the_payload_equal_decode_then_write() {
        let mut next = rng(0x0dd_ba11_cafe_f00d);
        for _ in 0..40 {
            // Values that hit every name of the value maps and some no map knows.
            let mut p: Vec<u8> = Vec::new();
            let small = (next() % 12) as u32;
            p.extend_from_slice(&small.to_le_bytes());
            p.extend_from_slice(&(next() as u32 >> (next() % 32)).to_le_bytes());
            p.extend_from_slice(&(next() as u16).to_le_bytes());
            p.extend((0..6).map(|_| next() as u8));
            same_as_decoded(Family::SampleProfiler, 0, &p);
            same_as_decoded(Family::Runtime, crate::ids::runtime::GC_SUSPEND_EE_BEGIN, &p);
            for id in [3, 7, 8] {
                same_as_decoded(Family::Runtime, id, &p);
            }
        }
    }

    #[test]
    fn allocation_ticks_from_the_payload_equal_decode_then_write() {
        let mut next = rng(0xa110_c0de_5eed_1234);
        for s in ["System.Object[]", "", "Dictionary`2[\"k\",é\u{1F600}]\n", "a string of more than sixteen units in all"] {
            for _ in 0..4 {
                let mut p: Vec<u8> = Vec::new();
                p.extend_from_slice(&(next() as u32).to_le_bytes());
                p.extend_from_slice(&((next() % 5) as u32).to_le_bytes());
                p.extend_from_slice(&(next() as u16).to_le_bytes());
                p.extend_from_slice(&(next() >> (next() % 64)).to_le_bytes());
                p.extend_from_slice(&next().to_le_bytes());
                p.extend(utf16z(s));
                p.extend((0..22).map(|_| next() as u8));
                same_as_decoded(Family::Runtime, crate::ids::runtime::GC_ALLOCATION_TICK, &p);
            }
        }
    }
}
