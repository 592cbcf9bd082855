//! From addresses to profile frames: the symbolizer crate per process, plus the JIT method
//! ranges EventPipe reported (for code the perf map does not name). Named results are cached
//! per (pid, address); unnamed ones are retried at the end, when more names are known.
use std::{collections::HashMap, sync::Arc};

use clrprobe_profile::{Frame, FrameKind};
use clrprobe_symbolizer::{
    Backing, FrameKind as SymKind, ImageCache, ProcessSymbolizer, kernel::is_kernel_address,
};

use super::jit::JitMethod;

mod roots;

/// Attribute set on frames nothing could name.
pub const UNNAMED_ATTR: &str = "unnamed";

struct Process {
    sym: Option<ProcessSymbolizer>,
    /// Light naming (host-wide recordings, processes that are not targets): native frames as
    /// `module+offset`, no ELF symbol tables parsed or mapped for them.
    light: bool,
    /// Sorted by start: (start, end, name).
    jit: Vec<(u64, u64, String)>,
    /// Bumped when what names its addresses may have grown (maps and perf map re-read,
    /// JIT ranges added).
    epoch: u32,
    /// Its executable when the symbolizer was made: a child followed from its fork that then
    /// exec'd (`sh` → `dotnet`) has a new address space to read.
    exe: Option<(u64, u64)>,
}

fn exe_identity(pid: u32) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/exe")).ok().map(|m| (m.dev(), m.ino()))
}

// Keys are addresses and frames clrprobe made: a fast hash (SipHash was a fifth of a stop's CPU).
use clrprobe_profile::hash::FastMap;

/// Unnamed addresses remembered at most: the most a table of 8,192 buckets holds. A
/// long-running agent meets new return addresses in stripped native code all the time (about
/// 150 a minute with three busy processes): when full, the memory is cleared and its addresses
/// are tried again as they come (each costs a lookup that fails once more). Named ones are not
/// bounded so: the end of a recording names exited processes' addresses from them.
const UNNAMED_MAX: usize = 7_168;

/// Named addresses per (pid, address), each distinct frame stored once: the same runtime and
/// library code named in hundreds of short-lived processes of a long `--all` run costs an
/// index per address, not a frame.
#[derive(Default)]
struct Named {
    ids: FastMap<(u32, u64), u32>,
    frames: Vec<Frame>,
    index: FastMap<Frame, u32>,
    /// `frames.len()` after the last [`Named::compact`].
    compacted: usize,
}

impl Named {
    fn contains_key(&self, k: &(u32, u64)) -> bool {
        self.ids.contains_key(k)
    }

    fn get(&self, k: &(u32, u64)) -> Option<&Frame> {
        self.ids.get(k).map(|&i| &self.frames[i as usize])
    }

    fn insert(&mut self, k: (u32, u64), f: Frame) {
        let id = match self.index.get(&f) {
            Some(&i) => i,
            None => {
                let i = self.frames.len() as u32;
                self.frames.push(f.clone());
                self.index.insert(f, i);
                i
            }
        };
        self.ids.insert(k, id);
    }

    fn retain(&mut self, mut keep: impl FnMut(&(u32, u64)) -> bool) {
        self.ids.retain(|k, _| keep(k));
        // Frames no address uses any more (exited processes' JIT code) go once they are half.
        if self.frames.len() >= 4096 && self.frames.len() >= 2 * self.compacted {
            self.compact();
        }
    }

    /// Keeps only the frames some address still names.
    fn compact(&mut self) {
        let mut renumber: HashMap<u32, u32> = HashMap::new();
        let mut frames = Vec::new();
        for id in self.ids.values_mut() {
            let new = *renumber.entry(*id).or_insert_with(|| {
                frames.push(self.frames[*id as usize].clone());
                frames.len() as u32 - 1
            });
            *id = new;
        }
        self.index = frames.iter().enumerate().map(|(i, f)| (f.clone(), i as u32)).collect();
        self.frames = frames;
        self.compacted = self.frames.len();
    }
}

pub struct FrameResolver {
    cache: Arc<ImageCache>,
    processes: HashMap<u32, Process>,
    named: Named,
    /// Kinds of addresses not named (yet), to tell managed code from native, with the
    /// process's naming epoch when they were last tried: a sample retries them only once
    /// its names have been refreshed since (not at every sample: stripped libraries leave
    /// most native addresses unnamed for good).
    unnamed: FastMap<(u32, u64), (FrameKind, u32)>,
    /// Sample-weighted managed frames seen, and how many of them had a name.
    managed_frames: u64,
    managed_named: u64,
    perf_map_names_corrected: u64,
    mappings: super::mappings::Mappings,
    /// Past this, addresses are not symbolized any more (left as addresses): keeps each drain,
    /// and the end of a recording after Ctrl-C, bounded whatever the host runs.
    deadline: Option<std::time::Instant>,
    /// Addresses left unnamed because the deadline had passed.
    pub out_of_time: u64,
    light_others: bool,
    /// Addresses not looked up yet because a drain ran out of time, per process.
    backlog: HashMap<u32, std::collections::HashSet<u64>>,
    /// User addresses outside every executable mapping of their process (see `roots`).
    outside: FastMap<(u32, u64), ()>,
}

impl Default for FrameResolver {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameResolver {
    pub fn new() -> Self {
        Self {
            cache: Arc::new(ImageCache::new()),
            processes: HashMap::new(),
            named: Named::default(),
            unnamed: FastMap::default(),
            managed_frames: 0,
            managed_named: 0,
            perf_map_names_corrected: 0,
            mappings: super::mappings::Mappings::default(),
            deadline: None,
            out_of_time: 0,
            light_others: false,
            backlog: HashMap::new(),
            outside: FastMap::default(),
        }
    }

    /// Sets (or clears) the time after which no more addresses are symbolized.
    pub fn set_deadline(&mut self, deadline: Option<std::time::Instant>) {
        self.deadline = deadline;
    }

    fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| std::time::Instant::now() >= d)
    }

    /// Loads the kernel's symbols on a thread now, so naming kernel frames at the end of a
    /// recording (after Ctrl-C) does not wait for /proc/kallsyms to be read.
    pub fn preload_kernel(&self) {
        let cache = Arc::clone(&self.cache);
        let _ = std::thread::Builder::new().name("kallsyms".into()).spawn(move || {
            let _ = cache.kernel();
        });
    }

    /// Notes a sample's kernel frames: kallsyms names are read only for the symbols seen, all
    /// in one pass when the first kernel frame is named.
    pub fn note_kernel(&self, kernel: &[u64]) {
        if !kernel.is_empty()
            && kernel != [crate::unwind::wait::PREEMPTED_ADDRESS]
            && let Ok(k) = self.cache.kernel()
        {
            k.note(lookup_addrs(kernel));
        }
    }

    /// Adds a target: every frame of it is named as well as can be.
    pub fn add_process(&mut self, pid: u32) {
        if self.processes.get(&pid).is_some_and(|p| p.light) {
            // Seen in host-wide samples before it was found to be a target: name it afresh.
            self.named.retain(|k| k.0 != pid);
            self.unnamed.retain(|k, _| k.0 != pid);
        }
        let sym = ProcessSymbolizer::with_cache(pid, Arc::clone(&self.cache)).inspect_err(|e| log::debug!("pid {pid}: no symbolizer: {e}")).ok();
        self.processes.insert(pid, Process { sym, light: false, jit: Vec::new(), exe: exe_identity(pid), epoch: 0 });
    }

    /// Replay: names the symbolizer's process with it (a symbolizer of saved inputs; no
    /// executable identity, so a live process that reuses the pid is never read).
    pub fn add_symbolizer(&mut self, sym: ProcessSymbolizer) {
        self.processes.insert(sym.pid(), Process { sym: Some(sym), light: false, jit: Vec::new(), exe: None, epoch: 0 });
    }

    /// Replay: the build ids of mapped files as recorded, by path (no process file is read).
    pub fn use_saved_build_ids(&mut self, ids: HashMap<String, String>) {
        self.mappings.saved_build_ids = Some(ids);
    }

    /// The symbolizer of `pid`, while it has one.
    pub fn symbolizer_mut(&mut self, pid: u32) -> Option<&mut ProcessSymbolizer> {
        self.processes.get_mut(&pid).and_then(|p| p.sym.as_mut())
    }

    /// The parsed images and kernel symbols shared by every process.
    pub fn image_cache(&self) -> &Arc<ImageCache> {
        &self.cache
    }

    /// Adds `pid` unless it is known already (processes first seen in a host-wide sample).
    /// With [`FrameResolver::light_for_others`], it is named lightly.
    pub fn ensure_process(&mut self, pid: u32) {
        if !self.processes.contains_key(&pid) {
            let sym = ProcessSymbolizer::with_cache(pid, Arc::clone(&self.cache)).inspect_err(|e| log::debug!("pid {pid}: no symbolizer: {e}")).ok();
            self.processes.insert(pid, Process { sym, light: self.light_others, jit: Vec::new(), exe: exe_identity(pid), epoch: 0 });
        }
    }

    /// Forgets processes (gone ones, in a long-running agent or `--all`): their symbolizers,
    /// named addresses, mappings and JIT ranges. Distinct frames stay (shared by others).
    pub fn forget(&mut self, pids: &std::collections::HashSet<u32>) {
        if pids.is_empty() {
            return;
        }
        self.processes.retain(|p, _| !pids.contains(p));
        self.named.retain(|(p, _)| !pids.contains(p));
        self.unnamed.retain(|(p, _), _| !pids.contains(p));
        self.backlog.retain(|p, _| !pids.contains(p));
        self.outside.retain(|(p, _), _| !pids.contains(p));
        self.mappings.forget(pids);
    }

    /// Per-process entries held (processes, named and unnamed addresses): for memory checks.
    pub fn held(&self) -> (usize, usize, usize) {
        (self.processes.len(), self.named.ids.len(), self.unnamed.len())
    }

    /// Sizes of what the resolver holds, for a long-running agent's memory census.
    pub fn census(&self) -> String {
        let jit: usize = self.processes.values().map(|p| p.jit.len()).sum();
        let jit_text: usize = self.processes.values().flat_map(|p| p.jit.iter()).map(|j| j.2.len()).sum();
        let perf: usize = self.processes.values().filter_map(|p| p.sym.as_ref()).map(|s| s.perf_map().len()).sum();
        let backlog: usize = self.backlog.values().map(|b| b.len()).sum();
        format!(
            "processes {} named {} frames {} unnamed {} outside {} backlog {} jit {} ({} name bytes) perf-map {}",
            self.processes.len(),
            self.named.ids.len(),
            self.named.frames.len(),
            self.unnamed.len(),
            self.outside.len(),
            backlog,
            jit,
            jit_text,
            perf
        )
    }

    /// The processes known.
    pub fn pids(&self) -> Vec<u32> {
        self.processes.keys().copied().collect()
    }

    /// Host-wide recordings: processes that are not targets get their native frames named
    /// `module+offset` only (kernel frames still by kallsyms). Parsing and mapping the symbol
    /// tables of every binary on the host (compilers, browsers…) was most of `--all`'s memory.
    pub fn light_for_others(&mut self, light: bool) {
        self.light_others = light;
    }

    /// Re-reads the process's maps and the appended part of its perf map (while it lives).
    pub fn refresh(&mut self, pid: u32) {
        if let Some(p) = self.processes.get(&pid)
            && p.sym.is_some()
            && let Some(then) = p.exe
            && let Some(now) = exe_identity(pid)
            && then != now
        {
            // It exec'd: what was named from its old address space does not apply.
            let light = p.light;
            self.named.retain(|k| k.0 != pid);
            self.unnamed.retain(|k, _| k.0 != pid);
            self.outside.retain(|k, _| k.0 != pid);
            let sym = ProcessSymbolizer::with_cache(pid, Arc::clone(&self.cache)).inspect_err(|e| log::debug!("pid {pid}: no symbolizer: {e}")).ok();
            self.processes.insert(pid, Process { sym, light, jit: Vec::new(), exe: Some(now), epoch: 0 });
        }
        if let Some(s) = self.processes.get_mut(&pid).and_then(|p| p.sym.as_mut()) {
            let _ = s.refresh_maps();
        }
        self.refresh_perf_map(pid);
    }

    /// Re-reads the appended part of the process's perf map only, its maps left as last read
    /// (code mapped since is found when an address falls outside them: see
    /// `resolve` and `user_frames_kept`).
    pub fn refresh_perf_map(&mut self, pid: u32) {
        if let Some(p) = self.processes.get_mut(&pid) {
            p.epoch = p.epoch.wrapping_add(1);
            if let Some(s) = p.sym.as_mut() {
                let _ = s.refresh_perf_map();
            }
        }
    }

    fn epoch(&self, pid: u32) -> u32 {
        self.processes.get(&pid).map_or(0, |p| p.epoch)
    }

    /// Adds JIT code ranges reported by EventPipe (MethodLoadVerbose / rundown).
    pub fn add_jit_methods(&mut self, pid: u32, methods: &[JitMethod]) {
        let Some(p) = self.processes.get_mut(&pid) else { return };
        if !methods.is_empty() {
            p.epoch = p.epoch.wrapping_add(1);
        }
        p.jit.extend(methods.iter().map(|m| (m.start, m.start + m.size as u64, m.name.clone())));
        p.jit.sort_by_key(|m| m.0);
    }

    /// Resolves the new addresses of a user stack now, while the process is alive (module
    /// images are opened through /proc/PID/root), and counts how many managed frames of
    /// `count` samples are named.
    pub fn note_addresses(&mut self, pid: u32, user: &[u64], count: u64) {
        if self.past_deadline() {
            // Named at the end (stack() looks up what is not named yet).
            self.backlog.entry(pid).or_default().extend(lookup_addrs(user));
            return;
        }
        let user = &user[..self.user_frames_kept(pid, user)];
        let addrs: Vec<u64> = lookup_addrs(user).collect();
        let epoch = self.epoch(pid);
        let todo: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !self.named.contains_key(&(pid, *a)) && self.unnamed.get(&(pid, *a)).is_none_or(|u| u.1 != epoch))
            .collect();
        if !todo.is_empty() {
            let frames = self.resolve(pid, &todo);
            for (a, f) in todo.into_iter().zip(frames) {
                if f.attr(UNNAMED_ATTR).is_none() {
                    self.unnamed.remove(&(pid, a));
                    self.named.insert((pid, a), f);
                } else {
                    if self.unnamed.len() >= UNNAMED_MAX && !self.unnamed.contains_key(&(pid, a)) {
                        // Bounded (see UNNAMED_MAX): the table keeps its 8,192 buckets.
                        self.unnamed.clear();
                    }
                    self.unnamed.insert((pid, a), (f.kind, epoch));
                }
            }
        }
        for a in addrs {
            if let Some(f) = self.named.get(&(pid, a)) {
                if f.kind.is_managed() {
                    self.managed_frames += count;
                    self.managed_named += count;
                }
            } else if self.unnamed.get(&(pid, a)).is_some_and(|k| k.0.is_managed()) {
                self.managed_frames += count;
            }
        }
    }

    /// Share of sampled managed frames that have a name (1.0 before any is seen).
    pub fn named_share(&self) -> f64 {
        if self.managed_frames == 0 { 1.0 } else { self.managed_named as f64 / self.managed_frames as f64 }
    }

    /// The root→leaf frames of a sample: user frames (outermost first), then kernel frames.
    pub fn stack(&mut self, pid: u32, kernel: &[u64], user: &[u64]) -> Vec<Frame> {
        if crate::unwind::wait::is_preempted(kernel, user) {
            return vec![Frame::new(crate::unwind::wait::PREEMPTED_FRAME, "[kernel]", FrameKind::Kernel)];
        }
        let user = &user[..self.user_frames_kept(pid, user)];
        let mut out = Vec::with_capacity(kernel.len() + user.len());
        let user_addrs: Vec<u64> = lookup_addrs(user).collect();
        let kernel_addrs: Vec<u64> = lookup_addrs(kernel).collect();
        let mut user_frames = self.cached_or_resolve(pid, &user_addrs);
        let mut kernel_frames = self.cached_or_resolve(pid, &kernel_addrs);
        user_frames.reverse();
        kernel_frames.reverse();
        out.extend(user_frames);
        out.extend(kernel_frames);
        out
    }

    fn cached_or_resolve(&mut self, pid: u32, addrs: &[u64]) -> Vec<Frame> {
        let missing: Vec<u64> = addrs.iter().copied().filter(|a| !self.named.contains_key(&(pid, *a))).collect();
        let mut fresh: FastMap<u64, Frame> = FastMap::default();
        if !missing.is_empty() {
            for (a, f) in missing.iter().copied().zip(self.resolve(pid, &missing)) {
                if f.attr(UNNAMED_ATTR).is_none() {
                    self.named.insert((pid, a), f.clone());
                }
                fresh.insert(a, f);
            }
        }
        let jit = self.processes.get(&pid).map(|p| &p.jit);
        let mut corrected = 0;
        let out = addrs
            .iter()
            .map(|a| {
                let f = self.named.get(&(pid, *a)).or_else(|| fresh.get(a)).cloned().unwrap_or_else(|| hex_frame(*a));
                // The runtime's method events name JIT code from metadata; .NET 8.0.4's perf map
                // has been seen cutting a name short (`ThrowInvali`), so the events win.
                match (f.kind, jit.and_then(|j| jit_lookup(j, *a))) {
                    (FrameKind::Jit, Some(ev)) if ev.name != f.name => {
                        corrected += 1;
                        let mut g = ev;
                        g.address = f.address;
                        g.mapping = f.mapping.clone();
                        if let Some(t) = f.attr("tier") {
                            g = g.with_attr("tier", t.to_string());
                        }
                        g
                    }
                    _ => f,
                }
            })
            .collect();
        self.perf_map_names_corrected += corrected;
        out
    }

    /// JIT frames whose perf-map name differed from the runtime's method events.
    pub fn perf_map_names_corrected(&self) -> u64 {
        self.perf_map_names_corrected
    }

    /// Names addresses of one process (lookup addresses: return addresses already minus 1).
    fn resolve(&mut self, pid: u32, addrs: &[u64]) -> Vec<Frame> {
        if self.past_deadline() {
            self.out_of_time += addrs.len() as u64;
            return addrs.iter().map(|&a| hex_frame(a)).collect();
        }
        let kernel = &self.cache;
        let Some(p) = self.processes.get_mut(&pid) else {
            return addrs.iter().map(|&a| kernel_frame(kernel, a).unwrap_or_else(|| hex_frame(a))).collect();
        };
        let Some(sym) = p.sym.as_mut() else {
            // Exited: kernel frames by kallsyms, JIT code by the method events.
            let mappings = &mut self.mappings;
            return addrs
                .iter()
                .map(|&a| {
                    if let Some(f) = kernel_frame(kernel, a) {
                        let mapping = mappings.of(pid, a, &Default::default());
                        return Frame { mapping, ..f };
                    }
                    jit_lookup(&p.jit, a).map(|f| f.with_address(a)).unwrap_or_else(|| hex_frame(a))
                })
                .collect();
        };
        if p.light {
            return light_frames(sym, addrs);
        }
        let frames = sym.symbolize(addrs);
        let mut out = Vec::with_capacity(addrs.len());
        for (&addr, f) in addrs.iter().zip(frames) {
            let converted = match f.kind {
                SymKind::Unknown => {
                    // Code in JIT heaps that the perf map does not name: try the EventPipe ranges.
                    if let Some(named) = jit_lookup(&p.jit, addr) {
                        named.with_address(addr)
                    } else if let Some(stub) = sym.maps().find(addr).and_then(|m| crate::unwind::runtime_code::name(pid, m, addr)) {
                        Frame::new(stub, String::new(), FrameKind::Jit).with_address(addr).with_attr("stub", "runtime")
                    } else {
                        let region = sym.maps().find(addr).map(|m| &m.backing);
                        let kind = match region {
                            Some(Backing::Memfd { .. } | Backing::Anon) | None if !is_kernel_address(addr) => FrameKind::Jit,
                            Some(Backing::File { path, .. }) if path.ends_with(".dll") => FrameKind::ReadyToRun,
                            _ if is_kernel_address(addr) => FrameKind::Kernel,
                            _ => FrameKind::Unknown,
                        };
                        Frame::new(f.name, f.module.unwrap_or_default(), kind).with_address(addr).with_attr(UNNAMED_ATTR, "1")
                    }
                }
                k => {
                    let kind = match k {
                        SymKind::Kernel => FrameKind::Kernel,
                        SymKind::Native => FrameKind::Native,
                        SymKind::Jit => FrameKind::Jit,
                        SymKind::ReadyToRun => FrameKind::ReadyToRun,
                        SymKind::Unknown => FrameKind::Unknown,
                    };
                    let mut fr = Frame::new(f.name, f.module.unwrap_or_default(), kind).with_address(addr);
                    if let Some(t) = f.tier {
                        fr = fr.with_attr("tier", t);
                    }
                    fr
                }
            };
            out.push(converted);
        }
        // Where each address is mapped (pprof mappings: range, offset, path, build id).
        let mut refreshed = false;
        for (f, &addr) in out.iter_mut().zip(addrs) {
            f.mapping = self.mappings.of(pid, addr, sym.maps());
            // Code mapped since the symbolizer last read the maps (named by the perf map,
            // which needs no maps): read them again, once per call.
            if f.mapping.is_none() && !refreshed {
                refreshed = true;
                let _ = sym.refresh_maps();
                f.mapping = self.mappings.of(pid, addr, sym.maps());
            }
        }
        out
    }
}

/// Kernel frames by kallsyms, user frames as `module+offset` (see [`FrameResolver::light_for_others`]).
fn light_frames(sym: &mut ProcessSymbolizer, addrs: &[u64]) -> Vec<Frame> {
    let kernel: Vec<u64> = addrs.iter().copied().filter(|&a| is_kernel_address(a)).collect();
    let mut named = sym.symbolize(&kernel).into_iter();
    addrs
        .iter()
        .map(|&a| {
            if is_kernel_address(a) {
                let f = named.next().expect("one frame per kernel address");
                return Frame::new(f.name, f.module.unwrap_or_default(), FrameKind::Kernel);
            }
            match sym.maps().find(a) {
                Some(m) => {
                    let module = m.module_name().unwrap_or_default();
                    // No address: equal across processes, so stored once (see `Named`).
                    Frame::new(format!("{module}+{:#x}", m.file_offset(a)), module, FrameKind::Native)
                }
                None => hex_frame(a),
            }
        })
        .collect()
}

/// Lookup addresses of a leaf-first stack: the leaf IP as is, return addresses minus one (so
/// a call at the very end of a function is not attributed to the next one).
fn lookup_addrs(stack: &[u64]) -> impl Iterator<Item = u64> + '_ {
    stack.iter().enumerate().map(|(i, &a)| if i == 0 { a } else { a.saturating_sub(1) })
}

fn jit_lookup(jit: &[(u64, u64, String)], addr: u64) -> Option<Frame> {
    let i = jit.partition_point(|m| m.0 <= addr);
    let (start, end, name) = jit.get(i.checked_sub(1)?)?;
    (addr >= *start && addr < *end).then(|| Frame::new(name.clone(), String::new(), FrameKind::Jit).with_attr("source", "eventpipe"))
}

/// A kernel address named by kallsyms (no process needed).
fn kernel_frame(cache: &ImageCache, addr: u64) -> Option<Frame> {
    if !is_kernel_address(addr) {
        return None;
    }
    let k = cache.kernel().ok()?;
    let s = k.lookup(addr)?;
    Some(Frame::new(s.name.to_string(), "[kernel]", FrameKind::Kernel).with_address(addr))
}

fn hex_frame(addr: u64) -> Frame {
    let kind = if is_kernel_address(addr) { FrameKind::Kernel } else { FrameKind::Unknown };
    Frame::new(format!("{addr:#x}"), String::new(), kind).with_address(addr).with_attr(UNNAMED_ATTR, "1")
}

/// Event stacks (EventPipe: managed IPs, leaf first) go through the same names as samples.
impl clrprobe_pipeline::FrameSource for FrameResolver {
    fn frames(&mut self, pid: u32, stack: &[u64]) -> Vec<Frame> {
        self.stack(pid, &[], stack)
    }
}
