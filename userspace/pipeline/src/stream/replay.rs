//! Replay: drives an [`Aggregator`] from a directory `record --save-raw` wrote (see
//! [`super::raw`]), without root and without the processes. The items go in their saved
//! order; each process's runtime events are merged in by time, those up to a tick before the
//! tick (as they had arrived by then, give or take the runtime's buffering). The same
//! directory gives the same sequence of records every time.
use std::{
    fs::File,
    io::{BufReader, Read},
    path::{Path, PathBuf},
};

use clrprobe_eventpipe::nettrace::{InMemory, NetTraceError, ReaderStats, StreamStatus};

use super::{
    aggregate::{Aggregator, AggregatorConfig},
    clr_stream::ClrStream,
    raw::{RECORDS_FILE, RawError, RawItem, RawMeta, RawReader},
    records::Record,
};
use crate::Kinds;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Raw(#[from] RawError),
    #[error("{}: {reason}; point --replay at the directory `record --save-raw` wrote", path.display())]
    File { path: PathBuf, reason: String },
    #[error("{}: the first item is not the recording's description; the file is damaged", path.display())]
    NoMeta { path: PathBuf },
}

/// What a replay read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayStats {
    pub items: u64,
    pub records: u64,
    pub events: u64,
    /// The recording ended cleanly (its last item is the end marker).
    pub complete: bool,
    /// Streams that ended early or could not be read, one line each.
    pub warnings: Vec<String>,
}

struct Session {
    stream: SavedStream,
    /// The next event, read ahead.
    next: Option<super::records::ClrRecord>,
    file: String,
    error: Option<NetTraceError>,
}

/// Saved streams up to this size are read whole and decoded in place (the copy of their blocks
/// into the reader's buffers saved); larger ones are read a block at a time, so that replaying
/// a long recording does not hold its streams in memory.
const IN_MEMORY_MAX: u64 = 64 << 20;

/// A saved EventPipe stream.
enum SavedStream {
    Whole(ClrStream<InMemory<Vec<u8>>>),
    Read(ClrStream<BufReader<File>>),
}

impl SavedStream {
    fn next_record(&mut self) -> Result<Option<super::records::ClrRecord>, NetTraceError> {
        match self {
            SavedStream::Whole(s) => s.next_record(),
            SavedStream::Read(s) => s.next_record(),
        }
    }

    fn pid(&self) -> u32 {
        match self {
            SavedStream::Whole(s) => s.pid(),
            SavedStream::Read(s) => s.pid(),
        }
    }

    fn stats(&self) -> ReaderStats {
        match self {
            SavedStream::Whole(s) => s.stats(),
            SavedStream::Read(s) => s.stats(),
        }
    }

    fn status(&self) -> StreamStatus {
        match self {
            SavedStream::Whole(s) => s.status(),
            SavedStream::Read(s) => s.status(),
        }
    }
}

impl Session {
    fn advance(&mut self) {
        self.next = match self.stream.next_record() {
            Ok(r) => r,
            Err(e) => {
                self.error = Some(e);
                None
            }
        };
    }
}

/// A saved directory being replayed.
pub struct Replay {
    dir: PathBuf,
    reader: RawReader<BufReader<File>>,
    meta: RawMeta,
    /// The recording's end, from the end item (read ahead when the directory is opened).
    end_ns: Option<u64>,
    sessions: Vec<Session>,
    stats: ReplayStats,
}

/// Opens a file of the saved directory: a regular file, not a link. Opened without following
/// a link and without blocking (a FIFO there would block a plain open), then checked on the
/// open file itself (no gap between a check and the open).
fn open_in(dir: &Path, name: &str) -> Result<File, ReplayError> {
    let path = dir.join(name);
    if name.contains('/') || name.starts_with('.') {
        return Err(ReplayError::File { path, reason: "names a file outside the directory".into() });
    }
    let err = |reason: String| ReplayError::File { path: path.clone(), reason };
    let not_regular = || err("not a regular file (a link or a special file)".into());
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    // A link put there after the check: ELOOP from O_NOFOLLOW.
    #[cfg(unix)]
    let is_link = |e: &std::io::Error| e.raw_os_error() == Some(libc::ELOOP);
    #[cfg(not(unix))]
    let is_link = |_: &std::io::Error| false;
    let f = options.open(&path).map_err(|e| if is_link(&e) { not_regular() } else { err(e.to_string()) })?;
    if !f.metadata().map_err(|e| err(e.to_string()))?.file_type().is_file() {
        return Err(not_regular());
    }
    Ok(f)
}

/// A saved stream of the directory ([`open_in`]): its bytes when it holds at most `max`, else
/// the open file.
fn read_in(dir: &Path, name: &str, max: u64) -> Result<Result<Vec<u8>, File>, ReplayError> {
    let mut f = open_in(dir, name)?;
    let err = |reason: String| ReplayError::File { path: dir.join(name), reason };
    let meta = f.metadata().map_err(|e| err(e.to_string()))?;
    if meta.len() > max {
        return Ok(Err(f));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // No more than `max` whatever the file does meanwhile.
    (&mut f).take(max).read_to_end(&mut bytes).map_err(|e| err(e.to_string()))?;
    Ok(Ok(bytes))
}

impl Replay {
    /// Opens `dir` and reads the recording's description.
    pub fn open(dir: &Path) -> Result<Self, ReplayError> {
        let f = open_in(dir, RECORDS_FILE)?;
        let path = dir.join(RECORDS_FILE);
        let mut reader = RawReader::new(BufReader::with_capacity(1 << 20, f), &path.display().to_string())?;
        let Some(RawItem::Meta(meta)) = reader.next_item()? else { return Err(ReplayError::NoMeta { path }) };
        let end_ns = Self::end_of(dir)?;
        Ok(Self { dir: dir.to_path_buf(), reader, meta, end_ns, sessions: Vec::new(), stats: ReplayStats { items: 1, ..Default::default() } })
    }

    /// The end item's time: the runtime events up to the last tick are merged in before the
    /// end item is reached, so it is read ahead (the records file is small beside the streams).
    fn end_of(dir: &Path) -> Result<Option<u64>, ReplayError> {
        let f = open_in(dir, RECORDS_FILE)?;
        let path = dir.join(RECORDS_FILE);
        let mut reader = RawReader::new(BufReader::with_capacity(1 << 20, f), &path.display().to_string())?;
        let mut end = None;
        // A damaged file is reported by the replay itself, at its place.
        while let Ok(Some(item)) = reader.next_item() {
            if let RawItem::End { end_ns } = item {
                end = end_ns;
            }
        }
        Ok(end)
    }

    /// When the recording ended: runtime events stamped later make no samples.
    pub fn end_ns(&self) -> Option<u64> {
        self.end_ns
    }

    pub fn meta(&self) -> &RawMeta {
        &self.meta
    }

    /// An aggregator that keeps the whole recording: every CPU second, exited processes.
    pub fn aggregator_config(&self) -> AggregatorConfig {
        let m = &self.meta;
        AggregatorConfig {
            freq_hz: m.freq_hz.max(1),
            buckets: usize::MAX,
            exited_grace_ns: u64::MAX,
            max_cpu_keys: usize::MAX,
            max_offcpu_keys: usize::MAX,
            kinds: Kinds { alloc: m.alloc, exceptions: m.exceptions, contention: m.contention },
            unix_offset_ns: m.start_unix_ns as i64 - m.start_mono_ns as i64,
            keep_gc_history: true,
            events_end_ns: self.end_ns,
            ..AggregatorConfig::default()
        }
    }

    /// Feeds every saved record and event to `agg`; `side` sees the items that are not
    /// records (maps, perf maps, files, kernel symbols: the symbolizer's inputs) in order.
    pub fn run(self, agg: &mut Aggregator, side: &mut dyn FnMut(&RawItem)) -> Result<ReplayStats, ReplayError> {
        self.run_into(&mut |r| agg.absorb(r), side)
    }

    /// [`Replay::run`] handing each record to `absorb` (a benchmark keeps them, to absorb
    /// them again and again).
    pub fn run_into(mut self, absorb: &mut dyn FnMut(Record), side: &mut dyn FnMut(&RawItem)) -> Result<ReplayStats, ReplayError> {
        while let Some(item) = self.reader.next_item()? {
            self.stats.items += 1;
            match item {
                RawItem::Record(r) => {
                    match &r {
                        Record::Tick { time_ns } | Record::Exited { time_ns, .. } => self.events_until(*time_ns, absorb),
                        _ => {}
                    }
                    self.stats.records += 1;
                    absorb(r);
                }
                RawItem::Session { pid, file } => self.open_session(pid, file)?,
                RawItem::End { .. } => self.stats.complete = true,
                other => side(&other),
            }
        }
        self.events_until(u64::MAX, absorb);
        for s in &self.sessions {
            let st = s.stream.stats();
            if st.dropped_events > 0 {
                absorb(Record::Lost { pid: Some(s.stream.pid()), source: "eventpipe", count: st.dropped_events });
            }
            if let Some(e) = &s.error {
                self.stats.warnings.push(format!("{}: {e} (the events before it are replayed)", s.file));
            } else if s.stream.status() != StreamStatus::Complete {
                self.stats.warnings.push(format!("{}: the stream ended before its end marker", s.file));
            }
        }
        Ok(self.stats)
    }

    fn open_session(&mut self, pid: u32, file: String) -> Result<(), ReplayError> {
        let stream = match read_in(&self.dir, &file, IN_MEMORY_MAX)? {
            Ok(bytes) => ClrStream::new(pid, InMemory(bytes)).map(SavedStream::Whole),
            Err(f) => ClrStream::new(pid, BufReader::with_capacity(1 << 20, f)).map(SavedStream::Read),
        };
        match stream {
            Ok(stream) => {
                let mut s = Session { stream, next: None, file, error: None };
                s.advance();
                self.sessions.push(s);
            }
            // Saved before the runtime sent its header (it exited at once): nothing to replay.
            Err(e) => self.stats.warnings.push(format!("{file}: {e}")),
        }
        Ok(())
    }

    /// Absorbs the events of every stream up to `t`, oldest first (ties: first stream first).
    fn events_until(&mut self, t: u64, absorb: &mut dyn FnMut(Record)) {
        loop {
            let Some(i) = (0..self.sessions.len())
                .filter(|&i| self.sessions[i].next.as_ref().is_some_and(|e| e.time_ns <= t))
                .min_by_key(|&i| self.sessions[i].next.as_ref().map(|e| e.time_ns))
            else {
                return;
            };
            let s = &mut self.sessions[i];
            let ev = s.next.take().expect("checked");
            s.advance();
            self.stats.events += 1;
            absorb(Record::Clr(ev));
        }
    }
}
