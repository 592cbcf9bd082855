//! The streaming reader: stream header, object/block framing (V4/V5 FastSerialization and V6
//! blocks), block dispatch, and the event hand-out loop.

use std::sync::Arc;

use super::bytes::Cursor;
use super::error::{BufError, NetTraceError};
use super::event::EventRef;
use super::event_header::{self, EventHeader};
use super::input::{ByteInput, Fill, Source};
use super::metadata::{self, EventMetadata, MetadataTable};
use super::read_ahead::ReadAhead;
use super::region::{Freed, Pending, Region};
use super::sequence::SequenceTracker;
use super::stacks::StackTable;
use super::trace_info::{FormatVersion, SyncTimeUtc, TraceInfo};
use super::v6_tables::{LabelTable, ThreadTable};

const MAGIC: &[u8; 8] = b"Nettrace";
const FAST_SERIALIZATION: &[u8; 20] = b"!FastSerialization.1";
/// Largest block accepted (the runtime writes blocks of at most a few hundred KiB).
const MAX_BLOCK: usize = 64 << 20;
const MAX_TYPE_NAME: usize = 256;

mod tag {
    pub const NULL_REFERENCE: u8 = 0x01;
    pub const BEGIN_PRIVATE_OBJECT: u8 = 0x05;
    pub const END_OBJECT: u8 = 0x06;
}

/// Where the stream stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamStatus {
    /// More events may come.
    Reading,
    /// The end-of-stream marker was read.
    Complete,
    /// The stream ended without the end marker (process killed, socket closed, file cut).
    Truncated,
    /// A corrupt block stopped the reader; `next_event` returned its error.
    Failed,
}

/// Counters over the stream read so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReaderStats {
    /// Events handed out.
    pub events: u64,
    /// Events the writer numbered but never wrote (sequence-number gaps).
    pub dropped_events: u64,
    /// Events skipped because their metadata id was never defined.
    pub unknown_metadata_events: u64,
    /// Events whose stack id was not defined (handed out with an empty stack).
    pub unknown_stack_ids: u64,
    /// Blocks/objects read after the header.
    pub blocks: u64,
    /// Bytes consumed from the stream.
    pub bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    Event,
    Metadata,
    Stack,
    SequencePoint,
    Thread,
    RemoveThread,
    LabelList,
    Other,
}

/// What to forget once every event of the region has been handed out.
#[derive(Debug, Clone, Copy, Default)]
struct RegionReset {
    threads: bool,
    metadata: bool,
}

/// Streaming NetTrace reader over any `io::Read`, or over bytes already in memory
/// ([`InMemory`](super::InMemory): decoded in place, not copied).
pub struct NetTraceReader<R: Source> {
    input: R::Input,
    /// Where the event block being read starts in the payload arena.
    event_body: usize,
    status: StreamStatus,
    deferred_error: Option<NetTraceError>,
    d: Decoder,
}

/// What the blocks' contents build up: everything but the input and the framing's state (the
/// blocks are decoded from the input's bytes, which it does not hold).
struct Decoder {
    info: TraceInfo,
    v6: bool,
    metadata: MetadataTable,
    stacks: StackTable,
    threads: ThreadTable,
    labels: LabelTable,
    seq: SequenceTracker,
    region: Region,
    reset: Option<RegionReset>,
    stats: ReaderStats,
    missing_metadata: Arc<EventMetadata>,
}

fn header_eof(what: &'static str, offset: u64) -> NetTraceError {
    NetTraceError::TruncatedHeader { what, offset }
}

impl<R: Source> NetTraceReader<R> {
    /// Reads the stream header and the trace object. Nothing beyond them is read.
    pub fn new(reader: R) -> Result<Self, NetTraceError> {
        let mut input = reader.into_input();
        let magic: [u8; 8] = input
            .array()?
            .ok_or_else(|| header_eof("magic", 0))?;
        if magic[..4] == 20i32.to_le_bytes() && &magic[4..] == b"!Fas" {
            return Err(NetTraceError::UnsupportedNetPerf);
        }
        if &magic != MAGIC {
            return Err(NetTraceError::BadMagic(magic));
        }
        let word: [u8; 4] = input
            .array()?
            .ok_or_else(|| header_eof("version", input.offset()))?;
        let (info, v6) = match u32::from_le_bytes(word) {
            20 => (read_v4_trace(&mut input)?, false),
            0 => (read_v6_trace(&mut input)?, true),
            _ => {
                return Err(NetTraceError::corrupt(
                    "stream header",
                    8,
                    "neither a FastSerialization (20) nor a V6 (0) header follows the magic",
                ));
            }
        };
        Ok(NetTraceReader {
            input,
            event_body: 0,
            status: StreamStatus::Reading,
            deferred_error: None,
            d: Decoder {
                info,
                v6,
                metadata: MetadataTable::default(),
                stacks: StackTable::default(),
                threads: ThreadTable::default(),
                labels: LabelTable::default(),
                seq: SequenceTracker::new(v6),
                region: Region::default(),
                reset: None,
                stats: ReaderStats::default(),
                missing_metadata: Arc::new(EventMetadata::empty(0)),
            },
        })
    }

    pub fn trace_info(&self) -> &TraceInfo {
        &self.d.info
    }

    pub fn status(&self) -> StreamStatus {
        self.status
    }

    pub fn stats(&self) -> ReaderStats {
        let mut s = self.d.stats;
        // Those of the batch being handed out.
        s.events += self.d.region.out_pos as u64;
        s.dropped_events = self.d.seq.dropped;
        s.bytes = self.input.offset();
        s
    }

    /// Events [`next_event`](Self::next_event) hands out before it reads the stream again
    /// (it may block then, on a live stream).
    #[inline]
    pub fn ready(&self) -> usize {
        self.d.region.ready()
    }

    /// The next event in timestamp order, `Ok(None)` at the end of the stream (see
    /// [`status`](Self::status) for whether it was complete). After a corrupt block, the events
    /// parsed before it are handed out first, then the error is returned once.
    #[inline]
    pub fn next_event(&mut self) -> Result<Option<EventRef<'_>>, NetTraceError> {
        loop {
            if let Some(i) = self.d.region.next_ready() {
                return Ok(Some(self.event_at(i)));
            }
            if !self.advance()? {
                return Ok(None);
            }
        }
    }

    /// Called when no event is ready: frees what was handed out, then reads one block (or
    /// flushes at the end). False at the end of the stream; the deferred error is returned once.
    #[inline(never)]
    fn advance(&mut self) -> Result<bool, NetTraceError> {
        let d = &mut self.d;
        // Events handed out are counted a batch at a time (not per event).
        d.stats.events += d.region.out_pos as u64;
        let recycled = d.region.recycle();
        match recycled.freed {
            Freed::Front(n) => self.input.drop_front(n),
            Freed::All => self.input.clear_arena(),
        }
        if recycled.trimmed {
            // The other buffers a burst may have grown, with the region's.
            d.stacks.trim();
            self.input.trim();
        }
        if let Some(r) = d.reset.take() {
            d.stacks.clear();
            d.labels.clear();
            if r.threads {
                d.threads.clear();
            }
            if r.metadata {
                d.metadata.clear();
            }
        }
        if self.status != StreamStatus::Reading {
            if d.region.has_pending() {
                d.region.flush_all();
                return Ok(true);
            }
            return match self.deferred_error.take() {
                Some(e) => Err(e),
                None => Ok(false),
            };
        }
        let r = if self.d.v6 { self.read_v6_block() } else { self.read_v4_object() };
        if let Err(e) = r {
            self.status = StreamStatus::Failed;
            self.deferred_error = Some(e);
        }
        Ok(true)
    }

    #[inline(always)]
    fn event_at(&self, i: usize) -> EventRef<'_> {
        let d = &self.d;
        let rec = &d.region.events[i];
        let payload = &self.input.arena()
            [rec.payload_start as usize..(rec.payload_start as usize + rec.payload_len as usize)];
        let stack = &d.stacks.ips
            [rec.stack_start as usize..(rec.stack_start as usize + rec.stack_len as usize)];
        // Events are buffered only when their metadata exists, and metadata is flushed only
        // once the buffer is empty; the fallback keeps this panic-free regardless.
        let metadata = d.metadata.get(rec.metadata_id).unwrap_or(&d.missing_metadata);
        EventRef {
            rec,
            activity: d.region.activity_ids(rec),
            metadata,
            payload,
            stack,
            info: &d.info,
        }
    }

    // ------------------------------------------------------------ framing

    /// Reads one FastSerialization object (V4/V5) and processes it.
    fn read_v4_object(&mut self) -> Result<(), NetTraceError> {
        let start = self.input.offset();
        let Some([t]) = self.input.array::<1>()? else {
            self.status = StreamStatus::Truncated;
            return Ok(());
        };
        match t {
            tag::NULL_REFERENCE => {
                self.status = StreamStatus::Complete;
                return Ok(());
            }
            tag::BEGIN_PRIVATE_OBJECT => {}
            _ => return Err(NetTraceError::corrupt("object tag", start, format!("expected BeginPrivateObject (5) or NullReference (1), found {t}"))),
        }
        let Some((name, _version)) = read_type_header(&mut self.input)? else {
            self.status = StreamStatus::Truncated;
            return Ok(());
        };
        let kind = match name.as_str() {
            "EventBlock" => BlockKind::Event,
            "MetadataBlock" => BlockKind::Metadata,
            "StackBlock" => BlockKind::Stack,
            "SPBlock" => BlockKind::SequencePoint,
            "Trace" => return Err(NetTraceError::corrupt("object", start, "a second Trace object")),
            _ => BlockKind::Other,
        };
        let size_at = self.input.offset();
        let Some(size) = self.input.array::<4>()? else {
            self.status = StreamStatus::Truncated;
            return Ok(());
        };
        let size = i32::from_le_bytes(size);
        if size < 0 || size as usize > MAX_BLOCK {
            return Err(NetTraceError::corrupt("block size", size_at, format!("{size} is out of range")));
        }
        let pad = (4 - self.input.offset() % 4) % 4;
        if !self.input.skip(pad)? {
            self.status = StreamStatus::Truncated;
            return Ok(());
        }
        let body_at = self.input.offset();
        let full = self.read_body(kind, size as usize)?;
        self.d.stats.blocks += 1;
        if !full {
            self.status = StreamStatus::Truncated;
            if kind == BlockKind::Event {
                self.event_block(body_at, true)?;
            }
            return Ok(());
        }
        self.dispatch(kind, body_at)?;
        let end_at = self.input.offset();
        match self.input.array::<1>()? {
            None => self.status = StreamStatus::Truncated,
            Some([tag::END_OBJECT]) => {}
            Some([t]) => return Err(NetTraceError::corrupt("end of object", end_at, format!("expected EndObject (6), found {t}"))),
        }
        Ok(())
    }

    /// Reads one V6 block and processes it.
    fn read_v6_block(&mut self) -> Result<(), NetTraceError> {
        let Some(h) = self.input.array::<4>()? else {
            self.status = StreamStatus::Truncated;
            return Ok(());
        };
        let h = u32::from_le_bytes(h);
        let size = (h & 0x00ff_ffff) as usize;
        let kind = match h >> 24 {
            0 => {
                self.status = StreamStatus::Complete;
                return Ok(());
            }
            1 => {
                return Err(NetTraceError::corrupt("block", self.input.offset() - 4, "a second Trace block"));
            }
            2 => BlockKind::Event,
            3 => BlockKind::Metadata,
            4 => BlockKind::SequencePoint,
            5 => BlockKind::Stack,
            6 => BlockKind::Thread,
            7 => BlockKind::RemoveThread,
            8 => BlockKind::LabelList,
            _ => BlockKind::Other,
        };
        let body_at = self.input.offset();
        let full = self.read_body(kind, size)?;
        self.d.stats.blocks += 1;
        if !full {
            self.status = StreamStatus::Truncated;
            if kind == BlockKind::Event {
                self.event_block(body_at, true)?;
            }
            return Ok(());
        }
        self.dispatch(kind, body_at)
    }

    /// Reads a block body: an event block goes to the input's payload arena (its events'
    /// payloads are then ranges of it: a stream's copied once, in-memory bytes not copied),
    /// any other block is the input's [`ByteInput::block`]. True if it arrived whole.
    fn read_body(&mut self, kind: BlockKind, size: usize) -> Result<bool, NetTraceError> {
        let fill = if kind == BlockKind::Event {
            let (fill, at) = self.input.read_event_block(size)?;
            self.event_body = at;
            fill
        } else {
            self.input.read_block(size)?
        };
        Ok(matches!(fill, Fill::Full))
    }

    fn dispatch(&mut self, kind: BlockKind, body_at: u64) -> Result<(), NetTraceError> {
        if kind == BlockKind::Event {
            return self.event_block(body_at, false);
        }
        self.d.dispatch(kind, self.input.block(), body_at)
    }

    // ------------------------------------------------------------ blocks

    /// Parses an event block. `partial`: the block was cut by the end of the stream; keep
    /// every whole event and stop quietly at the first incomplete one.
    fn event_block(&mut self, body_at: u64, partial: bool) -> Result<(), NetTraceError> {
        // The body is the arena's tail.
        let arena = self.input.arena();
        let base = self.event_body.min(arena.len());
        let d = &mut self.d;
        let r = match u32::try_from(arena.len()) {
            Ok(_) => d.event_rows(&arena[base..], base as u32, R::Input::IN_PLACE),
            Err(_) => Err(BufError::new(0, "more than 4 GiB of payload buffered in one sequence-point region")),
        };
        d.region.index_runs();
        d.region.flush_sorted();
        match r {
            Err(_) if partial => Ok(()),
            Err(e) => Err(e.into_error("event block", body_at)),
            Ok(()) => Ok(()),
        }
    }
}

impl Decoder {
    /// A block other than an event block.
    fn dispatch(&mut self, kind: BlockKind, body: &[u8], body_at: u64) -> Result<(), NetTraceError> {
        match kind {
            // Event blocks are the reader's (their bytes stay in the input's arena).
            BlockKind::Event | BlockKind::Other => Ok(()),
            BlockKind::Metadata => self.metadata_block(body, body_at),
            BlockKind::Stack => self
                .stacks
                .add_block(body, self.info.pointer_size)
                .map_err(|e| e.into_error("stack block", body_at)),
            BlockKind::SequencePoint => self.sequence_point(body, body_at),
            BlockKind::Thread => self
                .threads
                .add_block(body)
                .map_err(|e| e.into_error("thread block", body_at)),
            BlockKind::RemoveThread => self.remove_threads(body, body_at),
            BlockKind::LabelList => self
                .labels
                .add_block(body)
                .map_err(|e| e.into_error("label list block", body_at)),
        }
    }

    /// Adds the events of one event block body, found at `base` in the payload arena
    /// (`in_place`: the input's own bytes, not a copy the stream just made).
    fn event_rows(&mut self, body: &[u8], base: u32, in_place: bool) -> Result<(), BufError> {
        let mut c = Cursor::new(body);
        let (compressed, _) = block_header(&mut c)?;
        if compressed {
            return if self.v6 {
                self.compressed_rows::<true>(body, c.pos(), base, in_place)
            } else {
                self.compressed_rows::<false>(body, c.pos(), base, in_place)
            };
        }
        let mut h = EventHeader::default();
        let v6 = self.v6;
        while !c.is_empty() {
            if v6 {
                event_header::read_uncompressed_v6(&mut c, &mut h)?;
            } else {
                event_header::read_uncompressed_v4(&mut c, &mut h)?;
            }
            // The arena is below 4 GiB, so offsets in it fit.
            let payload_start = base + c.pos() as u32;
            c.skip(h.payload_size as usize, "event payload")?;
            if !v6 {
                c.align(4);
            }
            self.add_event(&h, payload_start, &c)?;
        }
        Ok(())
    }

    /// The events of a block with compressed headers: [`Self::add_event`] for each, except
    /// that a header leaves out what did not change since the block's previous event, so what
    /// costs a lookup is redone only after a header changed it. Headers are read from a
    /// fixed-size window while one fits before the block's end (the cursor reads the last ones,
    /// and any header the window refuses).
    ///
    /// Each header goes, on the flags bits that place its fields, to a decoder for that layout
    /// followed by the rest of the event's work for that layout ([`Self::row`]), so whether the
    /// metadata id, the stack id or the capture thread changed is known once: the metadata and
    /// stack lookups are redone only by the layouts that set their ids. The way there is a
    /// branch per layout bit (the layout changes from one event to the next, unpredictably for
    /// a third of the events or more; one indirect jump through a table was 1–2 % slower on
    /// objver4). Headers with activity ids (rare), the block's first one and the cursor's take
    /// the path that checks each flag.
    fn compressed_rows<const V6: bool>(&mut self, body: &[u8], mut pos: usize, base: u32, in_place: bool) -> Result<(), BufError> {
        // The zeroed header the block's first one is read against: metadata id 0, no stack.
        let mut r = Rows {
            h: EventHeader::default(),
            fresh: true,
            // Everything else is looked up for the block's first event.
            dirty: DERIVED,
            known: self.metadata.get(0).is_some(),
            stack: (0, 0),
            stack_missing: false,
            thread_id: 0,
            capture_thread_id: 0,
            activity: 0,
        };
        // A branch on each of the layout bits (METADATA_ID, CAPTURE_THREAD_AND_SEQUENCE,
        // THREAD_ID, STACK_ID and DATA_LENGTH) to the path for the header's layout; headers with
        // ACTIVITY_ID or RELATED_ACTIVITY_ID take the path that tests each flag.
        use event_header::flag;
        const _: () = assert!(
            flag::METADATA_ID | flag::CAPTURE_THREAD_AND_SEQUENCE | flag::THREAD_ID | flag::STACK_ID == 0x0f
                && flag::DATA_LENGTH == 0x80
        );
        macro_rules! layouts {
            ($w:ident, $l:expr;) => {
                self.row::<V6, { $l }, true>($w, body, &mut pos, base, &mut r)
            };
            ($w:ident, $l:expr; $bit:literal $($rest:literal)*) => {
                if $w[0] & $bit != 0 {
                    layouts!($w, $l | $bit; $($rest)*)
                } else {
                    layouts!($w, $l; $($rest)*)
                }
            };
        }
        // The block's first event takes the path that checks each flag (and `fresh`).
        if pos < body.len() {
            pos = self.row_checked::<V6>(body, pos, base, &mut r)?;
        }
        let mut ahead = ReadAhead::new(in_place, pos);
        while pos < body.len() {
            ahead.step(body, pos);
            match body[pos..].first_chunk::<{ event_header::WINDOW }>() {
                Some(w) => {
                    if w[0] & (flag::ACTIVITY_ID | flag::RELATED_ACTIVITY_ID) != 0 {
                        self.row::<V6, 0, false>(w, body, &mut pos, base, &mut r)?
                    } else {
                        layouts!(w, 0; 0x80 0x08 0x04 0x02 0x01)?
                    }
                }
                None => pos = self.row_checked::<V6>(body, pos, base, &mut r)?,
            }
        }
        Ok(())
    }

    /// One event of [`Self::compressed_rows`] whose header starts the window `w` at `pos`:
    /// for the headers whose flags & the layout bits are `LAYOUT` (`FIXED`), or any header (not
    /// `FIXED`: the flags are tested).
    #[inline(always)]
    fn row<const V6: bool, const LAYOUT: u8, const FIXED: bool>(
        &mut self,
        w: &[u8; event_header::WINDOW],
        body: &[u8],
        pos: &mut usize,
        base: u32,
        r: &mut Rows,
    ) -> Result<(), BufError> {
        match event_header::window_layout::<V6, LAYOUT, FIXED>(w, &mut r.h) {
            Some((raw, len)) => {
                *pos += len;
                self.row_tail::<V6, LAYOUT, FIXED>(raw, body, pos, base, r)
            }
            None => {
                *pos = self.row_checked::<V6>(body, *pos, base, r)?;
                Ok(())
            }
        }
    }

    /// [`Self::row`] for a header the window decoder refused or that ends the block, and for
    /// the block's first one, read with the checked cursor. Out of line, so that the loop over
    /// headers keeps to the window; the position goes in and out by value (a reference to it
    /// kept the loop's copy on the stack).
    #[cold]
    #[inline(never)]
    fn row_checked<const V6: bool>(&mut self, body: &[u8], pos: usize, base: u32, r: &mut Rows) -> Result<usize, BufError> {
        let mut c = Cursor::at(body, pos);
        let raw = event_header::read_compressed(&mut c, &mut r.h, V6)?;
        let mut pos = c.pos();
        self.row_tail::<V6, 0, false>(raw, body, &mut pos, base, r)?;
        Ok(pos)
    }

    /// The event of the header just decoded into `r.h` (its flags `raw`), whose payload starts
    /// at `pos`.
    #[inline(always)]
    fn row_tail<const V6: bool, const LAYOUT: u8, const FIXED: bool>(
        &mut self,
        raw: u8,
        body: &[u8],
        pos: &mut usize,
        base: u32,
        r: &mut Rows,
    ) -> Result<(), BufError> {
        use event_header::flag;
        // Whether the header set a field: from the const parameter when FIXED.
        let has = |bit: u8| if FIXED { LAYOUT & bit != 0 } else { raw & bit != 0 };
        let h = &r.h;
        // The arena is below 4 GiB, so offsets in it fit.
        let payload_start = base + *pos as u32;
        if h.payload_size as usize > body.len() - *pos {
            return Err(BufError::new(*pos, "event payload"));
        }
        *pos += h.payload_size as usize;
        // `fresh` only for the block's first event, which is not FIXED.
        if has(flag::CAPTURE_THREAD_AND_SEQUENCE) || (!FIXED && r.fresh) {
            self.seq.on_event(h.capture_thread_id, h.sequence_number);
        } else {
            // Same capture thread, sequence number one up (or unchanged): no gap.
            self.seq.continue_thread(h.sequence_number);
        }
        if !FIXED {
            r.fresh = false;
        }
        if V6 {
            r.dirty |= raw & DERIVED;
        } else if !FIXED {
            // Only headers that are not FIXED set activity ids (V4/V5: inline): their events
            // look them up at once, skipped or not, so the FIXED ones keep no state for them.
            r.activity = self.region.activity((h.activity_id, h.related_activity_id));
        }
        // The tables do not change within a block, so a lookup holds until a header changes the
        // id (also for the events skipped below, which the next ones are read against).
        if !FIXED || has(flag::METADATA_ID) {
            r.known = self.metadata.get(h.metadata_id).is_some();
        }
        if !FIXED || has(flag::STACK_ID) {
            (r.stack, r.stack_missing) = if h.stack_id == 0 {
                ((0, 0), false)
            } else {
                match self.stacks.get(h.stack_id) {
                    Some(range) => (range, false),
                    None => ((0, 0), true),
                }
            };
        }
        if !r.known {
            self.stats.unknown_metadata_events += 1;
            return Ok(());
        }
        self.stats.unknown_stack_ids += u64::from(r.stack_missing);
        if V6 && r.dirty != 0 {
            if r.dirty & flag::THREAD_ID != 0 {
                r.thread_id = self.threads.os_thread_id(h.thread_id);
            }
            if r.dirty & flag::CAPTURE_THREAD_AND_SEQUENCE != 0 {
                r.capture_thread_id = self.threads.os_thread_id(h.capture_thread_id);
            }
            if r.dirty & flag::ACTIVITY_ID != 0 {
                let labels = self.labels.get(h.label_list_id);
                r.activity = self.region.activity((labels.activity_id, labels.related_activity_id));
            }
            r.dirty = 0;
        }
        let pending = Pending {
            timestamp: h.timestamp as i64,
            metadata_id: h.metadata_id,
            sequence_number: h.sequence_number,
            // V4/V5: the header's; V6: looked up from its indexes.
            thread_id: if V6 { r.thread_id } else { h.thread_id },
            capture_thread_id: if V6 { r.capture_thread_id } else { h.capture_thread_id },
            processor_number: h.processor_number,
            payload_start,
            payload_len: h.payload_size,
            stack_start: r.stack.0,
            stack_len: r.stack.1,
            activity: r.activity,
        };
        // Without the check of `Region::push`: each event's header (2 bytes at least) is in the
        // payload arena, which `event_block` keeps below 4 GiB, so the region holds fewer than
        // 2 G events and their indexes fit in u32.
        self.region.events.push(pending);
        if raw & flag::SORTED != 0 {
            self.region.sorted_upto(h.timestamp as i64);
        }
        Ok(())
    }

    #[inline]
    fn add_event(&mut self, h: &EventHeader, payload_start: u32, c: &Cursor<'_>) -> Result<(), BufError> {
        self.seq.on_event(h.capture_thread_id, h.sequence_number);
        if self.metadata.get(h.metadata_id).is_none() {
            self.stats.unknown_metadata_events += 1;
            return Ok(());
        }
        let (stack_start, stack_len) = if h.stack_id == 0 {
            (0, 0)
        } else if let Some(r) = self.stacks.get(h.stack_id) {
            r
        } else {
            self.stats.unknown_stack_ids += 1;
            (0, 0)
        };
        let (thread_id, capture_thread_id, activity_id, related_activity_id) = if self.v6 {
            let labels = self.labels.get(h.label_list_id);
            (
                self.threads.os_thread_id(h.thread_id),
                self.threads.os_thread_id(h.capture_thread_id),
                labels.activity_id,
                labels.related_activity_id,
            )
        } else {
            (h.thread_id, h.capture_thread_id, h.activity_id, h.related_activity_id)
        };
        let activity = self.region.activity((activity_id, related_activity_id));
        self.push_pending(
            Pending {
                timestamp: h.timestamp as i64,
                metadata_id: h.metadata_id,
                sequence_number: h.sequence_number,
                thread_id,
                capture_thread_id,
                processor_number: h.processor_number,
                payload_start,
                payload_len: h.payload_size,
                stack_start,
                stack_len,
                activity,
            },
            h.is_sorted,
            c,
        )
    }

    /// Adds one event to the sequence-point region (`sorted`: the writer says no earlier
    /// event can follow it).
    #[inline(always)]
    fn push_pending(&mut self, p: Pending, sorted: bool, c: &Cursor<'_>) -> Result<(), BufError> {
        let timestamp = p.timestamp;
        if !self.region.push(p) {
            return Err(c.err("more than 4 G events in one sequence-point region"));
        }
        if sorted {
            self.region.sorted_upto(timestamp);
        }
        Ok(())
    }

    fn metadata_block(&mut self, body: &[u8], body_at: u64) -> Result<(), NetTraceError> {
        let r = if self.v6 {
            metadata_rows_v6(body, &mut self.metadata)
        } else {
            metadata_rows_v4(body, &mut self.metadata)
        };
        r.map_err(|e| e.into_error("metadata block", body_at))
    }

    fn sequence_point(&mut self, body: &[u8], body_at: u64) -> Result<(), NetTraceError> {
        self.region.flush_all();
        let mut reset = RegionReset::default();
        let mut c = Cursor::new(body);
        let r: Result<(), BufError> = (|| {
            let _timestamp = c.u64("sequence point timestamp")?;
            if self.v6 {
                let flags = c.u32("sequence point flags")?;
                reset.threads = flags & 1 != 0;
                reset.metadata = flags & 2 != 0;
                let n = c.u32("thread count")?;
                for _ in 0..n {
                    let t = c.varu64("thread index")?;
                    let s = c.varu32("sequence number")?;
                    self.seq.checkpoint(t, s);
                }
            } else {
                let n = c.u32("thread count")?;
                if u64::from(n) > c.remaining() as u64 / 12 {
                    return Err(c.err("thread count larger than the block"));
                }
                for _ in 0..n {
                    let t = c.u64("capture thread id")?;
                    let s = c.u32("sequence number")?;
                    self.seq.checkpoint(t, s);
                }
            }
            Ok(())
        })();
        if reset.threads {
            self.seq.clear();
        }
        self.reset = Some(reset);
        r.map_err(|e| e.into_error("sequence point block", body_at))
    }

    fn remove_threads(&mut self, body: &[u8], body_at: u64) -> Result<(), NetTraceError> {
        let mut c = Cursor::new(body);
        while !c.is_empty() {
            let r = (|| Ok::<_, BufError>((c.varu64("thread index")?, c.varu32("sequence number")?)))();
            let (t, s) = r.map_err(|e| e.into_error("remove thread block", body_at))?;
            self.seq.checkpoint(t, s);
            self.seq.remove(t);
            self.threads.remove(t);
        }
        Ok(())
    }
}

/// Fields of the compressed headers whose change redoes work (V6 thread lookups, label
/// lists, activity ids).
const DERIVED: u8 = event_header::flag::CAPTURE_THREAD_AND_SEQUENCE
    | event_header::flag::THREAD_ID
    | event_header::flag::ACTIVITY_ID
    | event_header::flag::RELATED_ACTIVITY_ID;

/// What [`NetTraceReader::compressed_rows`] carries from one event of a block to the next: the
/// previous header and what was looked up from it.
struct Rows {
    h: EventHeader,
    /// No event of the block read yet (its sequence number is checked whatever its flags).
    fresh: bool,
    /// V6: fields changed since the derived values below were computed (events of unknown
    /// metadata are skipped before they are).
    dirty: u8,
    /// Whether `h.metadata_id` is defined.
    known: bool,
    /// The arena range of `h.stack_id`, and whether that id is undefined.
    stack: (u32, u32),
    stack_missing: bool,
    /// V6: the OS thread ids of the header's thread indexes.
    thread_id: u64,
    capture_thread_id: u64,
    activity: u32,
}

/// Event/metadata block header: (header compression, min/max timestamps skipped).
fn block_header(c: &mut Cursor<'_>) -> Result<(bool, ()), BufError> {
    let header_size = c.u16("block header size")?;
    if header_size < 20 {
        return Err(c.err("block header size below 20"));
    }
    let flags = c.u16("block flags")?;
    c.skip(usize::from(header_size) - 4, "block header")?;
    Ok((flags & 1 != 0, ()))
}

fn metadata_rows_v4(body: &[u8], table: &mut MetadataTable) -> Result<(), BufError> {
    let mut c = Cursor::new(body);
    let (compressed, _) = block_header(&mut c)?;
    let mut h = EventHeader::default();
    while !c.is_empty() {
        if compressed {
            event_header::read_compressed(&mut c, &mut h, false)?;
        } else {
            event_header::read_uncompressed_v4(&mut c, &mut h)?;
        }
        let at = c.pos();
        let payload = c.bytes(h.payload_size as usize, "metadata payload")?;
        if !compressed {
            c.align(4);
        }
        let m = metadata::parse_v4(payload).map_err(|e| BufError::new(at + e.at, e.reason))?;
        table.insert(m);
    }
    Ok(())
}

fn metadata_rows_v6(body: &[u8], table: &mut MetadataTable) -> Result<(), BufError> {
    let mut c = Cursor::new(body);
    let header_size = c.u16("metadata header size")?;
    c.skip(usize::from(header_size), "metadata header")?;
    while !c.is_empty() {
        let size = c.u16("metadata row size")?;
        let at = c.pos();
        let row = c.bytes(usize::from(size), "metadata row")?;
        let m = metadata::parse_v6_row(row).map_err(|e| BufError::new(at + e.at, e.reason))?;
        table.insert(m);
    }
    Ok(())
}

/// Reads a FastSerialization type header (after the object's BeginPrivateObject tag) and
/// returns the type name and version; `None` at end of stream.
fn read_type_header<I: ByteInput>(input: &mut I) -> Result<Option<(String, i32)>, NetTraceError> {
    let at = input.offset();
    let Some(h) = input.array::<14>()? else {
        return Ok(None);
    };
    if h[0] != tag::BEGIN_PRIVATE_OBJECT || h[1] != tag::NULL_REFERENCE {
        return Err(NetTraceError::corrupt("type header", at, "expected BeginPrivateObject, NullReference"));
    }
    let version = i32::from_le_bytes([h[2], h[3], h[4], h[5]]);
    let name_len = i32::from_le_bytes([h[10], h[11], h[12], h[13]]);
    if name_len < 0 || name_len as usize > MAX_TYPE_NAME {
        return Err(NetTraceError::corrupt("type header", at + 10, format!("type name length {name_len} out of range")));
    }
    let mut name = vec![0u8; name_len as usize + 1];
    if let Fill::Eof = input.fill(&mut name)? {
        return Ok(None);
    }
    if name[name_len as usize] != tag::END_OBJECT {
        return Err(NetTraceError::corrupt("type header", input.offset() - 1, "type header not closed by EndObject"));
    }
    name.truncate(name_len as usize);
    String::from_utf8(name)
        .map(|n| Some((n, version)))
        .map_err(|_| NetTraceError::corrupt("type header", at + 14, "type name is not UTF-8"))
}

fn read_v4_trace<I: ByteInput>(input: &mut I) -> Result<TraceInfo, NetTraceError> {
    let mut fs = [0u8; 20];
    if let Fill::Eof = input.fill(&mut fs)? {
        return Err(header_eof("serialization header", input.offset()));
    }
    if &fs != FAST_SERIALIZATION {
        return Err(NetTraceError::corrupt("serialization header", 12, "expected \"!FastSerialization.1\""));
    }
    let at = input.offset();
    let Some([t]) = input.array::<1>()? else {
        return Err(header_eof("trace object", input.offset()));
    };
    if t != tag::BEGIN_PRIVATE_OBJECT {
        return Err(NetTraceError::corrupt("trace object", at, "expected BeginPrivateObject"));
    }
    let Some((name, version)) = read_type_header(input)? else {
        return Err(header_eof("trace object type", input.offset()));
    };
    if name != "Trace" {
        return Err(NetTraceError::corrupt("trace object", at, format!("first object is {name:?}, expected \"Trace\"")));
    }
    let Some(b) = input.array::<49>()? else {
        return Err(header_eof("trace object fields", input.offset()));
    };
    let mut c = Cursor::new(&b);
    let info = trace_fields(&mut c, FormatVersion::V4, version)
        .map_err(|e| e.into_error("trace object", at))?;
    let mut info = info;
    let pid = c.i32("process id").map_err(|e| e.into_error("trace object", at))?;
    let nproc = c.i32("processors").map_err(|e| e.into_error("trace object", at))?;
    let rate = c.i32("sampling rate").map_err(|e| e.into_error("trace object", at))?;
    info.process_id = u64::try_from(pid).ok();
    info.number_of_processors = u32::try_from(nproc).ok();
    info.expected_cpu_sampling_rate = u32::try_from(rate).ok();
    if c.u8("end tag").ok() != Some(tag::END_OBJECT) {
        return Err(NetTraceError::corrupt("trace object", input.offset() - 1, "not closed by EndObject"));
    }
    Ok(info)
}

/// SyncTimeUTC, SyncTimeQPC, QPCFrequency, PointerSize: common to V4 and V6.
fn trace_fields(c: &mut Cursor<'_>, format: FormatVersion, version: i32) -> Result<TraceInfo, BufError> {
    let mut f = [0i16; 8];
    for v in &mut f {
        *v = c.i16("sync time")?;
    }
    let sync_time_qpc = c.i64("sync time QPC")?;
    let qpc_frequency = c.i64("QPC frequency")?;
    if qpc_frequency <= 0 {
        return Err(c.err("QPC frequency is not positive"));
    }
    let pointer_size = c.i32("pointer size")?;
    if pointer_size != 4 && pointer_size != 8 {
        return Err(c.err("pointer size is neither 4 nor 8"));
    }
    Ok(TraceInfo {
        format,
        trace_object_version: version,
        sync_time_utc: SyncTimeUtc::from_fields(f),
        sync_time_qpc,
        qpc_frequency,
        pointer_size: pointer_size as u32,
        process_id: None,
        number_of_processors: None,
        expected_cpu_sampling_rate: None,
        key_values: Vec::new(),
    })
}

fn read_v6_trace<I: ByteInput>(input: &mut I) -> Result<TraceInfo, NetTraceError> {
    let Some(v) = input.array::<8>()? else {
        return Err(header_eof("version", input.offset()));
    };
    let major = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
    let minor = u32::from_le_bytes([v[4], v[5], v[6], v[7]]);
    if major != 6 {
        return Err(NetTraceError::UnsupportedVersion(major));
    }
    let Some(h) = input.array::<4>()? else {
        return Err(header_eof("trace block", input.offset()));
    };
    let h = u32::from_le_bytes(h);
    if h >> 24 != 1 {
        return Err(NetTraceError::corrupt("trace block", input.offset() - 4, format!("first block has kind {}, expected Trace (1)", h >> 24)));
    }
    let at = input.offset();
    let mut body = Vec::new();
    if let Fill::Eof = input.read_into(&mut body, (h & 0x00ff_ffff) as usize)? {
        return Err(header_eof("trace block", input.offset()));
    }
    let mut c = Cursor::new(&body);
    let r: Result<TraceInfo, BufError> = (|| {
        let mut info = trace_fields(&mut c, FormatVersion::V6 { minor }, 6)?;
        let n = c.u32("key/value count")?;
        if u64::from(n) > c.remaining() as u64 / 2 {
            return Err(c.err("key/value count larger than the block"));
        }
        for _ in 0..n {
            let k = c.utf8("key")?;
            let v = c.utf8("value")?;
            match k.as_str() {
                "ProcessId" => info.process_id = v.parse().ok(),
                "HardwareThreadCount" => info.number_of_processors = v.parse().ok(),
                "ExpectedCPUSamplingRate" => info.expected_cpu_sampling_rate = v.parse().ok(),
                _ => {}
            }
            info.key_values.push((k, v));
        }
        Ok(info)
    })();
    r.map_err(|e| e.into_error("trace block", at))
}
