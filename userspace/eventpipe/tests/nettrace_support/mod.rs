//! Helpers shared by the NetTrace integration tests: corpus location and loading, and an owned
//! copy of every event a reader hands out.
#![allow(dead_code)]

pub mod writer;

use clrprobe_eventpipe::nettrace::{InMemory, NetTraceError, NetTraceReader, ReaderStats, Source, StreamStatus, TraceInfo};

#[allow(unused_imports)] // not every test crate using this module reads the corpus
pub use clrprobe_tests::corpus::{dir as corpus_dir, read as load};

/// Corpus recordings the tests read again and again.
pub const ARRAYTYPES: &str = "perfview__eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace";
pub const CHECKPOINTS: &str = "perfview__eventpipe-dotnetcore6.0-win-x64-executioncheckpoints.nettrace";
pub const OBJVER4: &str = "perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace";

/// A small deterministic xorshift generator for corruptions and garbage.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// An owned copy of one event.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ev {
    pub timestamp: i64,
    pub provider: String,
    pub event_id: u32,
    pub version: u32,
    pub name: String,
    pub opcode: u8,
    pub thread_id: u64,
    pub capture_thread_id: u64,
    pub processor: u32,
    pub sequence: u32,
    pub activity_id: [u8; 16],
    pub related_activity_id: [u8; 16],
    pub stack: Vec<u64>,
    pub payload: Vec<u8>,
    pub time_ns: i64,
}

pub struct Read_ {
    pub info: TraceInfo,
    pub events: Vec<Ev>,
    pub status: StreamStatus,
    pub stats: ReaderStats,
    pub error: Option<NetTraceError>,
}

/// Reads a whole stream, keeping every event; an error ends the read and is kept.
pub fn read_all(bytes: &[u8]) -> Result<Read_, NetTraceError> {
    read_source(bytes)
}

/// [`read_all`] with the bytes read in place ([`InMemory`]) instead of as a stream.
pub fn read_in_memory(bytes: &[u8]) -> Result<Read_, NetTraceError> {
    read_source(InMemory(bytes))
}

fn read_source<S: Source>(input: S) -> Result<Read_, NetTraceError> {
    let mut r = NetTraceReader::new(input)?;
    let mut events = Vec::new();
    let error = loop {
        match r.next_event() {
            Ok(Some(e)) => {
                let m = e.metadata();
                events.push(Ev {
                    timestamp: e.timestamp(),
                    provider: m.provider.clone(),
                    event_id: m.event_id,
                    version: m.version,
                    name: m.name.clone(),
                    opcode: m.opcode,
                    thread_id: e.thread_id(),
                    capture_thread_id: e.capture_thread_id(),
                    processor: e.processor_number(),
                    sequence: e.sequence_number(),
                    activity_id: e.activity_id(),
                    related_activity_id: e.related_activity_id(),
                    stack: e.stack().to_vec(),
                    payload: e.payload().to_vec(),
                    time_ns: e.time_ns(),
                })
            }
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    Ok(Read_ {
        info: r.trace_info().clone(),
        events,
        status: r.status(),
        stats: r.stats(),
        error,
    })
}

/// Asserts that the bytes read in place give what they give read as a stream: the same
/// events, header, status, counters, and error (or header error). `what` names the input.
pub fn assert_in_memory_reads_like_a_stream(bytes: &[u8], what: &str) {
    match (read_all(bytes), read_in_memory(bytes)) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.info, b.info, "{what}: header");
            assert!(a.events == b.events, "{what}: events differ ({} streamed, {} in place)", a.events.len(), b.events.len());
            assert_eq!(a.status, b.status, "{what}: status");
            assert_eq!(a.stats, b.stats, "{what}: counters");
            assert_eq!(format!("{:?}", a.error), format!("{:?}", b.error), "{what}: error");
        }
        (Err(a), Err(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{what}: header error"),
        (a, b) => panic!("{what}: streamed {:?}, in place {:?}", a.err(), b.err()),
    }
}

/// Little-endian payload walker for checking decoded values in tests.
pub struct P<'a>(pub &'a [u8]);

impl P<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        assert!(self.0.len() >= n, "payload too short");
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take(2).try_into().unwrap())
    }
    pub fn i16(&mut self) -> i16 {
        self.u16() as i16
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    pub fn i64(&mut self) -> i64 {
        i64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    pub fn utf16z(&mut self) -> String {
        let mut units = Vec::new();
        loop {
            let u = self.u16();
            if u == 0 {
                break;
            }
            units.push(u);
        }
        String::from_utf16(&units).expect("utf16")
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
