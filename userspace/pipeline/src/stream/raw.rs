//! The saved inputs of a recording (`record --save-raw DIR`), read back by `report --replay
//! DIR`. A directory holds:
//!
//! - `records.clrraw`: what the sources produced besides the runtimes' events, in arrival
//!   order: the 8-byte magic `CLRPRAW\0`, a little-endian `u32` format version
//!   ([`RAW_VERSION`]; versions from [`RAW_MIN_VERSION`] are read), then items, each a `u8` tag, a `u32` payload length and the payload.
//!   Readers skip tags they do not know (an older reader of a newer file of the same version
//!   loses only those items); a different version is refused.
//! - `PID.nettrace`: each process's EventPipe stream, the bytes as read from its diagnostics
//!   socket (`clrprobe trace --dump PID.nettrace` and PerfView open it as it is).
//!
//! Payloads are fixed-width little-endian integers; strings and byte strings are a `u32`
//! length then the bytes; address lists a `u32` count then `u64`s. Items:
//!
//! | tag | item | payload |
//! |---|---|---|
//! | 1 | [`RawMeta`] | freq_hz u64, start_mono_ns u64, start_unix_ns u64, kinds u8 (1 alloc, 2 exceptions, 4 contention, 8 off-CPU), clrprobe version str |
//! | 2 / 3 | CPU / off-CPU [`StackRecord`] | pid u32, tid u32, comm str, time_ns u64, count u64, kernel addrs, user addrs |
//! | 4 | process followed ([`ProcessInfo`]) | pid u32, name str, container id str, runtime version str |
//! | 5 | process exited | pid u32, time_ns u64 |
//! | 6 | thread CPU time | pid u32, tid u32, comm str, cpu_ns u64 |
//! | 7 | process CPU time | pid u32, user_ns u64, system_ns u64 |
//! | 8 | lost | has_pid u8, pid u32, source str, count u64 |
//! | 9 | tick (the sources' clock) | time_ns u64 |
//! | 10 | `/proc/PID/maps` snapshot (when it changed) | pid u32, time_ns u64, text str |
//! | 11 | perf-map bytes appended since the last item of the pid | pid u32, offset u64, bytes |
//! | 12 | a mapped file's identity | path str, size u64, mtime_ns i64, build id str (hex, empty if none) |
//! | 13 | kernel symbols of the kernel addresses seen (kallsyms lines) | text str |
//! | 14 | an EventPipe stream saved | pid u32, file name str (in the directory) |
//! | 15 | end (the recording finished cleanly) | end_ns u64: the recording's end (runtime events stamped after it make no samples), 0 if none; version 1: empty |
//!
//! Times are host CLOCK_MONOTONIC nanoseconds, as in every [`Record`].
use std::{
    io::{self, Read, Write},
    sync::Arc,
};

use super::records::{ProcessInfo, Record, StackRecord};

/// The file of the items in a saved directory.
pub const RECORDS_FILE: &str = "records.clrraw";
pub const RAW_MAGIC: [u8; 8] = *b"CLRPRAW\0";
/// Version 2: the end item carries the recording's end.
pub const RAW_VERSION: u32 = 2;
/// The oldest version read (version 1: no recording end; runtime events are not cut).
pub const RAW_MIN_VERSION: u32 = 1;
/// Largest item read back (a perf-map chunk, a maps snapshot).
pub const MAX_ITEM: u32 = 256 << 20;

/// How the recording ran.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RawMeta {
    pub freq_hz: u64,
    /// CLOCK_MONOTONIC and Unix time (ns) of one moment at the start.
    pub start_mono_ns: u64,
    pub start_unix_ns: u64,
    pub alloc: bool,
    pub exceptions: bool,
    pub contention: bool,
    pub offcpu: bool,
    pub version: String,
}

/// A mapped file as it was when recorded: replay names from the file on disk only when it is
/// still the same (build id for ELF files, size and mtime otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileIdentity {
    pub path: String,
    pub size: u64,
    pub mtime_ns: i64,
    /// Hex; empty when the file has none (or is not ELF).
    pub build_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawItem {
    Meta(RawMeta),
    /// Any record but [`Record::Clr`] (those are in the `PID.nettrace` files).
    Record(Record),
    Maps { pid: u32, time_ns: u64, text: String },
    PerfMap { pid: u32, offset: u64, bytes: Vec<u8> },
    File(FileIdentity),
    KernelSymbols(String),
    Session { pid: u32, file: String },
    /// The recording finished cleanly; runtime events stamped after `end_ns` (host
    /// monotonic, when known) make no samples, as in the live recording.
    End { end_ns: Option<u64> },
}

#[derive(Debug, thiserror::Error)]
pub enum RawError {
    #[error("{path}: not a clrprobe --save-raw file (bad magic); point --replay at the directory `record --save-raw` wrote")]
    Magic { path: String },
    #[error("{path}: saved-input format version {found}, this clrprobe reads versions {RAW_MIN_VERSION} to {RAW_VERSION}; replay it with the clrprobe that recorded it")]
    Version { path: String, found: u32 },
    #[error("{path}: item at byte {offset} is cut short or malformed ({what}); the recording may have been killed — the items before it are replayed")]
    Malformed { path: String, offset: u64, what: &'static str },
    #[error("{path}: {source}")]
    Io { path: String, #[source] source: io::Error },
    #[error("runtime events are saved as PID.nettrace files, not as items")]
    NotAnItem,
}

struct Enc(Vec<u8>);

impl Enc {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn addrs(&mut self, a: &[u64]) {
        self.u32(a.len() as u32);
        for &x in a {
            self.u64(x);
        }
    }
    fn stack(&mut self, s: &StackRecord) {
        self.u32(s.pid);
        self.u32(s.tid);
        self.str(&s.comm);
        self.u64(s.time_ns);
        self.u64(s.count);
        self.addrs(&s.kernel);
        self.addrs(&s.user);
    }
}

/// The header of a records file.
pub fn write_header(w: &mut impl Write) -> io::Result<()> {
    w.write_all(&RAW_MAGIC)?;
    w.write_all(&RAW_VERSION.to_le_bytes())
}

/// Appends one item (tag, length, payload).
pub fn write_item(w: &mut impl Write, item: &RawItem) -> Result<(), RawError> {
    let mut e = Enc(Vec::new());
    let tag = match item {
        RawItem::Meta(m) => {
            e.u64(m.freq_hz);
            e.u64(m.start_mono_ns);
            e.u64(m.start_unix_ns);
            e.u8(u8::from(m.alloc) | u8::from(m.exceptions) << 1 | u8::from(m.contention) << 2 | u8::from(m.offcpu) << 3);
            e.str(&m.version);
            1
        }
        RawItem::Record(r) => match r {
            Record::Cpu(s) => {
                e.stack(s);
                2
            }
            Record::OffCpu(s) => {
                e.stack(s);
                3
            }
            Record::Started(i) => {
                e.u32(i.pid);
                e.str(&i.name);
                e.str(&i.container_id);
                e.str(&i.runtime_version);
                4
            }
            Record::Exited { pid, time_ns } => {
                e.u32(*pid);
                e.u64(*time_ns);
                5
            }
            Record::ThreadCpu { pid, tid, comm, cpu_ns } => {
                e.u32(*pid);
                e.u32(*tid);
                e.str(comm);
                e.u64(*cpu_ns);
                6
            }
            Record::ProcessCpu { pid, user_ns, system_ns } => {
                e.u32(*pid);
                e.u64(*user_ns);
                e.u64(*system_ns);
                7
            }
            Record::Lost { pid, source, count } => {
                e.u8(u8::from(pid.is_some()));
                e.u32(pid.unwrap_or(0));
                e.str(source);
                e.u64(*count);
                8
            }
            Record::Tick { time_ns } => {
                e.u64(*time_ns);
                9
            }
            // Both come from the saved nettrace stream, not from the records file; `record`
            // samples allocations without slices.
            Record::Clr(_) | Record::ClrBatch(_) | Record::Counter { .. } | Record::AllocSampling { .. } => return Err(RawError::NotAnItem),
        },
        RawItem::Maps { pid, time_ns, text } => {
            e.u32(*pid);
            e.u64(*time_ns);
            e.str(text);
            10
        }
        RawItem::PerfMap { pid, offset, bytes } => {
            e.u32(*pid);
            e.u64(*offset);
            e.bytes(bytes);
            11
        }
        RawItem::File(f) => {
            e.str(&f.path);
            e.u64(f.size);
            e.u64(f.mtime_ns as u64);
            e.str(&f.build_id);
            12
        }
        RawItem::KernelSymbols(text) => {
            e.str(text);
            13
        }
        RawItem::Session { pid, file } => {
            e.u32(*pid);
            e.str(file);
            14
        }
        RawItem::End { end_ns } => {
            e.u64(end_ns.unwrap_or(0));
            15
        }
    };
    let io = |source| RawError::Io { path: RECORDS_FILE.into(), source };
    w.write_all(&[tag]).map_err(io)?;
    w.write_all(&(e.0.len() as u32).to_le_bytes()).map_err(io)?;
    w.write_all(&e.0).map_err(io)
}

struct Dec<'a> {
    b: &'a [u8],
}

type D<T> = Result<T, &'static str>;

impl Dec<'_> {
    fn take(&mut self, n: usize) -> D<&[u8]> {
        if self.b.len() < n {
            return Err("payload too short");
        }
        let (a, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(a)
    }
    fn u8(&mut self) -> D<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> D<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> D<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn bytes(&mut self) -> D<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn str(&mut self) -> D<String> {
        String::from_utf8(self.bytes()?).map_err(|_| "string not UTF-8")
    }
    fn addrs(&mut self) -> D<Arc<[u64]>> {
        let n = self.u32()? as usize;
        if n > self.b.len() / 8 {
            return Err("address count past the payload");
        }
        (0..n).map(|_| self.u64()).collect()
    }
    fn stack(&mut self) -> D<StackRecord> {
        Ok(StackRecord {
            pid: self.u32()?,
            tid: self.u32()?,
            comm: Arc::from(self.str()?),
            time_ns: self.u64()?,
            count: self.u64()?,
            kernel: self.addrs()?,
            user: self.addrs()?,
        })
    }
}

/// The sources' names for lost data, as static strings (records carry `&'static str`).
fn lost_source(s: &str) -> &'static str {
    const KNOWN: &[&str] = &["eventpipe", "cpu-samples", "bpf-samples", "offcpu", "cpu-too-late", "cpu-keys-full", "offcpu-keys-full"];
    KNOWN.iter().find(|k| **k == s).copied().unwrap_or("other")
}

fn decode(tag: u8, payload: &[u8]) -> D<Option<RawItem>> {
    let mut d = Dec { b: payload };
    let item = match tag {
        1 => {
            let (freq_hz, start_mono_ns, start_unix_ns, k) = (d.u64()?, d.u64()?, d.u64()?, d.u8()?);
            RawItem::Meta(RawMeta {
                freq_hz,
                start_mono_ns,
                start_unix_ns,
                alloc: k & 1 != 0,
                exceptions: k & 2 != 0,
                contention: k & 4 != 0,
                offcpu: k & 8 != 0,
                version: d.str()?,
            })
        }
        2 => RawItem::Record(Record::Cpu(d.stack()?)),
        3 => RawItem::Record(Record::OffCpu(d.stack()?)),
        4 => RawItem::Record(Record::Started(ProcessInfo { pid: d.u32()?, name: d.str()?, container_id: d.str()?, runtime_version: d.str()? })),
        5 => RawItem::Record(Record::Exited { pid: d.u32()?, time_ns: d.u64()? }),
        6 => RawItem::Record(Record::ThreadCpu { pid: d.u32()?, tid: d.u32()?, comm: Arc::from(d.str()?), cpu_ns: d.u64()? }),
        7 => RawItem::Record(Record::ProcessCpu { pid: d.u32()?, user_ns: d.u64()?, system_ns: d.u64()? }),
        8 => {
            let (has, pid) = (d.u8()?, d.u32()?);
            RawItem::Record(Record::Lost { pid: (has != 0).then_some(pid), source: lost_source(&d.str()?), count: d.u64()? })
        }
        9 => RawItem::Record(Record::Tick { time_ns: d.u64()? }),
        10 => RawItem::Maps { pid: d.u32()?, time_ns: d.u64()?, text: d.str()? },
        11 => RawItem::PerfMap { pid: d.u32()?, offset: d.u64()?, bytes: d.bytes()? },
        12 => RawItem::File(FileIdentity { path: d.str()?, size: d.u64()?, mtime_ns: d.u64()? as i64, build_id: d.str()? }),
        13 => RawItem::KernelSymbols(d.str()?),
        14 => RawItem::Session { pid: d.u32()?, file: d.str()? },
        // Version 1 wrote no end time.
        15 => RawItem::End { end_ns: if d.b.is_empty() { None } else { Some(d.u64()?).filter(|&t| t != 0) } },
        _ => return Ok(None),
    };
    Ok(Some(item))
}

/// Reads the items of a records file one at a time.
pub struct RawReader<R> {
    r: R,
    path: String,
    offset: u64,
}

impl<R: Read> RawReader<R> {
    /// Checks the header. `path` names the file in errors.
    pub fn new(mut r: R, path: &str) -> Result<Self, RawError> {
        let mut head = [0u8; 12];
        r.read_exact(&mut head).map_err(|_| RawError::Magic { path: path.into() })?;
        if head[..8] != RAW_MAGIC {
            return Err(RawError::Magic { path: path.into() });
        }
        let found = u32::from_le_bytes(head[8..].try_into().expect("4 bytes"));
        if !(RAW_MIN_VERSION..=RAW_VERSION).contains(&found) {
            return Err(RawError::Version { path: path.into(), found });
        }
        Ok(Self { r, path: path.into(), offset: 12 })
    }

    /// The next item; None at the end of the file.
    pub fn next_item(&mut self) -> Result<Option<RawItem>, RawError> {
        loop {
            let mut head = [0u8; 5];
            match read_full(&mut self.r, &mut head) {
                Ok(0) => return Ok(None),
                Ok(5) => {}
                Ok(_) => return Err(self.malformed("cut short in an item header")),
                Err(source) => return Err(RawError::Io { path: self.path.clone(), source }),
            }
            let len = u32::from_le_bytes(head[1..].try_into().expect("4 bytes"));
            if len > MAX_ITEM {
                return Err(self.malformed("item longer than the 256 MiB cap"));
            }
            let mut payload = vec![0u8; len as usize];
            match read_full(&mut self.r, &mut payload) {
                Ok(n) if n == len as usize => {}
                Ok(_) => return Err(self.malformed("cut short in an item")),
                Err(source) => return Err(RawError::Io { path: self.path.clone(), source }),
            }
            let item = decode(head[0], &payload).map_err(|what| self.malformed(what))?;
            self.offset += 5 + u64::from(len);
            if let Some(item) = item {
                return Ok(Some(item));
            }
        }
    }

    fn malformed(&self, what: &'static str) -> RawError {
        RawError::Malformed { path: self.path.clone(), offset: self.offset, what }
    }
}

/// Reads until `buf` is full or the end; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items() -> Vec<RawItem> {
        let st = StackRecord { pid: 7, tid: 8, comm: Arc::from("w"), time_ns: 5, kernel: Arc::from(vec![0xffff_8000_0000_1000u64]), user: Arc::from(vec![1u64, 2, 3]), count: 2 };
        vec![
            RawItem::Meta(RawMeta { freq_hz: 99, start_mono_ns: 1, start_unix_ns: 2, alloc: true, exceptions: false, contention: true, offcpu: true, version: "0.1.0".into() }),
            RawItem::Record(Record::Cpu(st.clone())),
            RawItem::Record(Record::OffCpu(st)),
            RawItem::Record(Record::Started(ProcessInfo { pid: 7, name: "a b".into(), container_id: String::new(), runtime_version: "8.0.4".into() })),
            RawItem::Record(Record::Exited { pid: 7, time_ns: 9 }),
            RawItem::Record(Record::ThreadCpu { pid: 7, tid: 8, comm: Arc::from("t"), cpu_ns: 10 }),
            RawItem::Record(Record::ProcessCpu { pid: 7, user_ns: 1, system_ns: 2 }),
            RawItem::Record(Record::Lost { pid: Some(7), source: "eventpipe", count: 3 }),
            RawItem::Record(Record::Lost { pid: None, source: "cpu-samples", count: 4 }),
            RawItem::Record(Record::Tick { time_ns: 11 }),
            RawItem::Maps { pid: 7, time_ns: 3, text: "00400000-00401000 r-xp 00000000 08:01 1 /bin/x\n".into() },
            RawItem::PerfMap { pid: 7, offset: 0, bytes: b"7f00 10 A::B[Tier0]\n".to_vec() },
            RawItem::File(FileIdentity { path: "/bin/x".into(), size: 1, mtime_ns: -5, build_id: "abcd".into() }),
            RawItem::KernelSymbols("ffffffff81000000 t foo\n".into()),
            RawItem::Session { pid: 7, file: "7.nettrace".into() },
            RawItem::End { end_ns: Some(12) },
            RawItem::End { end_ns: None },
        ]
    }

    #[test]
    fn items_round_trip() {
        let mut buf = Vec::new();
        write_header(&mut buf).unwrap();
        for i in items() {
            write_item(&mut buf, &i).unwrap();
        }
        // An item of a later tag is skipped.
        buf.extend_from_slice(&[200, 1, 0, 0, 0, 42]);
        let mut r = RawReader::new(&buf[..], "x").unwrap();
        let mut back = Vec::new();
        while let Some(i) = r.next_item().unwrap() {
            back.push(i);
        }
        assert_eq!(back, items());
    }

    #[test]
    fn version_1_files_are_read_without_an_end_time() {
        let mut buf = RAW_MAGIC.to_vec();
        buf.extend_from_slice(&1u32.to_le_bytes());
        write_item(&mut buf, &items()[9]).unwrap();
        buf.extend_from_slice(&[15, 0, 0, 0, 0]);
        let mut r = RawReader::new(&buf[..], "x").unwrap();
        assert_eq!(r.next_item().unwrap(), Some(RawItem::Record(Record::Tick { time_ns: 11 })));
        assert_eq!(r.next_item().unwrap(), Some(RawItem::End { end_ns: None }));
        assert_eq!(r.next_item().unwrap(), None);
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        assert!(matches!(RawReader::new(&b"nope"[..], "x"), Err(RawError::Magic { .. })));
        let mut v = RAW_MAGIC.to_vec();
        v.extend_from_slice(&9u32.to_le_bytes());
        assert!(matches!(RawReader::new(&v[..], "x"), Err(RawError::Version { found: 9, .. })));
        let mut buf = Vec::new();
        write_header(&mut buf).unwrap();
        write_item(&mut buf, &items()[1]).unwrap();
        buf.truncate(buf.len() - 3);
        let mut r = RawReader::new(&buf[..], "x").unwrap();
        assert!(matches!(r.next_item(), Err(RawError::Malformed { offset: 12, .. })));
        // A count of addresses larger than the payload.
        let mut buf = Vec::new();
        write_header(&mut buf).unwrap();
        buf.extend_from_slice(&[9, 4, 0, 0, 0, 1, 2, 3]);
        let mut r = RawReader::new(&buf[..], "x").unwrap();
        assert!(matches!(r.next_item(), Err(RawError::Malformed { .. })));
    }
}
