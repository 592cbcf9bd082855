//! A process's EventPipe stream as records: every event undecoded, its time moved onto the
//! host's monotonic clock (on Linux the runtime's QPC clock is CLOCK_MONOTONIC, so the
//! session's sync time is its origin). The agent's live source and replay read through it.
use std::sync::Arc;

use clr_events::eventsource::Value;
use clrprobe_eventpipe::nettrace::{EventMetadata, EventRef, NetTraceError, NetTraceReader, ReaderStats, Source, StreamStatus};

use super::records::{ClrRecord, Payload};

/// `R`: an `io::Read` (a live session's socket) or `InMemory` bytes (a saved stream read
/// whole: decoded in place).
pub struct ClrStream<R: Source> {
    pid: u32,
    reader: NetTraceReader<R>,
    clock: Clock,
    pointer_size: u8,
    /// Provider names repeat: one allocation per provider.
    providers: Vec<Arc<str>>,
    /// What each event type's events are to a live source, with its provider's name.
    kinds: KindCache,
    /// The events [`ClrStream::next_item`] gives (by provider and id).
    keep: fn(&str, u16) -> bool,
    /// Give EventCounters values too.
    counters: bool,
    /// Stacks sent lately, shared by the records that repeat them.
    stacks: StackCache,
    /// [`ClrStream::next_batch_tapped`]: the batch's payloads (the buffer the records then
    /// share), and where each event's is (index in the batch, start, end).
    chunk: Vec<u8>,
    ranges: Vec<(usize, usize, usize)>,
    /// The last batch's payload bytes: the next buffer's size.
    last_chunk: usize,
}

/// The stacks of the records sent lately, by a hash of their addresses (direct-mapped,
/// [`StackCache::SLOTS`] of them): a record whose stack is one of them shares it. A busy
/// allocating app repeats a few stacks; an allocation and a copy per event on the reader
/// thread, a free on the aggregator's (another arena of glibc's, taken under its lock), and
/// the aggregator's first read of a stack written on another core were a tenth of a
/// recording's CPU.
struct StackCache {
    slots: Vec<Option<Arc<[u64]>>>,
    /// Shared by the records of events without a stack (one allocation each otherwise).
    empty: Arc<[u64]>,
}

impl StackCache {
    const SLOTS: usize = 64;

    fn new() -> Self {
        Self { slots: vec![None; Self::SLOTS], empty: Arc::from(&[][..]) }
    }

    fn get(&mut self, stack: &[u64]) -> Arc<[u64]> {
        if stack.is_empty() {
            return self.empty.clone();
        }
        let mut h = rustc_hash::FxHasher::default();
        std::hash::Hash::hash(stack, &mut h);
        let slot = &mut self.slots[(std::hash::Hasher::finish(&h) as usize) % Self::SLOTS];
        match slot {
            Some(s) if **s == *stack => s.clone(),
            _ => slot.insert(Arc::from(stack)).clone(),
        }
    }
}

/// What a live source makes of an event of a type: a runtime EventCounter's value, an event
/// to send, or nothing.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Counter,
    Keep,
    Skip,
}

/// Event types (their metadata, which the reader keeps for the stream's life) seen lately, by
/// a hash of their address (direct-mapped, [`KindCache::SLOTS`] of them): their [`Kind`] and
/// provider's name without comparing names per event (provider names compared as strings, in
/// `wanted` and to find the shared name, were a sixth of a reader's CPU). A slot holds its
/// metadata, so an address is never another type's while it is there.
struct KindCache {
    slots: Vec<Option<KindSlot>>,
}

/// An event type's metadata (held), its provider's shared name, its kind.
type KindSlot = (Arc<EventMetadata>, Arc<str>, Kind);

impl KindCache {
    const SLOTS: usize = 64;

    fn new() -> Self {
        Self { slots: vec![None; Self::SLOTS] }
    }

    /// `meta`'s kind (counters given or not, `keep` the events sent) and provider name (one
    /// allocation per provider through `providers`).
    fn get(&mut self, meta: &Arc<EventMetadata>, providers: &mut Vec<Arc<str>>, counters: bool, keep: fn(&str, u16) -> bool) -> (Kind, &Arc<str>) {
        let at = (Arc::as_ptr(meta) as usize).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        let slot = &mut self.slots[at % Self::SLOTS];
        if !slot.as_ref().is_some_and(|s| Arc::ptr_eq(&s.0, meta)) {
            let provider = meta.provider.as_str();
            let event_id = u16::try_from(meta.event_id).unwrap_or(u16::MAX);
            let kind = if provider == COUNTERS_PROVIDER && counters {
                Kind::Counter
            } else if keep(provider, event_id) {
                Kind::Keep
            } else {
                Kind::Skip
            };
            let name = match providers.iter().find(|p| ***p == *provider) {
                Some(p) => p.clone(),
                None => {
                    providers.push(Arc::from(provider));
                    providers.last().expect("pushed").clone()
                }
            };
            *slot = Some((Arc::clone(meta), name, kind));
        }
        let (_, name, kind) = slot.as_ref().expect("filled");
        (*kind, name)
    }
}

impl<R: Source> ClrStream<R> {
    /// Reads the stream's header.
    pub fn new(pid: u32, stream: R) -> Result<Self, NetTraceError> {
        let reader = NetTraceReader::new(stream)?;
        let info = reader.trace_info();
        let pointer_size = u8::try_from(info.pointer_size).unwrap_or(8);
        let origin_ns = (i128::from(info.sync_time_qpc) * 1_000_000_000 / i128::from(info.qpc_frequency.max(1)))
            .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        let clock = Clock::new(info, origin_ns);
        Ok(Self { pid, reader, clock, pointer_size, providers: Vec::new(), kinds: KindCache::new(), keep: super::wanted, counters: true, stacks: StackCache::new(), chunk: Vec::new(), ranges: Vec::new(), last_chunk: 0 })
    }

    /// [`ClrStream::next_item`] gives only the events `keep` says yes to, and no counters (a
    /// second session on a process, e.g. allocation events only, whose other events the
    /// first session already has).
    pub fn only(mut self, keep: fn(&str, u16) -> bool) -> Self {
        self.keep = keep;
        self.counters = false;
        self
    }

    /// The next event, None at the end of the stream.
    pub fn next_record(&mut self) -> Result<Option<ClrRecord>, NetTraceError> {
        let (pid, clock, pointer_size) = (self.pid, self.clock, self.pointer_size);
        let Some(ev) = self.reader.next_event()? else { return Ok(None) };
        let payload = Payload::from(ev.raw_event().payload);
        let (_, provider) = self.kinds.get(ev.metadata(), &mut self.providers, self.counters, self.keep);
        Ok(Some(record(pid, &clock, pointer_size, provider.clone(), &mut self.stacks, &ev, payload)))
    }

    /// The next item a live source sends: a runtime EventCounter's value, or an event the
    /// aggregator uses ([`super::wanted`], or what [`ClrStream::only`] keeps; the others are
    /// dropped before their payload is copied). None at the end of the stream.
    pub fn next_item(&mut self) -> Result<Option<StreamItem>, NetTraceError> {
        let (pid, clock, pointer_size) = (self.pid, self.clock, self.pointer_size);
        loop {
            let Some(ev) = self.reader.next_event()? else { return Ok(None) };
            match self.kinds.get(ev.metadata(), &mut self.providers, self.counters, self.keep) {
                (Kind::Counter, _) => match counter_value(&ev) {
                    Some((name, value)) => return Ok(Some(StreamItem::Counter { name, value })),
                    None => continue,
                },
                (Kind::Skip, _) => continue,
                (Kind::Keep, provider) => {
                    let provider = provider.clone();
                    let payload = Payload::from(ev.raw_event().payload);
                    return Ok(Some(StreamItem::Clr(record(pid, &clock, pointer_size, provider, &mut self.stacks, &ev, payload))));
                }
            }
        }
    }

    /// [`ClrStream::next_item`] a batch at a time, every event read (kept or not) shown to
    /// `tap` first (a recording's EventSource collectors: `record --http`, `--providers`): the
    /// items of the events read so far appended to `out`, until the reader would read the
    /// stream again (only the first item may wait for it) or `max` items are there. The
    /// batch's payloads share one buffer (see [`ClrStream::next_batch_tapped`]). The items
    /// read are in `out` whatever the result; false at the end of the stream.
    pub fn next_items_tapped(&mut self, tap: &mut dyn FnMut(&EventRef<'_>), out: &mut Vec<StreamItem>, max: usize) -> Result<bool, NetTraceError> {
        let (mut records, mut counters) = (Vec::new(), Vec::new());
        let result = self.next_batch_tapped(tap, &mut records, &mut counters, max);
        let mut counters = counters.into_iter().peekable();
        for (i, r) in records.into_iter().enumerate() {
            while let Some((_, name, value)) = counters.next_if(|c| c.0 == i) {
                out.push(StreamItem::Counter { name, value });
            }
            out.push(StreamItem::Clr(r));
        }
        out.extend(counters.map(|(_, name, value)| StreamItem::Counter { name, value }));
        result
    }

    /// [`ClrStream::next_items_tapped`] as a live source sends them: the events' records
    /// appended to `records`, and the runtime's EventCounters values to `counters` with the
    /// index in `records` they come before (`records.len()` at the time), at most `max` of
    /// both together. The batch's payloads share one buffer, handed to the records without a
    /// copy: one allocation here per batch and one free where the last of them is dropped, or
    /// none when that buffer comes back ([`ClrStream::reuse_buffer`]). (A live source's records
    /// are dropped on the aggregator's thread: per event, that was glibc's arena lock and a
    /// cache miss on another core each time.)
    pub fn next_batch_tapped(
        &mut self,
        tap: &mut dyn FnMut(&EventRef<'_>),
        records: &mut Vec<ClrRecord>,
        counters: &mut Vec<(usize, String, u64)>,
        max: usize,
    ) -> Result<bool, NetTraceError> {
        let (pid, clock, pointer_size) = (self.pid, self.clock, self.pointer_size);
        let (first, first_counter) = (records.len(), counters.len());
        self.chunk.clear();
        if self.chunk.capacity() == 0 {
            // Sized from the last batch's, with room to grow a quarter.
            self.chunk.reserve((self.last_chunk + self.last_chunk / 4).min(CHUNK_KEPT));
        }
        self.ranges.clear();
        let mut result = Ok(true);
        while records.len() - first + counters.len() - first_counter < max {
            if records.len() - first + counters.len() - first_counter > 0 && self.reader.ready() == 0 {
                break;
            }
            let ev = match self.reader.next_event() {
                Ok(Some(ev)) => ev,
                Ok(None) => {
                    result = Ok(false);
                    break;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            tap(&ev);
            let provider = match self.kinds.get(ev.metadata(), &mut self.providers, self.counters, self.keep) {
                (Kind::Counter, _) => {
                    if let Some((name, value)) = counter_value(&ev) {
                        counters.push((records.len(), name, value));
                    }
                    continue;
                }
                (Kind::Skip, _) => continue,
                (Kind::Keep, provider) => provider.clone(),
            };
            let start = self.chunk.len();
            self.chunk.extend_from_slice(ev.payload());
            self.ranges.push((records.len(), start, self.chunk.len()));
            // Its payload is set once the batch's buffer is made (an empty one holds none).
            records.push(record(pid, &clock, pointer_size, provider, &mut self.stacks, &ev, Payload::EMPTY));
        }
        if !self.ranges.is_empty() {
            let len = self.chunk.len();
            self.last_chunk = len;
            if self.chunk.capacity() > len + len / 4 + 4096 {
                // The records hold it until the aggregator is done with them: not twice
                // their bytes after a growth (glibc shrinks in place).
                self.chunk.shrink_to_fit();
            }
            // One count for the batch's records, not one per record.
            let mut shares = Payload::share(std::mem::take(&mut self.chunk), self.ranges.len());
            for &(i, start, end) in &self.ranges {
                if let (Some(r), Some(p)) = (records.get_mut(i), shares.take(start, end)) {
                    r.payload = p;
                }
            }
        } else if self.chunk.capacity() > CHUNK_KEPT {
            // A burst's buffer is not kept.
            self.chunk = Vec::new();
        }
        result
    }

    /// Does the next batch need a buffer for its payloads (the last one went with its records)?
    pub fn wants_buffer(&self) -> bool {
        self.chunk.capacity() == 0
    }

    /// `buf` (a batch's payload buffer its records let go) holds the next batch's payloads, if
    /// one is wanted and it is not a burst's.
    pub fn reuse_buffer(&mut self, mut buf: Vec<u8>) {
        if self.wants_buffer() && buf.capacity() <= CHUNK_KEPT {
            buf.clear();
            self.chunk = buf;
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The session's time 0 on the host's monotonic clock (ns): an event's own time plus
    /// this is its record's time.
    pub fn origin_ns(&self) -> i64 {
        self.clock.origin_ns
    }

    /// Events read and dropped (by the runtime) so far.
    pub fn stats(&self) -> ReaderStats {
        self.reader.stats()
    }

    pub fn status(&self) -> StreamStatus {
        self.reader.status()
    }
}

/// The stream's clock: an event's time on the host's monotonic clock, as its session time
/// ([`EventRef::time_ns`]) plus the session's origin, with the whole nanoseconds per tick
/// worked out once (`time_ns` tells them from the frequency by two divisions per event).
#[derive(Clone, Copy, Debug)]
struct Clock {
    origin_ns: i64,
    sync_time_qpc: i64,
    /// Nanoseconds per tick, when whole (1 on Linux, 100 on Windows): `time_ns`'s fast path.
    ns_per_tick: Option<i64>,
}

impl Clock {
    fn new(info: &clrprobe_eventpipe::nettrace::TraceInfo, origin_ns: i64) -> Self {
        let f = info.qpc_frequency.max(1);
        let ns_per_tick = (f <= 1_000_000_000 && 1_000_000_000 % f == 0).then(|| 1_000_000_000 / f);
        Clock { origin_ns, sync_time_qpc: info.sync_time_qpc, ns_per_tick }
    }

    /// `origin + ev.time_ns()`, at least 0: the same value, the divisions left out where
    /// `time_ns` would take its fast path (the rest goes through it).
    #[inline]
    fn host_ns(&self, ev: &EventRef<'_>) -> u64 {
        let session_ns = self
            .ns_per_tick
            .and_then(|k| ev.timestamp().checked_sub(self.sync_time_qpc)?.checked_mul(k))
            .unwrap_or_else(|| ev.time_ns());
        self.origin_ns.saturating_add(session_ns).max(0) as u64
    }
}

/// One event as a record on the host's clock; repeated stacks shared through `stacks`.
fn record(pid: u32, clock: &Clock, pointer_size: u8, provider: Arc<str>, stacks: &mut StackCache, ev: &EventRef<'_>, payload: Payload) -> ClrRecord {
    let raw = ev.raw_event();
    ClrRecord {
        pid,
        tid: ev.thread_id(),
        time_ns: clock.host_ns(ev),
        provider,
        event_id: raw.event_id,
        version: raw.version,
        pointer_size,
        payload,
        stack: stacks.get(ev.stack()),
    }
}

/// A runtime EventCounter's (name, value) from a [`COUNTERS_PROVIDER`] event, rounded; None
/// for its other events.
fn counter_value(ev: &EventRef<'_>) -> Option<(String, u64)> {
    let (name, value) = counter(ev.metadata(), ev.payload())?;
    Some((name, if value.is_finite() && value > 0.0 { value.round() as u64 } else { 0 }))
}

/// The most of [`ClrStream::next_batch_tapped`]'s payload buffer kept between batches.
const CHUNK_KEPT: usize = 256 * 1024;

/// What [`ClrStream::next_item`] gives a live source.
pub enum StreamItem {
    Clr(ClrRecord),
    /// One value of a runtime EventCounter (System.Runtime's `EventCounters` event).
    Counter { name: String, value: u64 },
}

/// The EventSource whose EventCounters carry the thread pool's numbers (.NET Core 3.0+).
pub const COUNTERS_PROVIDER: &str = "System.Runtime";

/// (counter name, value) of an `EventCounters` event: `Payload.Name` with `Payload.Mean`
/// (polling counters) or `Payload.Increment` (incrementing ones), decoded from the schema the
/// stream carries.
fn counter(meta: &EventMetadata, payload: &[u8]) -> Option<(String, f64)> {
    if meta.name != "EventCounters" {
        return None;
    }
    let fields = clr_events::eventsource::decode_fields(meta.schema.as_ref()?, payload).ok()?;
    let inner = payload_struct(fields)?;
    let mut name = None;
    let mut value = None;
    for (k, v) in inner {
        match (k.as_str(), v) {
            ("Name", Value::String(s)) => name = Some(s),
            ("Mean" | "Increment", Value::F64(x)) => value = Some(x),
            ("Mean" | "Increment", Value::F32(x)) => value = Some(f64::from(x)),
            _ => {}
        }
    }
    Some((name?, value?))
}

/// The `Payload` struct, at whatever depth (.NET 8 wraps it in an anonymous struct).
fn payload_struct(fields: Vec<(String, Value)>) -> Option<Vec<(String, Value)>> {
    for (n, v) in fields {
        if let Value::Struct(inner) = v {
            if n == "Payload" {
                return Some(inner);
            }
            if let Some(p) = payload_struct(inner) {
                return Some(p);
            }
        }
    }
    None
}
