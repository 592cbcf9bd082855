//! Event blob/row headers: V4/V5 and V6, compressed and uncompressed.

use super::bytes::{BufResult, Cursor};

/// The decoded header of one event blob. For V6 the thread fields hold thread *indexes* and
/// `label_list_id` is set; for V4/V5 they hold OS thread ids and the GUIDs are inline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EventHeader {
    pub metadata_id: u32,
    pub sequence_number: u32,
    pub thread_id: u64,
    pub capture_thread_id: u64,
    pub processor_number: u32,
    pub stack_id: u32,
    pub timestamp: u64,
    pub activity_id: [u8; 16],
    pub related_activity_id: [u8; 16],
    pub label_list_id: u32,
    pub is_sorted: bool,
    pub payload_size: u32,
}

pub(crate) mod flag {
    pub const METADATA_ID: u8 = 0x01;
    pub const CAPTURE_THREAD_AND_SEQUENCE: u8 = 0x02;
    pub const THREAD_ID: u8 = 0x04;
    pub const STACK_ID: u8 = 0x08;
    pub const ACTIVITY_ID: u8 = 0x10;
    pub const RELATED_ACTIVITY_ID: u8 = 0x20;
    pub const SORTED: u8 = 0x40;
    pub const DATA_LENGTH: u8 = 0x80;
}

/// Decodes one compressed header; `h` holds the previous header of the block (zeroed at the
/// block start) and is updated in place. Returns the header's flags (which fields it set).
/// The payload follows, unpadded.
#[inline(always)]
pub(crate) fn read_compressed(c: &mut Cursor<'_>, h: &mut EventHeader, v6: bool) -> BufResult<u8> {
    let flags = c.u8("event header flags")?;
    if flags & flag::METADATA_ID != 0 {
        h.metadata_id = c.varu32("metadata id")?;
    }
    if flags & flag::CAPTURE_THREAD_AND_SEQUENCE != 0 {
        let delta = c.varu32("sequence number delta")?;
        h.sequence_number = h.sequence_number.wrapping_add(delta).wrapping_add(1);
        h.capture_thread_id = c.varu64("capture thread id")?;
        h.processor_number = c.varu32("processor number")?;
    } else if v6 || h.metadata_id != 0 {
        h.sequence_number = h.sequence_number.wrapping_add(1);
    }
    if flags & flag::THREAD_ID != 0 {
        h.thread_id = c.varu64("thread id")?;
    }
    if flags & flag::STACK_ID != 0 {
        h.stack_id = c.varu32("stack id")?;
    }
    let delta = c.varu64("timestamp delta")?;
    h.timestamp = h.timestamp.wrapping_add(delta);
    if v6 {
        if flags & flag::ACTIVITY_ID != 0 {
            h.label_list_id = c.varu32("label list id")?;
        }
    } else {
        if flags & flag::ACTIVITY_ID != 0 {
            h.activity_id = c.guid("activity id")?;
        }
        if flags & flag::RELATED_ACTIVITY_ID != 0 {
            h.related_activity_id = c.guid("related activity id")?;
        }
    }
    h.is_sorted = flags & flag::SORTED != 0;
    if flags & flag::DATA_LENGTH != 0 {
        h.payload_size = c.varu32("payload size")?;
    }
    Ok(flags)
}

/// Bytes read at once by [`read_compressed_window`]: more than a compressed header can take
/// (V4/V5 with both GUIDs: 1 + 5 + 5 + 10 + 5 + 10 + 5 + 10 + 16 + 16 + 5 = 88).
pub(crate) const WINDOW: usize = 128;

/// [`read_compressed`] on a window that holds the whole header, so no field is bounds-checked
/// (positions stay below 88, and the mask lets the compiler see they are inside). Returns the
/// flags and the header's length, or `None` for a varint that overflows or runs on (then `h`
/// is unchanged, and [`read_compressed`] reports the error where it is).
///
/// Dispatched once on the flags bits that place the fields (a jump to a decoder for that
/// layout) instead of a branch per optional field: the layout changes from one event to the
/// next (a CPU sample has a stack, the event after it none), and the branches per field
/// mispredicted where one indirect jump predicts from the same history. Headers with
/// activity ids (rare) take the decoder with a branch per field.
/// The reader dispatches to the same decoders in `NetTraceReader::compressed_rows` (by a
/// branch per layout bit), each layout with the rest of its event's work; this one is the
/// reference its tests check the decoders with.
#[cfg(test)]
#[inline(always)]
pub(crate) fn read_compressed_window<const V6: bool>(w: &[u8; WINDOW], h: &mut EventHeader) -> Option<(u8, usize)> {
    // The layout bits: METADATA_ID, CAPTURE_THREAD_AND_SEQUENCE, THREAD_ID, STACK_ID (0x0f)
    // and DATA_LENGTH (0x80); with ACTIVITY_ID or RELATED_ACTIVITY_ID (0x30) none matches.
    const _: () = assert!(
        flag::METADATA_ID | flag::CAPTURE_THREAD_AND_SEQUENCE | flag::THREAD_ID | flag::STACK_ID == 0x0f
            && flag::DATA_LENGTH == 0x80
            && flag::ACTIVITY_ID | flag::RELATED_ACTIVITY_ID == 0x30
    );
    macro_rules! layouts {
        ($($l:literal)*) => {
            match w[0] & 0xbf {
                $($l => window_layout::<V6, $l, true>(w, h),)*
                _ => window_layout::<V6, 0, false>(w, h),
            }
        };
    }
    let r = layouts!(
        0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15
        128 129 130 131 132 133 134 135 136 137 138 139 140 141 142 143
    );
    if let Some((flags, _)) = r {
        h.is_sorted = flags & flag::SORTED != 0;
    }
    r
}

/// [`read_compressed_window`] for the headers whose flags & the layout bits are `LAYOUT`
/// (`FIXED`), or for any header (not `FIXED`: a branch per field).
#[inline(always)]
pub(crate) fn window_layout<const V6: bool, const LAYOUT: u8, const FIXED: bool>(
    w: &[u8; WINDOW],
    h: &mut EventHeader,
) -> Option<(u8, usize)> {
    let flags = w[0];
    // Which fields are present: from the const parameter when FIXED (the tests fold away).
    let has = |bit: u8| if FIXED { LAYOUT & bit != 0 } else { flags & bit != 0 };
    let mut q = 1;
    let metadata_id = if has(flag::METADATA_ID) { var32(w, &mut q)? } else { h.metadata_id };
    let (sequence_number, capture_thread_id, processor_number) = if has(flag::CAPTURE_THREAD_AND_SEQUENCE) {
        let delta = var32(w, &mut q)?;
        let seq = h.sequence_number.wrapping_add(delta).wrapping_add(1);
        (seq, var64(w, &mut q)?, var32(w, &mut q)?)
    } else if V6 || metadata_id != 0 {
        (h.sequence_number.wrapping_add(1), h.capture_thread_id, h.processor_number)
    } else {
        (h.sequence_number, h.capture_thread_id, h.processor_number)
    };
    let thread_id = if has(flag::THREAD_ID) { var64(w, &mut q)? } else { h.thread_id };
    let stack_id = if has(flag::STACK_ID) { var32(w, &mut q)? } else { h.stack_id };
    let timestamp = h.timestamp.wrapping_add(var64(w, &mut q)?);
    let mut label_list_id = h.label_list_id;
    let (mut activity_id, mut related_activity_id) = (None, None);
    if V6 {
        if has(flag::ACTIVITY_ID) {
            label_list_id = var32(w, &mut q)?;
        }
    } else {
        if has(flag::ACTIVITY_ID) {
            activity_id = Some(guid(w, &mut q));
        }
        if has(flag::RELATED_ACTIVITY_ID) {
            related_activity_id = Some(guid(w, &mut q));
        }
    }
    let payload_size = if has(flag::DATA_LENGTH) { var32(w, &mut q)? } else { h.payload_size };
    h.metadata_id = metadata_id;
    h.sequence_number = sequence_number;
    h.capture_thread_id = capture_thread_id;
    h.processor_number = processor_number;
    h.thread_id = thread_id;
    h.stack_id = stack_id;
    h.timestamp = timestamp;
    h.label_list_id = label_list_id;
    if let Some(a) = activity_id {
        h.activity_id = a;
    }
    if let Some(a) = related_activity_id {
        h.related_activity_id = a;
    }
    // `is_sorted` is left as it was: the reader takes it from the flags returned.
    h.payload_size = payload_size;
    Some((flags, q))
}

/// A GUID at `q` (GUIDs come last but the size: always inside the window).
#[inline(always)]
fn guid(w: &[u8; WINDOW], q: &mut usize) -> [u8; 16] {
    let mut g = [0u8; 16];
    for (k, b) in g.iter_mut().enumerate() {
        *b = w[(*q + k) & (WINDOW - 1)];
    }
    *q += 16;
    g
}

/// LEB128 of at most 64 bits at `q` (the rules of `Cursor::varu64`).
#[inline(always)]
fn var64(w: &[u8; WINDOW], q: &mut usize) -> Option<u64> {
    let b = w[*q & (WINDOW - 1)];
    if b < 0x80 {
        *q += 1;
        return Some(u64::from(b));
    }
    var64_long(w, q)
}

#[inline(always)]
fn var64_long(w: &[u8; WINDOW], q: &mut usize) -> Option<u64> {
    let mut result = 0u64;
    for i in 0..10 {
        let b = w[(*q + i) & (WINDOW - 1)];
        result |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            if i == 9 && b > 1 {
                return None;
            }
            *q += i + 1;
            return Some(result);
        }
    }
    None
}

#[inline(always)]
fn var32(w: &[u8; WINDOW], q: &mut usize) -> Option<u32> {
    u32::try_from(var64(w, q)?).ok()
}

/// Decodes one uncompressed V4/V5 header. The caller skips the payload and then aligns to 4.
pub(crate) fn read_uncompressed_v4(c: &mut Cursor<'_>, h: &mut EventHeader) -> BufResult<()> {
    let _event_size = c.u32("event size")?;
    let id = c.u32("metadata id")?;
    h.metadata_id = id & 0x7fff_ffff;
    // The documents disagree on the polarity of this bit; treating every event as unsorted
    // only delays emission until the sequence point, never misorders.
    h.is_sorted = false;
    h.sequence_number = c.u32("sequence number")?;
    h.thread_id = c.u64("thread id")?;
    h.capture_thread_id = c.u64("capture thread id")?;
    h.processor_number = c.u32("processor number")?;
    h.stack_id = c.u32("stack id")?;
    h.timestamp = c.u64("timestamp")?;
    h.activity_id = c.guid("activity id")?;
    h.related_activity_id = c.guid("related activity id")?;
    h.payload_size = c.u32("payload size")?;
    Ok(())
}

/// Decodes one uncompressed V6 row header (52 bytes; no padding after the payload).
pub(crate) fn read_uncompressed_v6(c: &mut Cursor<'_>, h: &mut EventHeader) -> BufResult<()> {
    let _event_size = c.u32("event size")?;
    let id = c.u32("metadata id")?;
    h.metadata_id = id & 0x7fff_ffff;
    h.is_sorted = id & 0x8000_0000 != 0;
    h.sequence_number = c.u32("sequence number")?;
    h.thread_id = c.u64("thread index")?;
    h.capture_thread_id = c.u64("capture thread index")?;
    h.processor_number = c.u32("processor number")?;
    h.stack_id = c.u32("stack id")?;
    h.timestamp = c.u64("timestamp")?;
    h.label_list_id = c.u32("label list id")?;
    h.payload_size = c.u32("payload size")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window decoder gives what the cursor decoder gives, or declines; on random
    /// headers of both formats.
    #[test]
    fn window_headers_decode_like_the_cursor() {
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut declined = 0;
        for round in 0..20_000 {
            let mut w = [0u8; WINDOW];
            let r = rnd();
            for b in w.iter_mut() {
                // Mostly short varints, some long runs of continuation bytes.
                let v = rnd();
                *b = if r % 5 == 0 { v as u8 } else if v % 3 == 0 { (v >> 8) as u8 | 0x80 } else { (v >> 8) as u8 & 0x7f };
            }
            let prev = EventHeader {
                metadata_id: (r >> 8) as u32 % 3,
                sequence_number: (r >> 16) as u32,
                timestamp: r,
                payload_size: 7,
                ..EventHeader::default()
            };
            for v6 in [false, true] {
                let (mut a, mut b) = (prev, prev);
                let mut c = Cursor::new(&w);
                let slow = read_compressed(&mut c, &mut a, v6);
                let fast = if v6 {
                    read_compressed_window::<true>(&w, &mut b)
                } else {
                    read_compressed_window::<false>(&w, &mut b)
                };
                match fast {
                    Some((flags, len)) => {
                        assert_eq!(slow.as_ref().ok(), Some(&flags), "round {round}");
                        assert_eq!((len, b), (c.pos(), a), "round {round}");
                    }
                    None => {
                        assert_eq!(b, prev, "round {round}: declined but changed the header");
                        declined += 1;
                    }
                }
            }
        }
        assert!(declined < 30_000, "declined {declined} of 40000");
    }
}
