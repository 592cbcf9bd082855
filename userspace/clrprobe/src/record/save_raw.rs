//! `record --save-raw DIR`: keeps what the sources produced, for `clrprobe report --replay
//! DIR` (layout: [`clrprobe_pipeline::stream::raw`]). The samples as drained (addresses, not
//! names), each target's `/proc/PID/maps` when it changed, the bytes appended to its perf map,
//! the identity (build id, size, mtime) of every mapped file, process start and exit, the drain
//! ticks, and each EventPipe stream's bytes as read from the socket. One writer thread writes
//! everything through the safe writer ([`clrprobe_profile::safe_file`]: created `O_EXCL |
//! O_NOFOLLOW` under a temporary name, renamed when the recording ends).
//!
//! The hooks are free functions on one process-wide saver so the recording code calls them
//! in one line each; with no saver started they do nothing.
use std::{
    collections::{HashMap, HashSet},
    io::{BufWriter, Read, Write},
    path::{Path, PathBuf},
    sync::{Arc, Mutex, MutexGuard},
    thread::JoinHandle,
};

use clrprobe_pipeline::stream::{
    ProcessInfo, Record,
    raw::{self, FileIdentity, RECORDS_FILE, RawItem, RawMeta},
};
use clrprobe_profile::safe_file::{OutputDir, SafeFileError};
use clrprobe_symbolizer::{
    KernelSymbolizer, Maps,
    kernel::is_kernel_address,
    target_file::{self, Owner},
};
use crossbeam_channel::{Receiver, Sender};

/// Bytes of one target's perf map saved at most (the symbolizer's own cap).
const MAX_PERF_MAP: u64 = 128 << 20;

enum Msg {
    Item(RawItem),
    /// Bytes of an EventPipe stream, by file name.
    Stream(String, Vec<u8>),
    /// The end: what comes after (from a reader left behind) is not saved.
    Close,
}

#[derive(Default)]
struct Known {
    /// Last maps text per pid.
    maps: HashMap<u32, String>,
    /// Perf-map bytes saved per pid.
    perf_map: HashMap<u32, u64>,
    started: HashSet<u32>,
    exited: HashSet<u32>,
    files: HashSet<String>,
    kernel: HashSet<u64>,
    streams: HashSet<String>,
    /// The recording's end (host monotonic ns), for the end marker.
    end_ns: Option<u64>,
}

struct Saver {
    dir: PathBuf,
    tx: Sender<Msg>,
    known: Mutex<Known>,
}

struct Running {
    saver: Arc<Saver>,
    writer: JoinHandle<Result<u64, SafeFileError>>,
}

static SAVER: Mutex<Option<Running>> = Mutex::new(None);
/// A saver runs (checked without the lock on the pipeline's every record).
static ACTIVE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Is a recording saving its raw inputs?
pub fn active() -> bool {
    ACTIVE.load(std::sync::atomic::Ordering::Relaxed)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn saver() -> Option<Arc<Saver>> {
    lock(&SAVER).as_ref().map(|r| Arc::clone(&r.saver))
}

impl Saver {
    fn send(&self, item: RawItem) {
        let _ = self.tx.send(Msg::Item(item));
    }
}

/// Ends saving when dropped, if [`finish`] was not called (a recording that failed midway
/// keeps what was saved, without the end marker's kernel symbols).
pub struct Saving(());

impl Drop for Saving {
    fn drop(&mut self) {
        let _ = finish(None);
    }
}

/// Opens (creating it) and checks `dir`, and starts the writer. Fails before recording
/// starts when `dir` cannot hold the files.
pub fn start(dir: &Path, meta: RawMeta) -> Result<Saving, SafeFileError> {
    let out = OutputDir::open(dir)?;
    let (tx, rx) = crossbeam_channel::unbounded();
    let dir_path = dir.to_path_buf();
    let writer = std::thread::Builder::new()
        .name("save-raw".into())
        .spawn(move || write_all(out, rx))
        .map_err(|source| SafeFileError::Io { path: dir_path.clone(), source })?;
    let saver = Arc::new(Saver { dir: dir.to_path_buf(), tx, known: Mutex::new(Known::default()) });
    saver.send(RawItem::Meta(meta));
    *lock(&SAVER) = Some(Running { saver, writer });
    ACTIVE.store(true, std::sync::atomic::Ordering::Relaxed);
    Ok(Saving(()))
}

/// The writer thread: `records.clrraw` and one `PID.nettrace` per stream, committed (renamed
/// to their names) at [`Msg::Close`]. Returns the bytes written.
fn write_all(out: OutputDir, rx: Receiver<Msg>) -> Result<u64, SafeFileError> {
    let io = |path: PathBuf| move |source| SafeFileError::Io { path: path.clone(), source };
    let records_path = out.path().join(RECORDS_FILE);
    let mut records = out.create(RECORDS_FILE.as_ref())?;
    let mut w = BufWriter::with_capacity(1 << 20, records.take_file());
    raw::write_header(&mut w).map_err(io(records_path.clone()))?;
    let mut streams = HashMap::new();
    let mut bytes = 0u64;
    for msg in rx {
        match msg {
            Msg::Close => break,
            Msg::Item(item) => {
                raw::write_item(&mut w, &item).map_err(|e| SafeFileError::Io { path: records_path.clone(), source: std::io::Error::other(e.to_string()) })?;
            }
            Msg::Stream(name, chunk) => {
                bytes += chunk.len() as u64;
                if !streams.contains_key(&name) {
                    let mut p = out.create(name.as_ref())?;
                    let f = BufWriter::with_capacity(256 << 10, p.take_file());
                    streams.insert(name.clone(), (p, f));
                }
                let (_, f) = streams.get_mut(&name).expect("inserted");
                f.write_all(&chunk).map_err(io(out.path().join(&name)))?;
            }
        }
    }
    let file = w.into_inner().map_err(|e| SafeFileError::Io { path: records_path.clone(), source: e.into_error() })?;
    bytes += file.metadata().map(|m| m.len()).unwrap_or(0);
    records.commit_with(file)?;
    for (name, (p, f)) in streams {
        let file = f.into_inner().map_err(|e| SafeFileError::Io { path: out.path().join(&name), source: e.into_error() })?;
        p.commit_with(file)?;
    }
    Ok(bytes)
}

/// A target's state while it lives: followed from now on (first time), its maps when they
/// changed (and the identity of newly mapped files), the bytes appended to its perf map.
pub fn snapshot(pid: u32) {
    let Some(s) = saver() else { return };
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { return };
    let now = crate::record::gc::monotonic_ns().max(0) as u64;
    let mut k = lock(&s.known);
    if k.started.insert(pid) {
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|c| c.trim_end().to_string()).unwrap_or_default();
        let runtime_version = text
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.ends_with("/libcoreclr.so"))
            .and_then(crate::discover::version_from_path)
            .unwrap_or_default();
        let container_id = crate::pipeline::sources::container_id(pid);
        s.send(RawItem::Record(Record::Started(ProcessInfo { pid, name, container_id, runtime_version })));
    }
    if k.maps.get(&pid) != Some(&text) {
        if let Ok(maps) = Maps::parse(&text) {
            for m in &maps.mappings {
                if let Some(path) = m.path()
                    && path.starts_with('/')
                    && k.files.insert(path.to_string())
                {
                    s.send(RawItem::File(identity(pid, path)));
                }
            }
        }
        s.send(RawItem::Maps { pid, time_ns: now, text: text.clone() });
        k.maps.insert(pid, text);
    }
    let from = k.perf_map.get(&pid).copied().unwrap_or(0);
    drop(k);
    if from < MAX_PERF_MAP
        && let Some(bytes) = perf_map_since(pid, from)
        && !bytes.is_empty()
    {
        lock(&s.known).perf_map.insert(pid, from + bytes.len() as u64);
        s.send(RawItem::PerfMap { pid, offset: from, bytes });
    }
}

/// The file as the target maps it (through its root: other mount namespaces too).
fn identity(pid: u32, path: &str) -> FileIdentity {
    use std::os::unix::fs::MetadataExt;
    let fs_path = PathBuf::from(format!("/proc/{pid}/root{path}"));
    let meta = std::fs::metadata(&fs_path).ok();
    FileIdentity {
        path: path.to_string(),
        size: meta.as_ref().map_or(0, |m| m.size()),
        mtime_ns: meta.as_ref().map_or(0, |m| m.mtime() * 1_000_000_000 + m.mtime_nsec()),
        build_id: clrprobe_symbolizer::build_id::of_file(&fs_path).unwrap_or_default(),
    }
}

/// The target's perf map from byte `from` on (checked like the symbolizer's: a regular file
/// of the target's user or root, not a link), up to the cap.
fn perf_map_since(pid: u32, from: u64) -> Option<Vec<u8>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let ns_pid = status.lines().find(|l| l.starts_with("NSpid:")).and_then(|l| l.split_whitespace().last()?.parse::<u32>().ok()).unwrap_or(pid);
    let owner = Owner::from_status(&status)?;
    let path = PathBuf::from(format!("/proc/{pid}/root/tmp/perf-{ns_pid}.map"));
    let mut f = target_file::open(&path, owner).ok()?;
    let mut out = Vec::new();
    let cap = MAX_PERF_MAP - from;
    target_file::read_from(&mut f, &path, from, 1 << 20, |b| {
        out.extend_from_slice(b);
        (out.len() as u64) < cap
    })
    .ok()?;
    out.truncate(cap as usize);
    // Only whole lines: the rest is saved with the next snapshot.
    let whole = out.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    out.truncate(whole);
    Some(out)
}

/// The end of a drain: exited targets, then the tick.
pub fn tick(targets: &[u32]) {
    let Some(s) = saver() else { return };
    let now = crate::record::gc::monotonic_ns().max(0) as u64;
    let mut k = lock(&s.known);
    for &pid in targets {
        if k.started.contains(&pid) && !super::alive(pid) && k.exited.insert(pid) {
            s.send(RawItem::Record(Record::Exited { pid, time_ns: now }));
        }
    }
    drop(k);
    s.send(RawItem::Record(Record::Tick { time_ns: now }));
}

/// The pipeline's hook (`record` on the streaming pipeline): one record as the aggregator
/// absorbs it, in its order. Samples and off-CPU intervals stamped after the recording's end
/// ([`end_at`]) are not saved (the aggregator leaves them out too); a process followed from
/// now on and each tick read the followed processes' maps and perf maps as [`snapshot`] does;
/// runtime events are in the saved streams ([`tee`]), counters and allocation slices are not
/// items.
pub fn record(r: &Record) {
    let Some(s) = saver() else { return };
    match r {
        Record::Cpu(st) | Record::OffCpu(st) => {
            let mut k = lock(&s.known);
            if st.time_ns != 0 && k.end_ns.is_some_and(|e| st.time_ns > e) {
                return;
            }
            for (i, &a) in st.kernel.iter().enumerate() {
                if is_kernel_address(a) {
                    k.kernel.insert(if i == 0 { a } else { a.saturating_sub(1) });
                }
            }
            drop(k);
            s.send(RawItem::Record(r.clone()));
        }
        Record::Started(info) => {
            let pid = info.pid;
            // Its maps (and the Started item, once) as a live target's.
            let first = lock(&s.known).started.insert(pid);
            if first {
                s.send(RawItem::Record(r.clone()));
            }
            snapshot(pid);
        }
        Record::Exited { pid, .. } => {
            if lock(&s.known).exited.insert(*pid) {
                s.send(RawItem::Record(r.clone()));
            }
        }
        Record::Tick { .. } => {
            let live: Vec<u32> = {
                let k = lock(&s.known);
                let mut v: Vec<u32> = k.started.iter().copied().filter(|p| !k.exited.contains(p)).collect();
                v.sort_unstable();
                v
            };
            for pid in live {
                snapshot(pid);
            }
            s.send(RawItem::Record(r.clone()));
        }
        Record::ThreadCpu { .. } | Record::ProcessCpu { .. } | Record::Lost { .. } => s.send(RawItem::Record(r.clone())),
        Record::Clr(_) | Record::ClrBatch(_) | Record::Counter { .. } | Record::AllocSampling { .. } => {}
    }
}

/// Wraps an EventPipe stream so that what is read is also saved as `PID.nettrace`.
pub fn tee<R: Read>(pid: u32, stream: R) -> Tee<R> {
    let saver = saver();
    let name = saver.as_ref().map(|s| {
        let mut k = lock(&s.known);
        let mut name = format!("{pid}.nettrace");
        let mut n = 1;
        while !k.streams.insert(name.clone()) {
            n += 1;
            name = format!("{pid}-{n}.nettrace");
        }
        s.send(RawItem::Session { pid, file: name.clone() });
        name
    });
    Tee { inner: stream, saver, name: name.unwrap_or_default() }
}

pub struct Tee<R> {
    inner: R,
    saver: Option<Arc<Saver>>,
    name: String,
}

impl<R: Read> Read for Tee<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0
            && let Some(s) = &self.saver
        {
            let _ = s.tx.send(Msg::Stream(self.name.clone(), buf[..n].to_vec()));
        }
        Ok(n)
    }
}

/// The recording ends at `end_mono_ns` (host monotonic): runtime events stamped after it
/// make no samples, in the live recording and in its replay.
pub fn end_at(end_mono_ns: i64) {
    if let Some(s) = saver() {
        lock(&s.known).end_ns = u64::try_from(end_mono_ns).ok().filter(|&t| t != 0);
    }
}

/// Ends saving (after the sessions stopped): the kernel symbols of the kernel addresses seen
/// (from `kernel`, the recording's own table, else read now), the end marker, every file
/// renamed to its name. Returns a line for the summary.
pub fn finish(kernel: Option<Arc<KernelSymbolizer>>) -> Option<Result<String, SafeFileError>> {
    let Running { saver, writer } = lock(&SAVER).take()?;
    ACTIVE.store(false, std::sync::atomic::Ordering::Relaxed);
    let loaded = kernel;
    let kernel: Vec<u64> = {
        let mut v: Vec<u64> = lock(&saver.known).kernel.iter().copied().collect();
        v.sort_unstable();
        v
    };
    if !kernel.is_empty() {
        let text = match loaded.or_else(|| KernelSymbolizer::load().ok().map(Arc::new)) {
            Some(k) => kernel_lines(&k, &kernel),
            None => String::new(),
        };
        saver.send(RawItem::KernelSymbols(text));
    }
    let end_ns = lock(&saver.known).end_ns;
    saver.send(RawItem::End { end_ns });
    // Readers left behind (a runtime that did not answer) may still send: not saved.
    let _ = saver.tx.send(Msg::Close);
    let dir = saver.dir.clone();
    drop(saver);
    Some(match writer.join() {
        Ok(Ok(bytes)) => Ok(format!("saved the raw inputs to {} ({:.1} MB): replay with `clrprobe report --replay {}`", dir.display(), bytes as f64 / 1e6, dir.display())),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(SafeFileError::Io { path: dir, source: std::io::Error::other("the saving thread panicked") }),
    })
}

/// kallsyms lines (`ADDR t NAME`) of the symbols holding `addrs`.
fn kernel_lines(k: &KernelSymbolizer, addrs: &[u64]) -> String {
    if let Err(e) = k.prefetch(addrs.iter().copied()) {
        log::debug!("kernel symbol names: {e}");
    }
    let mut seen = HashSet::new();
    let mut out = String::new();
    for &a in addrs {
        if let Some(s) = k.lookup(a)
            && seen.insert(a - s.offset)
        {
            out.push_str(&format!("{:016x} t {}\n", a - s.offset, s.name));
        }
    }
    out
}
