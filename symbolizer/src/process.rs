//! The Linux layer: reads `/proc/PID/maps`, the runtime's perf map and mapped files (through
//! `/proc/PID/root`, so other mount namespaces work) and routes each address to a parser.
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cache::{ImageCache, Module};
use crate::kernel::is_kernel_address;
use crate::maps::{Backing, Mapping};
use crate::jitdump::JitDump;
use crate::target_file::{self, Owner, TargetFileError};
use crate::{Error, Frame, FrameKind, Maps, PerfMap};

/// Symbolizes addresses of one process; the perf-map table survives the process's exit.
#[derive(Debug)]
pub struct ProcessSymbolizer {
    pid: u32,
    root: PathBuf,
    /// The process shares our mount namespace and root: mapped paths work as they are (and
    /// the ELF cache, keyed by path, is shared with other such processes).
    same_root: bool,
    maps: Maps,
    perf_map: PerfMap,
    perf_map_paths: Vec<PathBuf>,
    /// The runtime's jitdump (`/tmp/jit-PID.dump`): JIT'd code, and R2R code as first used.
    jitdump: JitDump,
    jitdump_paths: Vec<PathBuf>,
    jitdump_broken: bool,
    /// When the jitdump was last looked for and not found: looked for again at most every
    /// [`JITDUMP_RETRY`] (a runtime writes one only when started with it on; two failed opens
    /// at each of the unwinder's 100 ms ticks per process were most of a quiet recording's
    /// file opens).
    jitdump_missed: Option<std::time::Instant>,
    /// The perf map and jitdump once found, kept open: what the runtime appends before it
    /// exits is read even after the file is deleted (by clrprobe's perf-map guard, say).
    perf_map_file: Option<(PathBuf, std::fs::File)>,
    jitdump_file: Option<(PathBuf, std::fs::File)>,
    /// When each held file's path was last checked to still name it (`[perf map, jitdump]`):
    /// at most every [`REPLACED_CHECK`] (a stat through /proc/PID/root at each 100 ms tick was
    /// a twentieth of a busy recording's CPU with three processes).
    replaced_checked: [Option<std::time::Instant>; 2],
    cache: Arc<ImageCache>,
    /// Per mapped path: what it is (None: could not be opened; not retried per address).
    modules: HashMap<String, Option<Arc<Module>>>,
    /// The perf map was re-read during the current `symbolize` call.
    perf_map_fresh: bool,
    /// Whose files in the target's /tmp are trusted (its uids and root).
    owner: Owner,
    /// Files refused or cut short, one line each (for the recording's summary).
    warnings: Vec<String>,
    /// Replaying saved inputs: the maps and perf map are fed, never read from /proc; only
    /// these mapped files (checked to be the ones recorded) are opened.
    offline: Option<std::collections::HashSet<String>>,
    /// Mapped managed assemblies by simple name (`System.Private.CoreLib` → its path): where
    /// a perf-map name's `[Assembly]` is checked.
    assemblies: HashMap<String, String>,
    /// Digest of the /proc/PID/maps text last parsed: an unchanged text is not parsed again.
    maps_digest: Option<u64>,
}

/// A perf map or jitdump of the target: open, absent, or refused (said once).
enum HeldFile {
    /// `len`: the file's size as of the check that kept it (None: not looked at).
    File { path: PathBuf, file: std::fs::File, fresh: bool, len: Option<u64> },
    Absent,
    Refused,
}

/// Bytes read from a perf map or jitdump per read call.
const READ_CHUNK: usize = 1 << 20;
/// A jitdump is read up to this size (it holds the code bytes too; only names are kept).
pub const MAX_JITDUMP_READ: u64 = 1 << 30;
/// How often an absent jitdump is looked for again.
const JITDUMP_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
/// How often a held perf map or jitdump that still has links is checked to be the file its
/// path names (a replaced one is read from its start; one unlinked is checked at once).
const REPLACED_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

impl ProcessSymbolizer {
    /// A symbolizer with a cache of its own.
    pub fn new(pid: u32) -> Result<Self, Error> {
        Self::with_cache(pid, Arc::new(ImageCache::new()))
    }

    /// A symbolizer sharing parsed images with others.
    pub fn with_cache(pid: u32, cache: Arc<ImageCache>) -> Result<Self, Error> {
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let root = proc.join("root");
        // Same mount namespace and same root directory: mapped paths work as they are here.
        let same_ns = match (std::fs::read_link(proc.join("ns/mnt")), std::fs::read_link("/proc/self/ns/mnt")) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        let same_root = same_ns
            && match (std::fs::metadata(&root), std::fs::metadata("/")) {
                (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
                _ => false,
            };
        // The runtime names the file after its pid inside its own pid namespace.
        let ns_pid = std::fs::read_to_string(proc.join("status"))
            .ok()
            .and_then(|s| s.lines().find(|l| l.starts_with("NSpid:")).and_then(|l| l.split_whitespace().last()?.parse::<u32>().ok()))
            .unwrap_or(pid);
        let paths = |name: String| {
            let mut v = vec![root.join(&name)];
            if same_root {
                // Still readable after the process is gone.
                v.push(Path::new("/").join(&name));
            }
            v
        };
        let owner = Owner::of_pid(pid).unwrap_or(Owner::root());
        let perf_map_paths = paths(format!("tmp/perf-{ns_pid}.map"));
        let jitdump_paths = paths(format!("tmp/jit-{ns_pid}.dump"));
        let mut s = ProcessSymbolizer {
            pid,
            root,
            same_root,
            maps: Maps::default(),
            perf_map: PerfMap::new(),
            perf_map_paths,
            jitdump: JitDump::new(),
            jitdump_paths,
            jitdump_broken: false,
            jitdump_missed: None,
            replaced_checked: [None; 2],
            perf_map_file: None,
            jitdump_file: None,
            cache,
            modules: HashMap::new(),
            perf_map_fresh: false,
            assemblies: HashMap::new(),
            owner,
            warnings: Vec::new(),
            offline: None,
            maps_digest: None,
        };
        s.refresh_maps()?;
        s.refresh_perf_map()?;
        Ok(s)
    }

    /// A symbolizer of saved inputs (replay): no /proc, no target files; maps and perf-map
    /// bytes come from [`ProcessSymbolizer::feed_maps`] and [`ProcessSymbolizer::feed_perf_map`],
    /// native and ReadyToRun code is named from the files in `usable_files` (paths as mapped,
    /// opened as they are: the caller checked they are the files recorded), other mapped code
    /// is `module+offset`.
    pub fn offline(pid: u32, cache: Arc<ImageCache>, usable_files: std::collections::HashSet<String>) -> Self {
        ProcessSymbolizer {
            pid,
            root: PathBuf::from("/"),
            same_root: true,
            maps: Maps::default(),
            perf_map: PerfMap::new(),
            perf_map_paths: Vec::new(),
            jitdump: JitDump::new(),
            jitdump_paths: Vec::new(),
            jitdump_broken: true,
            jitdump_missed: None,
            replaced_checked: [None; 2],
            perf_map_file: None,
            jitdump_file: None,
            cache,
            modules: HashMap::new(),
            perf_map_fresh: false,
            assemblies: HashMap::new(),
            owner: Owner::root(),
            warnings: Vec::new(),
            offline: Some(usable_files),
            maps_digest: None,
        }
    }

    /// Replay: a `/proc/PID/maps` snapshot, merged into the mappings known.
    pub fn feed_maps(&mut self, text: &str) -> Result<(), Error> {
        self.maps.update(Maps::parse(text)?);
        self.note_assemblies();
        self.modules.clear();
        Ok(())
    }

    /// Replay: perf-map bytes appended since the last call.
    pub fn feed_perf_map(&mut self, bytes: &[u8]) {
        self.perf_map.feed(bytes);
    }

    /// Replay: every perf-map byte was fed (a last line without a newline counts).
    pub fn finish_perf_map(&mut self) {
        self.perf_map.finish();
        self.perf_map.index();
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn maps(&self) -> &Maps {
        &self.maps
    }

    pub fn perf_map(&self) -> &PerfMap {
        &self.perf_map
    }

    pub fn cache(&self) -> &Arc<ImageCache> {
        &self.cache
    }

    /// Re-reads `/proc/PID/maps` (keeps the old table if the process is gone).
    pub fn refresh_maps(&mut self) -> Result<(), Error> {
        if self.offline.is_some() {
            return Ok(());
        }
        let path = PathBuf::from(format!("/proc/{}/maps", self.pid));
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let digest = {
                    use std::hash::{Hash, Hasher};
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    text.hash(&mut h);
                    h.finish()
                };
                if self.maps_digest == Some(digest) {
                    // Nothing (un)loaded: the table and the paths' classes stand (merging the
                    // same text again changes nothing); paths that could not be opened are
                    // tried again, as after a change.
                    self.modules.retain(|_, m| m.is_some());
                    return Ok(());
                }
                self.maps.update(Maps::parse(&text)?);
                self.maps_digest = Some(digest);
                self.note_assemblies();
                // Libraries may have been (un)loaded: classify paths afresh (the shared cache
                // still holds the parsed images).
                self.modules.clear();
                Ok(())
            }
            Err(e) if !self.maps.mappings.is_empty() && e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(path, e)),
        }
    }

    /// Files of the target that were refused (wrong type or owner, a link) or read only up to
    /// a cap: one line each, said once.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    fn warn(&mut self, line: String) {
        if !self.warnings.contains(&line) {
            log::warn!("pid {}: {line}", self.pid);
            self.warnings.push(line);
        }
    }

    /// Opens a file of the target's /tmp: Ok(None) if absent or unreadable there, Err(()) if
    /// refused (said once).
    fn open_target_file(&mut self, path: &Path) -> Result<Option<std::fs::File>, ()> {
        match target_file::open(path, self.owner) {
            Ok(f) => Ok(Some(f)),
            Err(TargetFileError::Io { .. }) => Ok(None),
            Err(stale @ TargetFileError::Stale { .. }) => {
                log::debug!("pid {}: {stale}", self.pid);
                Ok(None)
            }
            Err(refused) => {
                self.warn(refused.to_string());
                Err(())
            }
        }
    }

    /// The file held open (still the one at its path, or deleted since), else the first of
    /// `paths` that opens (`fresh`: a file not read before).
    /// `which`: 0 the perf map, 1 the jitdump (whose [`REPLACED_CHECK`] time is used).
    fn held_or_open(&mut self, held: Option<(PathBuf, std::fs::File)>, paths: &[PathBuf], which: usize) -> HeldFile {
        if let Some((path, f)) = held {
            // Still linked (an unlinked or renamed-over file has no links left; fstat walks no
            // path): the path is looked at only every REPLACED_CHECK.
            let checked = &mut self.replaced_checked[which];
            if checked.is_some_and(|t| t.elapsed() < REPLACED_CHECK)
                && let Ok(m) = f.metadata()
                && m.nlink() > 0
            {
                return HeldFile::File { path, file: f, fresh: false, len: Some(m.len()) };
            }
            *checked = Some(std::time::Instant::now());
            match std::fs::symlink_metadata(&path) {
                Err(_) => return HeldFile::File { path, file: f, fresh: false, len: None },
                Ok(now) if f.metadata().is_ok_and(|h| h.ino() == now.ino() && h.dev() == now.dev()) => {
                    return HeldFile::File { path, file: f, fresh: false, len: None };
                }
                Ok(_) => {} // replaced by a new file: read that one from its start
            }
        }
        for path in paths {
            match self.open_target_file(path) {
                Ok(Some(file)) => return HeldFile::File { path: path.clone(), file, fresh: true, len: None },
                Ok(None) => continue,
                Err(()) => return HeldFile::Refused,
            }
        }
        HeldFile::Absent
    }

    /// The jitdump records read so far.
    pub fn jitdump(&self) -> &JitDump {
        &self.jitdump
    }

    /// Reads what was appended to the perf map (and the jitdump) since the last call; returns
    /// records added. Missing files (perf maps disabled, or not written yet) add nothing.
    pub fn refresh_perf_map(&mut self) -> Result<usize, Error> {
        if self.offline.is_some() {
            return Ok(0);
        }
        let from_jitdump = self.refresh_jitdump();
        Ok(self.refresh_perf_map_file()? + from_jitdump)
    }

    /// Jitdump errors are logged, not returned: it is a fallback source.
    fn refresh_jitdump(&mut self) -> usize {
        if self.jitdump_broken {
            return 0;
        }
        if self.jitdump_file.is_none() && self.jitdump_missed.is_some_and(|t| t.elapsed() < JITDUMP_RETRY) {
            return 0;
        }
        let paths = std::mem::take(&mut self.jitdump_paths);
        let held = self.jitdump_file.take();
        let opened = self.held_or_open(held, &paths, 1);
        self.jitdump_paths = paths;
        {
            let (path, mut f) = match opened {
                HeldFile::File { path, file, fresh, .. } => {
                    if fresh && self.jitdump.consumed() > 0 {
                        self.jitdump = JitDump::new();
                    }
                    (path, file)
                }
                HeldFile::Absent => {
                    self.jitdump_missed = Some(std::time::Instant::now());
                    return 0;
                }
                HeldFile::Refused => return 0, // refused: not looked for elsewhere
            };
            let jd = &mut self.jitdump;
            let (mut added, mut err) = (0, None);
            let read = target_file::read_from(&mut f, &path, jd.consumed(), READ_CHUNK, |b| match jd.feed(b) {
                Ok(n) => {
                    added += n;
                    jd.consumed() < MAX_JITDUMP_READ
                }
                Err(e) => {
                    err = Some(e);
                    false
                }
            });
            if read.is_err() {
                return added;
            }
            self.jitdump_file = Some((path.clone(), f));
            if let Some(e) = err {
                self.warn(format!("{}: {e}; jitdump ignored from here on", path.display()));
                self.jitdump_broken = true;
            } else if self.jitdump.consumed() >= MAX_JITDUMP_READ {
                self.warn(format!("{}: larger than {} MiB; not read further", path.display(), MAX_JITDUMP_READ >> 20));
                self.jitdump_broken = true;
            }
            added
        }
    }

    fn refresh_perf_map_file(&mut self) -> Result<usize, Error> {
        let paths = std::mem::take(&mut self.perf_map_paths);
        let held = self.perf_map_file.take();
        let opened = self.held_or_open(held, &paths, 0);
        self.perf_map_paths = paths;
        if let HeldFile::Refused = opened {
            return Ok(0); // refused: not looked for elsewhere
        }
        if let HeldFile::File { path, file: mut f, fresh, len } = opened {
            if fresh && self.perf_map.consumed() > 0 {
                self.perf_map = PerfMap::new();
            }
            let len = match len {
                Some(len) => len,
                None => f.metadata().map_err(|e| Error::io(&path, e))?.len(),
            };
            if !fresh && len == self.perf_map.consumed() && !self.perf_map.unfinished() {
                // Unchanged since the last read, and nothing to finish if the runtime has
                // exited: one fstat (was three, a seek, a read and a stat of /proc/PID).
                self.perf_map_file = Some((path, f));
                return Ok(0);
            }
            if len < self.perf_map.consumed() {
                // Truncated or replaced (pid reuse): start over.
                self.perf_map = PerfMap::new();
            }
            let pm = &mut self.perf_map;
            let mut added = 0;
            target_file::read_from(&mut f, &path, pm.consumed(), READ_CHUNK, |b| {
                added += pm.feed(b);
                !pm.capped()
            })
            .map_err(|e| match e {
                TargetFileError::Io { path, source } => Error::Io { path, source },
                other => Error::io(&path, std::io::Error::other(other.to_string())),
            })?;
            if self.perf_map.capped() {
                self.warn(format!(
                    "{}: past the cap of {} MiB or {} records; later methods are not named from it",
                    path.display(),
                    crate::perf_map::MAX_TEXT >> 20,
                    crate::perf_map::MAX_RECORDS
                ));
            }
            if !self.is_alive() {
                added += self.perf_map.finish();
            }
            self.perf_map.index();
            self.perf_map_file = Some((path, f));
            return Ok(added);
        }
        if !self.is_alive() {
            let added = self.perf_map.finish();
            self.perf_map.index();
            return Ok(added);
        }
        Ok(0)
    }

    fn is_alive(&self) -> bool {
        Path::new(&format!("/proc/{}", self.pid)).exists()
    }

    /// Where a path from the maps can be opened from here.
    fn fs_path(&self, path: &str) -> PathBuf {
        if self.same_root { PathBuf::from(path) } else { self.root.join(path.trim_start_matches('/')) }
    }

    fn module(&mut self, path: &str) -> Option<Arc<Module>> {
        if let Some(m) = self.modules.get(path) {
            return m.clone();
        }
        if self.offline.as_ref().is_some_and(|usable| !usable.contains(path)) {
            self.modules.insert(path.to_string(), None);
            return None;
        }
        let m = match self.cache.module(&self.fs_path(path)) {
            Ok(m) => Some(m),
            Err(e) => {
                log::debug!("pid {}: {e}", self.pid);
                None
            }
        };
        self.modules.insert(path.to_string(), m.clone());
        m
    }

    /// Names each address (same order, same length). A JIT-heap address the perf map does not
    /// name re-reads the perf map once per call; an address outside every mapping re-reads
    /// `/proc/PID/maps` once per call.
    pub fn symbolize(&mut self, addrs: &[u64]) -> Vec<Frame> {
        let mut frames: Vec<Option<Frame>> = vec![None; addrs.len()];
        // ELF work, grouped per file: path -> (frame index, file offset).
        let mut elf: HashMap<String, Vec<(usize, u64)>> = HashMap::new();
        let mut refreshed = false;
        self.perf_map_fresh = false;
        // Taken out for the loop so frames can borrow mappings while `self` is mutated.
        let mut maps = std::mem::take(&mut self.maps);
        for (i, &addr) in addrs.iter().enumerate() {
            if is_kernel_address(addr) {
                frames[i] = Some(self.kernel_frame(addr));
                continue;
            }
            if maps.find(addr).is_none() && !refreshed && self.offline.is_none() && self.perf_map.lookup_sorted(addr).is_none() {
                // New mappings since the last read (a freshly loaded library)?
                refreshed = true;
                // Merged, not replaced: an exiting process (a zombie) shows few or no
                // mappings, and earlier samples still point into them.
                if let Ok(text) = std::fs::read_to_string(format!("/proc/{}/maps", self.pid))
                    && let Ok(fresh) = Maps::parse(&text)
                {
                    maps.update(fresh);
                }
            }
            frames[i] = match maps.find(addr) {
                Some(m) => self.mapped_frame(addr, m, i, &mut elf),
                None => Some(self.jit_frame_refreshing(addr).unwrap_or_else(|| Frame::unknown(None, 0, addr))),
            };
        }
        self.maps = maps;
        if refreshed {
            self.note_assemblies();
        }
        for (path, items) in elf {
            let offsets: Vec<u64> = items.iter().map(|&(_, off)| off).collect();
            let module = module_name(&path);
            // The file checked and held open by the cache, not the path again.
            let Some(file) = self.module(&path).and_then(|m| if let Module::Elf(f) = &*m { Some(f.path()) } else { None }) else { continue };
            let syms = self.cache.elf().symbolize_offsets(&file, &offsets).unwrap_or_else(|e| {
                log::debug!("pid {}: {e}", self.pid);
                vec![None; offsets.len()]
            });
            for (&(i, off), sym) in items.iter().zip(syms) {
                frames[i] = Some(match sym {
                    Some(s) => Frame { name: s.name, module: Some(module.clone()), kind: FrameKind::Native, tier: None, offset: s.offset },
                    None => Frame::unknown(Some(module.clone()), off, addrs[i]),
                });
            }
        }
        frames.into_iter().zip(addrs).map(|(f, &a)| f.unwrap_or_else(|| Frame::unknown(None, 0, a))).collect()
    }

    fn mapped_frame(&mut self, addr: u64, m: &Mapping, i: usize, elf: &mut HashMap<String, Vec<(usize, u64)>>) -> Option<Frame> {
        let off = m.file_offset(addr);
        let Backing::File { path, .. } = &m.backing else {
            // JIT code lives in anonymous or memfd (double-mapped) memory.
            return Some(self.jit_frame_refreshing(addr).unwrap_or_else(|| Frame::unknown(m.module_name(), addr - m.start + m.offset, addr)));
        };
        let module = module_name(path);
        match self.module(path).as_deref() {
            Some(Module::ReadyToRun(img)) => Some(match img.lookup_file_offset(off) {
                Some(hit) => Frame {
                    name: hit.name.to_string(),
                    module: Some(module),
                    kind: FrameKind::ReadyToRun,
                    tier: None,
                    offset: hit.offset as u64,
                },
                None => self.jit_frame(addr).unwrap_or_else(|| Frame::unknown(Some(module), off, addr)),
            }),
            Some(Module::Elf(_)) => {
                elf.entry(path.clone()).or_default().push((i, off));
                None
            }
            _ => Some(self.jit_frame(addr).unwrap_or_else(|| Frame::unknown(Some(module), off, addr))),
        }
    }

    /// Like `jit_frame`, but a miss re-reads the perf map once per `symbolize` call (the method
    /// may have been compiled since the last refresh).
    fn jit_frame_refreshing(&mut self, addr: u64) -> Option<Frame> {
        if let Some(f) = self.jit_frame(addr) {
            return Some(f);
        }
        if self.perf_map_fresh {
            return None;
        }
        self.perf_map_fresh = true;
        match self.refresh_perf_map() {
            Ok(0) => None,
            Ok(_) => self.jit_frame(addr),
            Err(e) => {
                log::debug!("pid {}: {e}", self.pid);
                None
            }
        }
    }

    /// Notes the managed assemblies mapped (`*.dll`, `*.exe`) by simple name.
    fn note_assemblies(&mut self) {
        for m in &self.maps.mappings {
            if let Backing::File { path, .. } = &m.backing {
                let file = path.rsplit('/').next().unwrap_or(path);
                let lower = file.to_ascii_lowercase();
                if let Some(stem) = lower.strip_suffix(".dll").or_else(|| lower.strip_suffix(".exe")).map(|s| &file[..s.len()])
                    && !self.assemblies.contains_key(stem)
                {
                    self.assemblies.insert(stem.to_string(), path.clone());
                }
            }
        }
    }

    /// `Type::Method` completed from the assembly's metadata when the perf map cut it short
    /// (see [`crate::name_repair`]); None to keep the name as written.
    fn repaired_name(&self, assembly: &str, name: &str, full: &str) -> Option<String> {
        let path = self.assemblies.get(assembly)?;
        if self.offline.as_ref().is_some_and(|usable| !usable.contains(path)) {
            return None;
        }
        self.cache.repairs().repair(&self.fs_path(path), name, crate::name_repair::listed_params(full))
    }

    /// Names runtime-generated code: the perf map first, then the jitdump.
    fn jit_frame(&self, addr: u64) -> Option<Frame> {
        let (start, name, tier) = match self.perf_map.lookup_sorted(addr) {
            Some(s) => (s.start, s.name, s.tier),
            None => {
                let r = self.jitdump.lookup(addr)?;
                let (name, tier) = crate::perf_map::split_tier_str(&r.name);
                (r.addr, name, tier)
            }
        };
        let full = name;
        let (module, mut name) = crate::frame::split_managed_name(full);
        if let Some(fixed) = module.as_deref().and_then(|m| self.repaired_name(m, &name, full)) {
            name = fixed;
        }
        let kind = if matches!(tier, Some("PreJIT" | "ReadyToRun")) { FrameKind::ReadyToRun } else { FrameKind::Jit };
        Some(Frame { name, module, kind, tier: tier.map(str::to_string), offset: addr - start })
    }

    fn kernel_frame(&self, addr: u64) -> Frame {
        let k = self.cache.kernel().ok();
        match k.as_deref().and_then(|k| k.lookup(addr)) {
            Some(s) => Frame {
                name: s.name.to_string(),
                module: Some("[kernel]".into()),
                kind: FrameKind::Kernel,
                tier: None,
                offset: s.offset,
            },
            None => Frame::unknown(Some("[kernel]".into()), addr, addr),
        }
    }
}

fn module_name(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}
