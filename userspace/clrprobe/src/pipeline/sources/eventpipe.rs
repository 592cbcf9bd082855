//! One EventPipe session per .NET process, read on its own thread; every event goes to the
//! aggregator undecoded, its time moved onto the host's monotonic clock (on Linux the
//! runtime's QPC clock is CLOCK_MONOTONIC in ns, so the session's sync time is its origin).
use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use clrprobe_eventpipe::ipc::{Client, IpcError, Level, ProviderConfig, SessionConfig, StopHandle};
use clrprobe_pipeline::stream::{COUNTERS_PROVIDER, ClrRecord, ClrStream, Payload, Record};
use crossbeam_channel::{Receiver, Sender};

use crate::record::clr_session::SessionError;

pub struct EventPipeSource {
    pid: u32,
    stop: StopHandle,
    thread: Option<JoinHandle<()>>,
}

impl EventPipeSource {
    /// Opens the session and starts reading it into `tx`.
    pub fn start(pid: u32, config: &SessionConfig, tx: Sender<Record>) -> Result<Self, SessionError> {
        Self::start_keeping(pid, config, tx, None)
    }

    /// [`EventPipeSource::start`], sending only the events `keep` says yes to (and no
    /// counters): a second session beside the first.
    pub fn start_keeping(pid: u32, config: &SessionConfig, tx: Sender<Record>, keep: Option<fn(&str, u16) -> bool>) -> Result<Self, SessionError> {
        Self::start_full(pid, config, tx, keep, None)
    }

    /// [`EventPipeSource::start`] for `record --http` / `--providers`: every event is also
    /// shown to `net`, whose requests and summaries go to `parts` when the stream ends.
    pub fn start_net(pid: u32, config: &SessionConfig, tx: Sender<Record>, net: Option<NetTap>) -> Result<Self, SessionError> {
        Self::start_full(pid, config, tx, None, net)
    }

    fn start_full(pid: u32, config: &SessionConfig, tx: Sender<Record>, keep: Option<fn(&str, u16) -> bool>, net: Option<NetTap>) -> Result<Self, SessionError> {
        let mut client = Client::for_pid(pid).map_err(|source| SessionError::Ipc { pid, source })?;
        if keep.is_some() {
            // Slices open and close on the host source's thread: a stalled runtime holds it
            // up this long at most.
            client = client.with_timeout(SLICE_IPC_TIMEOUT);
        }
        let session = client.start_session(config).map_err(|source| SessionError::Ipc { pid, source })?;
        let stop = session.stop_handle();
        // `record --save-raw` on the pipeline: the process's stream saved as it is read (a
        // second session's, keeping only some events, is not a recording's).
        let save = keep.is_none() && crate::record::save_raw::active();
        let thread = std::thread::Builder::new()
            .name(format!("eventpipe-{pid}"))
            .spawn(move || if save { read(pid, crate::record::save_raw::tee(pid, session), &tx, keep, net) } else { read(pid, session, &tx, keep, net) })
            .map_err(|e| SessionError::Ipc { pid, source: IpcError::Io(e) })?;
        Ok(Self { pid, stop, thread: Some(thread) })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Has the stream ended (the process exited, or the session was stopped)?
    pub fn ended(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops the session (the runtime sends its rundown and ends the stream) and waits.
    pub fn stop(mut self) {
        self.stop_and_join();
    }

    /// [`EventPipeSource::stop`] bounded by `deadline`: StopTracing within it, then the end of
    /// the stream awaited until it. A runtime that has not ended its stream by then (stopped,
    /// a rundown too long) is given up on: its stream is shut down, what was read was sent.
    /// Returns whether the stream ended in time.
    /// A runtime whose process is stopped (SIGSTOP, a debugger) cannot answer before the
    /// deadline: given up on at once.
    pub fn stop_by(mut self, deadline: std::time::Instant) -> bool {
        use std::time::{Duration, Instant};
        let stopped = crate::record::clr_session::process_stopped;
        if !stopped(self.pid) {
            let timeout = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(50));
            let _ = self.stop.stop_within(timeout);
        }
        let mut checked = Instant::now();
        while !self.ended() && Instant::now() < deadline {
            if checked.elapsed() >= Duration::from_millis(50) {
                checked = Instant::now();
                if stopped(self.pid) {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let in_time = self.ended();
        if !in_time {
            log::warn!("the runtime of pid {} did not end its EventPipe session in time: given up on", self.pid);
            self.stop.abort();
            // A shut-down stream ends the reader within milliseconds.
            let grace = Instant::now() + Duration::from_millis(150);
            while !self.ended() && Instant::now() < grace {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if self.ended() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        } else {
            // Left behind, its stream shut down; never joined (Drop would wait).
            drop(self.thread.take());
        }
        in_time
    }

    fn stop_and_join(&mut self) {
        let _ = self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for EventPipeSource {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// The most events read before they are sent.
const BATCH: usize = 256;

/// Bound of each IPC exchange (start, stop) of a second session.
const SLICE_IPC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// A session's EventSource collector (`record --http`, `--providers`) and where its outcome
/// goes when the stream ends.
pub struct NetTap {
    pub collector: crate::http::NetCollector,
    pub parts: Sender<crate::record::http::NetPart>,
}

/// Runtime events sent to the aggregator and not yet taken off the channel, all readers
/// together. A batch is one message, so the channel's bound (in messages) no longer bounds the
/// events queued: readers wait for room below that many events, as when each event was a
/// message of its own (backpressure on the socket; the runtime drops and counts what its
/// buffer cannot hold).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// Events queued that never make a reader wait: 16 full batches (with the recorder's 1024-message
/// channel, 1024 events made three readers' 256-event blocks wait on one another).
const MIN_ROOM: usize = 4096;
/// The longest a reader waits for room before it sends anyway (the channel's bound still holds
/// in messages): a stalled or departed aggregator never blocks a reader for good.
const ROOM_WAIT: Duration = Duration::from_secs(1);

/// Sends `batch` once fewer than the channel's capacity of events (at least [`MIN_ROOM`]) are queued (or after
/// [`ROOM_WAIT`]); false when the aggregator is gone.
fn send_batch(tx: &Sender<Record>, mut batch: Vec<ClrRecord>) -> bool {
    let n = batch.len();
    if n < BATCH / 4 {
        // Queued events, not batches, are bounded: a few events do not hold a full batch's
        // room (glibc shrinks in place). Larger batches keep theirs, to be reused whole (one
        // shrunk at each batch grew again by doubling in the next).
        batch.shrink_to_fit();
    }
    let room = tx.capacity().unwrap_or(usize::MAX).max(MIN_ROOM).max(n);
    let deadline = Instant::now() + ROOM_WAIT;
    while IN_FLIGHT.load(Ordering::Relaxed) + n > room && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    IN_FLIGHT.fetch_add(n, Ordering::Relaxed);
    if tx.send(Record::ClrBatch(batch)).is_err() {
        taken(n);
        return false;
    }
    true
}

fn taken(n: usize) {
    let _ = IN_FLIGHT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(n)));
}

/// Batches the aggregator is done with (their records still in them, see [`recycle`]) and
/// payload buffers no record shares any more, for the readers to fill again: a batch's vector
/// and buffer were allocated on a reader's thread and freed on the aggregator's, whose frees
/// into the reader's arena (under its lock, chunks consolidated) were a sixth of the readers'
/// CPU.
struct Spent {
    batches: (Sender<Vec<ClrRecord>>, Receiver<Vec<ClrRecord>>),
    buffers: (Sender<Vec<u8>>, Receiver<Vec<u8>>),
}

/// Batches and buffers waiting to be reused, at most (the memory they hold stays bounded:
/// [`SPENT_BUFFER_MAX`] bytes a buffer at most, a batch's records sharing one, 512 records'
/// room for a batch).
const SPENT_KEPT: usize = 4;
/// A larger buffer (a burst's) is freed, not kept.
const SPENT_BUFFER_MAX: usize = 32 * 1024;

fn spent() -> &'static Spent {
    static SPENT: std::sync::OnceLock<Spent> = std::sync::OnceLock::new();
    SPENT.get_or_init(|| Spent { batches: crossbeam_channel::bounded(SPENT_KEPT), buffers: crossbeam_channel::bounded(SPENT_KEPT) })
}

/// The aggregator is done with `batch` (absorbed): it goes back to the readers with its
/// records, which the reader taking it drops (the counts of their shared provider name,
/// stacks and payload buffer were raised on a reader's thread: lowered on the aggregator's,
/// each record's three counts moved between the two cores). When enough wait already, or the vector is not a batch's size, it is
/// emptied here and its payload buffer goes back on its own (see [`empty`]).
pub fn recycle(mut batch: Vec<ClrRecord>) {
    let s = spent();
    let reusable = batch.capacity() >= BATCH && batch.capacity() <= 2 * BATCH;
    if reusable && batch.first().is_none_or(|r| r.payload.buffer_capacity() <= SPENT_BUFFER_MAX) {
        match s.batches.0.try_send(batch) {
            Ok(()) => return,
            Err(e) => batch = e.into_inner(),
        }
    }
    if let Some(buf) = empty(&mut batch) {
        let _ = s.buffers.0.try_send(buf);
    }
}

/// Drops `batch`'s records; their payload buffer when they were its last holders (and it is
/// not a burst's). Their payloads are let go together: one count lowered per batch, not per
/// record.
fn empty(batch: &mut Vec<ClrRecord>) -> Option<Vec<u8>> {
    let buf = Payload::let_go(batch.iter_mut().map(|r| &mut r.payload));
    batch.clear();
    buf.filter(|b| b.capacity() <= SPENT_BUFFER_MAX)
}

/// The aggregator took `r` off the channel.
pub fn received(r: &Record) {
    if let Record::ClrBatch(v) = r {
        taken(v.len());
    }
}

/// The reader loop over any byte stream (`cargo bench -p clrprobe --bench reader_loop`: a
/// saved stream read as a live session's is, its batches sent to `tx`).
#[doc(hidden)]
pub fn read_stream(pid: u32, stream: impl std::io::Read, tx: &Sender<Record>) {
    read(pid, stream, tx, None, None);
}

fn read(pid: u32, stream: impl std::io::Read, tx: &Sender<Record>, keep: Option<fn(&str, u16) -> bool>, mut net: Option<NetTap>) {
    let mut stream = match ClrStream::new(pid, stream) {
        Ok(s) => match keep {
            Some(k) => s.only(k),
            None => s,
        },
        Err(e) => {
            log::warn!("EventPipe stream of {pid}: {e}");
            return;
        }
    };
    let mut dropped = 0;
    let mut n: usize = 0;
    let origin_ns = stream.origin_ns();
    let mut tap = |ev: &clrprobe_eventpipe::nettrace::EventRef<'_>| {
        if let Some(t) = net.as_mut() {
            t.collector.on_event(ev);
        }
    };
    // The events read with a block go as one record, their payloads in one buffer.
    let mut counters = Vec::new();
    let mut batch = Vec::new();
    'read: loop {
        if batch.capacity() == 0 {
            batch = match spent().batches.1.try_recv() {
                // A batch the aggregator absorbed: its records dropped here, its payload buffer
                // filled again.
                Ok(mut b) => {
                    if let Some(buf) = empty(&mut b) {
                        if stream.wants_buffer() {
                            stream.reuse_buffer(buf);
                        } else {
                            let _ = spent().buffers.0.try_send(buf);
                        }
                    }
                    b
                }
                Err(_) => Vec::with_capacity(BATCH),
            };
        }
        if stream.wants_buffer()
            && let Ok(buf) = spent().buffers.1.try_recv()
        {
            stream.reuse_buffer(buf);
        }
        let more = stream.next_batch_tapped(&mut tap, &mut batch, &mut counters, BATCH);
        n += batch.len() + counters.len();
        // Counters in the stream's order: the events before each go first.
        let mut sent = 0;
        for (at, name, value) in counters.drain(..) {
            if at > sent {
                let rest = batch.split_off(at - sent);
                sent = at;
                if !send_batch(tx, std::mem::replace(&mut batch, rest)) {
                    break 'read;
                }
            }
            if tx.send(Record::Counter { pid, name: Arc::from(name), value }).is_err() {
                break 'read;
            }
        }
        if !batch.is_empty() && !send_batch(tx, std::mem::take(&mut batch)) {
            break;
        }
        if n >= 256 {
            n = 0;
            lost(pid, &stream.stats(), &mut dropped, tx);
        }
        match more {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                log::warn!("EventPipe stream of {pid}: {e}");
                break;
            }
        }
    }
    lost(pid, &stream.stats(), &mut dropped, tx);
    if let Some(t) = net {
        let _ = t.parts.send(crate::record::http::NetPart { pid, outcome: t.collector.finish(), origin_mono_ns: Some(origin_ns) });
    }
}

/// System.Runtime's counters every `interval_s` seconds.
pub fn runtime_counters(interval_s: u32) -> ProviderConfig {
    let mut p = ProviderConfig::new(COUNTERS_PROVIDER, 0, Level::Informational);
    p.arguments.push(("EventCounterIntervalSec".into(), interval_s.to_string()));
    p
}

fn lost(pid: u32, stats: &clrprobe_eventpipe::nettrace::ReaderStats, sent: &mut u64, tx: &Sender<Record>) {
    if stats.dropped_events > *sent {
        let _ = tx.send(Record::Lost { pid: Some(pid), source: "eventpipe", count: stats.dropped_events - *sent });
        *sent = stats.dropped_events;
    }
}
