//! Loading clrprobe's BPF object and reading its maps back (Linux).
mod hook_cost;
mod loader;
mod logs;
mod object;
mod ring_reader;
mod sched;
mod switch_cost;
mod ustack;
mod batch;

pub use sched::ThreadCpuTime;

pub use logs::LogCollector;
pub use ring_reader::RingReader;
pub use ustack::{CopiedStack, CopyStats};
pub use object::embedded_object;
pub use loader::{MIN_RING_BYTES, copy_queue_records, cpu_ring_bytes};

use std::{collections::HashMap, num::NonZeroU32, path::Path};

use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray},
    programs::{
        PerfEvent, UProbe,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        uprobe::UProbeScope,
    },
};
use aya_log::EbpfLogger;
use clrprobe_common::{SampleKey, SampleValue, Stats, names};

/// Errors of the BPF side. Each names the cause and what to do.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error(
        "this clrprobe was built without its BPF object; build it with `cargo xtask build` \
         (or set CLRPROBE_BPF_OBJ to a built clrprobe-ebpf object)"
    )]
    NotEmbedded,
    #[error("loading the BPF object failed: {0} (run `clrprobe doctor` to see what is missing)")]
    Load(#[from] aya::EbpfError),
    #[error("BPF program {name} is missing from the object")]
    NoProgram { name: &'static str },
    #[error("BPF map {name} is missing from the object")]
    NoMap { name: &'static str },
    #[error("BPF program {name}: {source} (run `clrprobe doctor` to see what is missing)")]
    Program { name: &'static str, #[source] source: aya::programs::ProgramError },
    #[error("BPF map {name}: {source}")]
    Map { name: &'static str, #[source] source: aya::maps::MapError },
    #[error("BPF logger: {0}")]
    Logger(#[from] aya_log::Error),
    #[error("listing online CPUs failed: {0}")]
    Cpus(String),
    #[error("tracefs: {0}")]
    Tracefs(String),
    #[error("starting the stack-copy ring's reader thread: {0}")]
    RingReader(#[source] std::io::Error),
    #[error("BPF map {name}: batched lookup and delete: {source}")]
    Batch { name: &'static str, #[source] source: std::io::Error },
}

/// A loaded BPF object with its log reader kept alive (dropping the logger closes the log map).
pub struct Loaded {
    pub ebpf: Ebpf,
    logger: EbpfLogger<LogCollector>,
    pub logs: LogCollector,
    /// Per-process uprobe links, to detach when the process exits (each holds an fd).
    uprobe_links: HashMap<(&'static str, u32), aya::programs::uprobe::UProbeLinkId>,
}

/// aya-log's ring of BPF log records, and its size here: 16 KiB holds dozens of the object's
/// only record (a process's first uprobe hit; the ring is read at every drain).
const LOG_RING: &str = "AYA_LOGS";
const LOG_RING_BYTES: u32 = 16 << 10;

/// The stack-copy ring of recordings that copy off-CPU stacks (they come at any switch rate):
/// the reader empties it every 50 ms and at once when a quarter of it is taken, so 4 MiB (8 MiB
/// resident: the ring is mapped twice) instead of the object's 16 MiB, which a long recording of
/// busy processes (~50 copies of 16 KiB a second) wrote through and kept resident whole (32 MB).
pub const OFFCPU_RING_BYTES: u32 = 4 << 20;

impl Loaded {
    /// Loads the embedded object and starts collecting its aya-log records.
    pub fn load() -> Result<Self, BpfError> {
        Self::load_bytes(embedded_object()?)
    }

    /// Like [`Loaded::load`], with the stack-copy ring sized to `ring_bytes` (see
    /// [`cpu_ring_bytes`]) instead of the object's 16 MB.
    pub fn load_with_ring(ring_bytes: u32) -> Result<Self, BpfError> {
        Self::load_sized(embedded_object()?, Some(ring_bytes))
    }

    pub fn load_bytes(bytes: &[u8]) -> Result<Self, BpfError> {
        Self::load_sized(bytes, None)
    }

    fn load_sized(bytes: &[u8], ring_bytes: Option<u32>) -> Result<Self, BpfError> {
        // `Ebpf::load` parses the kernel's BTF twice (in `EbpfLoader::new` and again for its
        // `.btf(...)`); `loader_for` parses it at most once, and not at all for an object
        // without CO-RE relocations (see loader.rs).
        let (mut loader, btf) = loader::loader_for(bytes);
        log::debug!("BPF loader: kernel BTF {btf:?}; stack-copy ring {ring_bytes:?} bytes");
        if let Some(n) = ring_bytes {
            loader.map_max_entries(names::USTACK_RING, n);
        }
        // aya-log's ring is 128 KiB, mapped twice and resident as a whole from the start
        // (0.26 MB); the object logs one line per process's first uprobe hit.
        loader.map_max_entries(LOG_RING, LOG_RING_BYTES);
        let mut ebpf = loader.load(bytes)?;
        let logs = LogCollector::default();
        let logger = EbpfLogger::init_with_logger(&mut ebpf, logs.clone())?;
        Ok(Self { ebpf, logger, logs, uprobe_links: HashMap::new() })
    }

    /// Moves pending BPF log records into the collector.
    pub fn poll_logs(&mut self) {
        self.logger.flush();
    }

    /// Records these processes (0 = every process).
    pub fn add_targets(&mut self, pids: &[u32]) -> Result<(), BpfError> {
        let name = names::TARGET_PIDS;
        let map = self.ebpf.map_mut(name).ok_or(BpfError::NoMap { name })?;
        let mut targets: BpfHashMap<&mut MapData, u32, u8> =
            BpfHashMap::try_from(map).map_err(|source| BpfError::Map { name, source })?;
        for &pid in pids {
            targets.insert(pid, 1, 0).map_err(|source| BpfError::Map { name, source })?;
        }
        Ok(())
    }

    /// The program `name` of the object, as its type.
    fn program<'a, T>(&'a mut self, name: &'static str) -> Result<&'a mut T, BpfError>
    where
        &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
    {
        self.ebpf
            .program_mut(name)
            .ok_or(BpfError::NoProgram { name })?
            .try_into()
            .map_err(|source| BpfError::Program { name, source })
    }

    /// Attaches the cpu-clock sampler to every online CPU at `freq` Hz.
    pub fn attach_sampler(&mut self, freq: u64) -> Result<usize, BpfError> {
        let name = names::PROG_CPU_SAMPLE;
        let prog: &mut PerfEvent = self.program(name)?;
        prog.load().map_err(|source| BpfError::Program { name, source })?;
        let cpus = aya::util::online_cpus().map_err(|(what, e)| BpfError::Cpus(format!("{what}: {e}")))?;
        for &cpu in &cpus {
            prog.attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Frequency(freq),
                false,
            )
            .map_err(|source| BpfError::Program { name, source })?;
        }
        Ok(cpus.len())
    }

    /// Attaches the counting uprobe to `symbol` in `target` (a path or a library name like "libc").
    /// With `pid`, the kernel fires it only in that process.
    pub fn attach_uprobe(&mut self, target: &Path, symbol: &str, pid: Option<u32>) -> Result<(), BpfError> {
        self.attach_uprobe_program(names::PROG_UPROBE_COUNT, target, symbol, pid)
    }

    /// Loads (once) the uprobe program `name` and attaches it to `symbol` in `target`.
    fn attach_uprobe_program(&mut self, name: &'static str, target: &Path, symbol: &str, pid: Option<u32>) -> Result<(), BpfError> {
        let prog: &mut UProbe = self.program(name)?;
        if prog.fd().is_err() {
            prog.load().map_err(|source| BpfError::Program { name, source })?;
        }
        let scope = match pid.and_then(NonZeroU32::new) {
            Some(p) => UProbeScope::OneProcess(p),
            None => UProbeScope::AllProcesses,
        };
        let link = prog.attach(symbol, target, scope).map_err(|source| BpfError::Program { name, source })?;
        if let Some(p) = pid {
            self.uprobe_links.insert((name, p), link);
        }
        Ok(())
    }

    /// Detaches every per-process uprobe of `pid` (it exited): a long host-wide recording
    /// keeps no links (fds) of exited processes.
    pub fn detach_uprobes(&mut self, pid: u32) {
        let keys: Vec<_> = self.uprobe_links.keys().filter(|k| k.1 == pid).copied().collect();
        for k in keys {
            if let (Some(link), Ok(prog)) = (self.uprobe_links.remove(&k), self.program::<UProbe>(k.0)) {
                let _ = prog.detach(link);
            }
        }
    }

    /// Pids with per-process uprobes attached.
    pub fn uprobed_pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.uprobe_links.keys().map(|k| k.1).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// A per-pid counter map (UPROBE_COUNTS, CXA_THROWS).
    fn pid_counts(&self, name: &'static str) -> Result<HashMap<u32, u64>, BpfError> {
        let map = self.ebpf.map(name).ok_or(BpfError::NoMap { name })?;
        let m: BpfHashMap<&MapData, u32, u64> =
            BpfHashMap::try_from(map).map_err(|source| BpfError::Map { name, source })?;
        m.iter().map(|r| r.map_err(|source| BpfError::Map { name, source })).collect()
    }

    /// Sample counts aggregated in the kernel, keyed by (pid, tid, stacks, comm).
    pub fn sample_counts(&self) -> Result<Vec<(SampleKey, u64)>, BpfError> {
        let name = names::SAMPLE_COUNTS;
        let map = self.ebpf.map(name).ok_or(BpfError::NoMap { name })?;
        let m: BpfHashMap<&MapData, SampleKey, SampleValue> =
            BpfHashMap::try_from(map).map_err(|source| BpfError::Map { name, source })?;
        m.iter()
            .map(|r| r.map(|(k, v)| (k, v.count)).map_err(|source| BpfError::Map { name, source }))
            .collect()
    }

    /// Reads and deletes every entry of an aggregation map keyed like the samples
    /// (SAMPLE_COUNTS, OFFCPU_NS): a bucket at a time, up to [`batch::ENTRIES`] entries per
    /// `BPF_MAP_LOOKUP_AND_DELETE_BATCH` call (was three calls per entry). Where the kernel
    /// refuses that, entry by entry: increments landing between the read and the delete of a
    /// key are then lost (a window of microseconds per key per drain).
    pub fn drain_counts(&mut self, name: &'static str) -> Result<Vec<(SampleKey, u64)>, BpfError> {
        let mut out = Vec::new();
        if batch::usable() {
            // Checked as below first: a hash map of these key and value sizes.
            let map = self.ebpf.map_mut(name).ok_or(BpfError::NoMap { name })?;
            let m: BpfHashMap<&mut MapData, SampleKey, SampleValue> =
                BpfHashMap::try_from(map).map_err(|source| BpfError::Map { name, source })?;
            // An empty map is not walked: the batch reads lock each of its 65,536 buckets in
            // turn (~0.25 ms a drain), a first-key lookup only reads them. With stack copies,
            // CPU samples come through the ring and SAMPLE_COUNTS holds only those whose copy
            // failed: empty at most drains. An entry added after the look is read next drain,
            // as one added after the walk would be.
            if m.keys().next().is_none() {
                return Ok(out);
            }
            if let Some(aya::maps::Map::HashMap(data)) = self.ebpf.map(name) {
                match batch::drain(data, name, &mut out) {
                    Ok(()) => return Ok(out),
                    Err(e) => {
                        // What was read before the error is kept; the rest goes entry by entry.
                        log::debug!("{e}; entries are read one at a time from here on");
                        batch::refuse();
                    }
                }
            }
        }
        let map = self.ebpf.map_mut(name).ok_or(BpfError::NoMap { name })?;
        let mut m: BpfHashMap<&mut MapData, SampleKey, SampleValue> =
            BpfHashMap::try_from(map).map_err(|source| BpfError::Map { name, source })?;
        let keys: Vec<SampleKey> = m.keys().filter_map(Result::ok).collect();
        out.reserve(keys.len());
        for k in keys {
            if let Ok(v) = m.get(&k, 0) {
                let _ = m.remove(&k);
                out.push((k, v.count));
            }
        }
        Ok(out)
    }

    /// Uprobe hits per pid.
    pub fn uprobe_counts(&self) -> Result<HashMap<u32, u64>, BpfError> {
        self.pid_counts(names::UPROBE_COUNTS)
    }

    /// Counters summed over CPUs.
    pub fn stats(&self) -> Result<Stats, BpfError> {
        let name = names::STATS;
        let map = self.ebpf.map(name).ok_or(BpfError::NoMap { name })?;
        let m: PerCpuArray<&MapData, Stats> =
            PerCpuArray::try_from(map).map_err(|source| BpfError::Map { name, source })?;
        let per_cpu = m.get(&clrprobe_common::STATS_SLOT, 0).map_err(|source| BpfError::Map { name, source })?;
        let mut t = Stats::default();
        for s in per_cpu.iter() {
            t.samples += s.samples;
            t.dropped_map_full += s.dropped_map_full;
            t.user_stack_errors += s.user_stack_errors;
            t.kernel_stack_errors += s.kernel_stack_errors;
            t.uprobe_hits += s.uprobe_hits;
            t.offcpu_intervals += s.offcpu_intervals;
            t.offcpu_dropped += s.offcpu_dropped;
        }
        Ok(t)
    }
}
