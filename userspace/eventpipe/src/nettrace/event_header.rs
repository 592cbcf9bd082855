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
