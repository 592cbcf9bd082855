//! Userspace unwinding of user stacks the BPF programs copied (registers + the top of the
//! stack): DWARF CFI (`.eh_frame`, via framehop) in ELF files, so code without frame pointers
//! (Debian's libc) is walked through; in JIT code a return-address scan then frame pointers
//! (see [`jit`]). Where the copy ends before the thread's start, the frame-pointer stack BPF
//! took at the same moment supplies the rest.
pub mod elf;
pub mod jit;
pub mod runtime_code;
pub mod sparse;
pub mod wait;

use std::{
    collections::HashMap,
    fs::File,
    os::unix::fs::FileExt,
    sync::Arc,
    time::{Duration, Instant},
};

use clrprobe_symbolizer::{Maps, ProcessSymbolizer};
use framehop::{
    FrameAddress, Module, Unwinder as _,
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
};

use elf::{Bytes, ElfUnwind};

/// Unwinding that stops this close to the end of a stack that was copied whole reached the
/// outermost frame.
const NEAR_STACK_END: u64 = 8192;
/// Frames per stack at most.
const MAX_FRAMES: usize = 512;
/// /proc/PID/maps is re-read at most this often when an address falls outside known mappings.
const MAPS_REFRESH: Duration = Duration::from_millis(50);
/// Leaf instruction bytes kept per process (cleared when full): a busy thread's samples land on
/// the same few instructions of its hot loops, and each miss is a read of /proc/PID/mem.
const LEAF_BYTES: usize = 512;
/// Frame addresses whose mapping and JIT method are remembered per process (each table cleared
/// when full): the same call sites come back sample after sample, and looking them up again
/// (the maps' and the perf map's binary searches, the modules' scans, on cold caches: the
/// thread sleeps between batches) was most of the unwinding's own CPU.
const FRAME_MEMO: usize = 1024;
/// Stack values checked for being return addresses, kept per process (emptied when full):
/// every value a stack scan looks at (heap pointers too) was kept for the process's life, a
/// table that grew without bound in a long recording or the agent.
const RETURN_ADDRESSES: usize = 8192;
/// How often a followed process is checked for an exec (/proc/PID/exe resolved: at every
/// MAPS_REFRESH that was ~6 % of the host source's CPU with three busy processes).
const EXEC_CHECK: Duration = Duration::from_millis(500);

/// How a stack's unwinding ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The unwinder found the outermost frame (CFI says so, or RBP became 0).
    Complete,
    /// The copy ended; the frame-pointer stack supplied the rest.
    MergedWithFramePointers,
    /// Stopped early (the copy ended and the frame-pointer stack did not continue it, or no
    /// rule applied).
    Truncated,
}

/// Counters of what the unwinder did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct UnwindStats {
    pub stacks: u64,
    pub complete: u64,
    pub merged: u64,
    pub truncated: u64,
    /// Off-CPU aggregates: with their copy's unwound stack, whose copy was not found, without
    /// a copy (frame-pointer stack used for the last two).
    pub offcpu_copied: u64,
    pub offcpu_copy_missing: u64,
    pub offcpu_without_copy: u64,
    /// JIT frames unwound from their method's prologue (start known from the perf map).
    pub jit_prologue_frames: u64,
    /// OSR frames unwound with their Tier0 frame.
    pub jit_osr_frames: u64,
    /// JIT frames whose caller came from the return-address scan (method start unknown).
    pub jit_scanned_frames: u64,
}

/// Unwind-table memory of one mapped file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TableMemory {
    pub file: String,
    pub bytes: usize,
}

/// What the unwinder did over a recording, for the summary.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct UnwindSummary {
    pub stats: UnwindStats,
    /// Unwind sections kept per mapped file, largest first.
    pub table_memory: Vec<TableMemory>,
    pub table_bytes: usize,
    /// The BPF side: copies made, reused, lost.
    pub bpf: crate::bpf::CopyStats,
}

impl UnwindSummary {
    /// Summary lines: how many stacks reached the thread's start, table memory.
    pub fn text(&self) -> String {
        let s = &self.stats;
        let pct = |n: u64| if s.stacks == 0 { 0.0 } else { n as f64 * 100.0 / s.stacks as f64 };
        let mut o = format!(
            "stacks: {} unwound from copies (DWARF CFI in ELF files, prologues in JIT code): {:.1}% reach the thread's start, \
             {:.1}% completed by frame pointers, {:.1}% truncated ({} truncated)\n",
            s.stacks,
            pct(s.complete),
            pct(s.merged),
            pct(s.truncated),
            s.truncated
        );
        let top: Vec<String> =
            self.table_memory.iter().take(4).map(|t| format!("{} {:.1} MiB", t.file.rsplit('/').next().unwrap_or(&t.file), t.bytes as f64 / 1048576.0)).collect();
        o.push_str(&format!(
            "unwind tables: {:.1} MiB for {} files ({})\n",
            self.table_bytes as f64 / 1048576.0,
            self.table_memory.len(),
            top.join(", ")
        ));
        if s.offcpu_copied + s.offcpu_copy_missing + s.offcpu_without_copy > 0 {
            o.push_str(&format!(
                "off-CPU stacks: {} from copies, {} copies missing, {} without a copy (frame pointers used)\n",
                s.offcpu_copied, s.offcpu_copy_missing, s.offcpu_without_copy
            ));
        }
        let b = &self.bpf;
        o.push_str(&format!(
            "stack copies: {} made, {} off-CPU switch-outs reused the thread's last copy (its last kernel stack when user stacks wait for the syscall's return), {} off-CPU copies sent, {} lost (ring full), {} switch-outs without a copy (thread table full)\n",
            b.copies, b.reused, b.sent_offcpu, b.ring_full, b.no_entry
        ));
        if b.sched_switch_ns.is_some() || b.cpu_sample_ns.is_some() {
            let ns = |v: Option<f64>| v.map(|v| format!("{v:.0} ns")).unwrap_or_else(|| "-".into());
            o.push_str(&format!(
                "BPF run time per call: sched_switch {}, syscall_exit {}, cpu_sample {}\n",
                ns(b.sched_switch_ns),
                ns(b.syscall_exit_ns),
                ns(b.cpu_sample_ns)
            ));
        }
        o
    }
}

/// An executable file mapping: start, end, file offset, inode, path.
type PendingModule = (u64, u64, u64, u64, String);
/// A module: start, end, its file's tables and load bias.
type AddedModule = (u64, u64, Option<(Arc<ElfUnwind>, u64)>);

struct Proc {
    maps: Maps,
    maps_read: Option<Instant>,
    unwinder: UnwinderX86_64<Bytes>,
    /// The executable file mappings added as modules: start, end, and the file's tables with
    /// their load bias (none: no tables, unwound as JIT code).
    modules: Vec<AddedModule>,
    /// Executable file mappings not added yet: a file's unwind tables are read when an
    /// address in it is first unwound (a process maps libraries no sampled stack passes
    /// through: libstdc++'s tables alone are 0.24 MB).
    pending: Vec<PendingModule>,
    mem: Option<File>,
    /// Address → the 8 code bytes before it if it is a return address (executable, after a
    /// call), None if not: [`Unwinder::call_reaches`] decodes the call from them (it read
    /// them again from /proc/PID/mem at every check).
    return_addresses: HashMap<u64, Option<[u8; 8]>>,
    /// The runtime's perf map (JIT method ranges), when it writes one.
    perf_map: Option<ProcessSymbolizer>,
    perf_map_read: Option<Instant>,
    /// Method start → its first bytes.
    prologues: HashMap<u64, Vec<u8>>,
    /// The executable (device, inode) when this was set up, and when it was last checked: a
    /// process that execs (a launched shell's child becoming `dotnet`) gets a new address
    /// space, and everything above (maps, modules, the `mem` handle) is of the old one.
    exe: Option<(u64, u64)>,
    exe_checked: Instant,
    /// Perf-map entries whose prologues [`Unwinder::tick`] has read.
    prefetched: usize,
    /// Leaf address → its first code byte ([`LEAF_BYTES`] at most): whether a sample stopped
    /// on a `ret` was read from /proc/PID/mem at every sample in JIT code (8 µs each, a fifth
    /// of the unwinding's CPU with three busy processes).
    leaf_bytes: HashMap<u64, u8>,
    /// Frame address → whether it is in a module (an ELF file with unwind tables), for
    /// addresses the maps know; cleared when the maps are read again.
    in_module: HashMap<u64, bool>,
    /// Frame address → its JIT method's start and whether it is OSR code, as the perf map
    /// says; cleared when the perf map grows.
    methods: HashMap<u64, (u64, bool)>,
}

/// Remembers `k → v` in a table of at most [`FRAME_MEMO`] entries.
fn memo<V>(t: &mut HashMap<u64, V>, k: u64, v: V) {
    memo_within(t, k, v, FRAME_MEMO);
}

/// Remembers `k → v` in a table of at most `cap` entries (emptied when full).
fn memo_within<V>(t: &mut HashMap<u64, V>, k: u64, v: V, cap: usize) {
    if t.len() >= cap && !t.contains_key(&k) {
        t.clear();
    }
    t.insert(k, v);
}

/// Could `addr` be a user-space code address (x86-64, up to 5-level paging)? A value that
/// cannot (0x28, all ones: what a frame's garbage gave as its return address) is not looked
/// for in a fresh /proc/PID/maps (0.7 ms a reading of a .NET process's).
fn user_address(addr: u64) -> bool {
    (4096..1 << 56).contains(&addr)
}

/// Could a mapping made since `maps` were read hold `addr`? New mappings go into the gaps
/// between the lowest mapping (the executable, or the first library) and the highest (the
/// stack): below or above every mapping there is nothing to find by reading the maps again.
/// A scanned stack's words that are not return addresses are mostly small numbers, below the
/// lowest mapping: each new one re-read /proc/PID/maps (at most every MAPS_REFRESH), a tenth
/// of the host source's CPU with three busy processes.
fn may_be_mapped_later(maps: &Maps, addr: u64) -> bool {
    match (maps.mappings.first(), maps.mappings.last()) {
        (Some(lo), Some(hi)) => lo.start <= addr && addr < hi.end,
        // Never read (or nothing there): a reading is what finds out.
        _ => true,
    }
}

/// The (device, inode) of a process's executable.
fn exe_identity(pid: u32) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/exe")).ok().map(|m| (m.dev(), m.ino()))
}

/// Per-process unwinders sharing the parsed unwind sections of each file.
pub struct Unwinder {
    files: HashMap<(String, u64), Option<Arc<ElfUnwind>>>,
    procs: rustc_hash::FxHashMap<u32, Proc>,
    cache: CacheX86_64,
    pub stats: UnwindStats,
}

impl Default for Unwinder {
    fn default() -> Self {
        Self::new()
    }
}

impl Unwinder {
    pub fn new() -> Self {
        Self { files: HashMap::new(), procs: Default::default(), cache: CacheX86_64::new(), stats: UnwindStats::default() }
    }

    /// Unwind-table memory per file read so far (eh_frame, eh_frame_hdr and text kept).
    pub fn table_memory(&self) -> Vec<TableMemory> {
        let mut v: Vec<TableMemory> = self
            .files
            .iter()
            .filter_map(|((path, _), f)| f.as_ref().map(|f| TableMemory { file: path.clone(), bytes: f.resident() }))
            .collect();
        v.sort_by_key(|t| std::cmp::Reverse(t.bytes));
        v
    }

    pub fn summary(&self) -> UnwindSummary {
        let table_memory = self.table_memory();
        UnwindSummary { stats: self.stats, table_bytes: table_memory.iter().map(|t| t.bytes).sum(), table_memory, bpf: Default::default() }
    }

    /// Reads, while the processes live, the prologue of every JIT method their perf maps list
    /// that is not read yet: samples are unwound up to 100 ms (a drain) after they were taken,
    /// and a process that exited meanwhile has no memory left to read. Called every 100 ms;
    /// each process's perf map is re-read at most every MAPS_REFRESH.
    pub fn tick(&mut self) {
        for (&pid, p) in self.procs.iter_mut() {
            let Some(pm) = p.perf_map.as_mut() else { continue };
            if p.perf_map_read.is_some_and(|t| t.elapsed() < MAPS_REFRESH) {
                continue;
            }
            p.perf_map_read = Some(Instant::now());
            let _ = pm.refresh_perf_map();
            let map = pm.perf_map();
            if map.len() == p.prefetched {
                continue;
            }
            p.prefetched = map.len();
            // New code may sit where freed code was: its leaf bytes and methods are read afresh.
            p.leaf_bytes.clear();
            p.methods.clear();
            let Some(mem) = p.mem.as_ref() else { continue };
            for sym in map.iter() {
                if p.prologues.contains_key(&sym.start) {
                    continue;
                }
                let mut b = vec![0u8; jit::PROLOGUE_BYTES.min(sym.size.max(1) as usize)];
                match mem.read_at(&mut b, sym.start) {
                    Ok(n) if n > 0 => {
                        b.truncate(n);
                        p.prologues.insert(sym.start, b);
                    }
                    Ok(_) => break, // exited
                    Err(_) => {}
                }
            }
            log::trace!("unwind pid {pid}: {} prologues known", p.prologues.len());
        }
    }

    /// Forgets a process (its files stay cached for others).
    pub fn remove_process(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// Drops the unwind tables of files no known process maps any more.
    pub fn drop_unused_files(&mut self) {
        let used: std::collections::HashSet<(&str, u64)> =
            self.procs.values().flat_map(|p| p.maps.mappings.iter().filter_map(|m| Some((m.path()?, m.inode)))).collect();
        let unused: Vec<(String, u64)> = self.files.keys().filter(|(path, inode)| !used.contains(&(path.as_str(), *inode))).cloned().collect();
        for k in unused {
            self.files.remove(&k);
        }
    }

    /// Unwinds a copied stack: `ip`, `sp`, `bp` are the user registers, `stack` the bytes from
    /// `sp` up, `fp_stack` the frame-pointer walk (leaf first) taken at the same moment.
    /// Returns leaf-first addresses (the ip, then return addresses).
    pub fn unwind(&mut self, pid: u32, ip: u64, sp: u64, bp: u64, stack: &[u8], fp_stack: &[u64]) -> (Vec<u64>, Outcome) {
        self.unwind_copy(pid, ip, sp, bp, stack, clrprobe_common::ustack::BYTES, fp_stack)
    }

    /// [`Unwinder::unwind`] of a copy of at most `capacity` bytes (a shorter copy ended at the
    /// end of the stack's mapping).
    #[allow(clippy::too_many_arguments)]
    pub fn unwind_copy(&mut self, pid: u32, ip: u64, sp: u64, bp: u64, stack: &[u8], capacity: usize, fp_stack: &[u64]) -> (Vec<u64>, Outcome) {
        self.stats.stacks += 1;
        self.check_exec(pid);
        let (frames, outcome) = self.unwind_inner(pid, ip, sp, bp, stack, capacity, fp_stack);
        match outcome {
            Outcome::Complete => self.stats.complete += 1,
            Outcome::MergedWithFramePointers => self.stats.merged += 1,
            Outcome::Truncated => self.stats.truncated += 1,
        }
        (frames, outcome)
    }

    #[allow(clippy::too_many_arguments)]
    fn unwind_inner(&mut self, pid: u32, ip: u64, sp: u64, bp: u64, stack: &[u8], capacity: usize, fp_stack: &[u64]) -> (Vec<u64>, Outcome) {
        let read_word = |addr: u64| -> Option<u64> {
            let off = addr.checked_sub(sp)? as usize;
            let b = stack.get(off..off.checked_add(8)?)?;
            Some(u64::from_le_bytes(b.try_into().ok()?))
        };
        let mut frames = vec![ip];
        let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
        let mut address = FrameAddress::from_instruction_pointer(ip);
        let mut ended = false;
        let mut last_prologue = None;
        while frames.len() < MAX_FRAMES {
            let a = address.address();
            let in_module = self.ensure_mapped(pid, a);
            let before = (regs.sp(), a);
            let next = if in_module {
                let Some(p) = self.procs.get(&pid) else { break };
                // Read the CFI entries this frame needs from sparse sections first; a file that
                // shrank since is not unwound from (frame pointers continue the stack).
                let usable = match p.modules.iter().find(|&&(s, e, _)| s <= a && a < e) {
                    Some((_, _, Some((file, bias)))) => file.prepare(address.address_for_lookup().wrapping_sub(*bias)),
                    _ => true,
                };
                let mut read = |addr: u64| read_word(addr).ok_or(());
                match usable.then(|| p.unwinder.unwind_frame(address, &mut regs, &mut self.cache, &mut read)) {
                    Some(Ok(Some(ra))) => Some(ra),
                    Some(Ok(None)) => {
                        ended = true;
                        None
                    }
                    Some(Err(_)) | None => None,
                }
            } else {
                let at_ret = !address.is_return_address() && self.leaf_byte(pid, a) == Some(0xC3);
                let prologue = if at_ret { None } else { self.prologue(pid, a) };
                last_prologue = prologue;
                let mut read = |addr: u64| read_word(addr);
                let step = match prologue {
                    Some(p) if p.osr => {
                        self.stats.jit_osr_frames += 1;
                        let mut tier0 = |a: u64| self.prologue(pid, a);
                        match jit::step_osr(regs.sp(), regs.bp(), p, &mut tier0, &mut read) {
                            Some((s, _tier0_address)) => Some(s),
                            None => jit::step_with_prologue(regs.sp(), regs.bp(), p, &mut read),
                        }
                    }
                    Some(p) => {
                        self.stats.jit_prologue_frames += 1;
                        jit::step_with_prologue(regs.sp(), regs.bp(), p, &mut read)
                    }
                    None => {
                        let mut is_ra = |v: u64| self.is_return_address(pid, v) && self.call_reaches(pid, v, a);
                        jit::step(regs.sp(), regs.bp(), at_ret, &mut read, &mut is_ra)
                    }
                };
                match step {
                    Some(s) => {
                        if s.scanned && !at_ret {
                            self.stats.jit_scanned_frames += 1;
                        }
                        regs.set_sp(s.sp);
                        regs.set_bp(s.bp);
                        if s.bp == 0 && !s.scanned && s.return_address == 0 {
                            ended = true;
                            None
                        } else {
                            Some(s.return_address)
                        }
                    }
                    None => {
                        ended = regs.bp() == 0;
                        None
                    }
                }
            };
            if log::log_enabled!(log::Level::Trace) {
                log::trace!(
                    "unwind pid {pid}: {a:#x} module={in_module} sp {:#x}->{:#x} bp {:#x} -> {next:x?} {:?}",
                    before.0,
                    regs.sp(),
                    regs.bp(),
                    last_prologue.take()
                );
            }
            let Some(ra) = next else { break };
            if ra == 0 {
                ended = true;
                break;
            }
            if (regs.sp(), ra) == before || regs.sp() < before.0 {
                break;
            }
            frames.push(ra);
            match FrameAddress::from_return_address(ra) {
                Some(f) => address = f,
                None => break,
            }
        }
        if ended {
            return (frames, Outcome::Complete);
        }
        // The copy ended at the end of the stack mapping and unwinding stopped near it: the
        // outermost frame (`_start` without an end-of-stack CFI rule; what lies above it is
        // the process's arguments and environment).
        let copy_end = sp + stack.len() as u64;
        if stack.len() < capacity && copy_end.saturating_sub(regs.sp()) <= NEAR_STACK_END {
            return (frames, Outcome::Complete);
        }
        // Continue with the frame-pointer walk from the last frame both know.
        let last = *frames.last().unwrap_or(&ip);
        if let Some(i) = fp_stack.iter().rposition(|&a| a == last)
            && i + 1 < fp_stack.len()
        {
            frames.extend_from_slice(&fp_stack[i + 1..]);
            return (frames, Outcome::MergedWithFramePointers);
        }
        if frames.len() < fp_stack.len() && frames.len() <= 2 {
            // The unwinder got nowhere where frame pointers did: keep theirs.
            return (fp_stack.to_vec(), Outcome::Truncated);
        }
        (frames, Outcome::Truncated)
    }

    /// Starts over with a process that exec'd since it was first seen (checked at most every
    /// EXEC_CHECK).
    fn check_exec(&mut self, pid: u32) {
        let Some(p) = self.procs.get_mut(&pid) else { return };
        if p.exe_checked.elapsed() < EXEC_CHECK {
            return;
        }
        p.exe_checked = Instant::now();
        let now = exe_identity(pid);
        if now.is_some() && now != p.exe {
            log::debug!("unwind: pid {pid} exec'd; its maps and memory are read afresh");
            self.procs.remove(&pid);
        }
    }

    fn proc(&mut self, pid: u32) -> &mut Proc {
        self.procs.entry(pid).or_insert_with(|| Proc {
            maps: Maps::default(),
            maps_read: None,
            unwinder: UnwinderX86_64::new(),
            modules: Vec::new(),
            pending: Vec::new(),
            mem: File::open(format!("/proc/{pid}/mem")).ok(),
            return_addresses: HashMap::new(),
            perf_map: None,
            perf_map_read: None,
            prologues: HashMap::new(),
            exe: exe_identity(pid),
            exe_checked: Instant::now(),
            prefetched: 0,
            leaf_bytes: HashMap::new(),
            in_module: HashMap::new(),
            methods: HashMap::new(),
        })
    }

    /// Is `addr` in a mapped ELF file with unwind tables? Re-reads /proc/PID/maps (at most
    /// every MAPS_REFRESH) when `addr` is outside every known mapping, so libraries mapped
    /// after the first reading (launch mode) are found. The file's tables are read now if
    /// this is the first address unwound in it.
    fn ensure_mapped(&mut self, pid: u32, addr: u64) -> bool {
        let p = self.proc(pid);
        if let Some(&m) = p.in_module.get(&addr) {
            return m;
        }
        let known = p.maps.find(addr).is_some();
        let stale = p.maps_read.is_none_or(|t| t.elapsed() >= MAPS_REFRESH);
        if !known && stale && user_address(addr) && may_be_mapped_later(&p.maps, addr) {
            self.refresh(pid);
        }
        let p = self.proc(pid);
        if let Some(i) = p.pending.iter().position(|&(s, e, ..)| s <= addr && addr < e) {
            let m = p.pending.swap_remove(i);
            self.add_module(pid, m);
        }
        let p = self.proc(pid);
        let m = p.modules.iter().any(|&(s, e, _)| s <= addr && addr < e);
        if p.maps.find(addr).is_some() {
            memo(&mut p.in_module, addr, m);
        }
        m
    }

    fn refresh(&mut self, pid: u32) {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            self.proc(pid).maps_read = Some(Instant::now());
            return;
        };
        let Ok(newer) = Maps::parse(&text) else { return };
        let p = self.proc(pid);
        p.maps.update(newer);
        p.in_module.clear();
        p.maps_read = Some(Instant::now());
        p.pending = p
            .maps
            .mappings
            .iter()
            .filter(|m| m.executable && !p.modules.iter().any(|&(s, ..)| s == m.start))
            .filter_map(|m| m.path().map(|path| (m.start, m.end, m.offset, m.inode, path.to_string())))
            .collect();
    }

    /// Adds an executable file mapping as a module, reading its file's unwind tables unless
    /// another mapping of the file read them already.
    fn add_module(&mut self, pid: u32, (start, end, offset, inode, path): PendingModule) {
        let file = self
            .files
            .entry((path.clone(), inode))
            .or_insert_with(|| match ElfUnwind::read_mapped(pid, start, end) {
                Ok(f) => Some(Arc::new(f)),
                Err(e) => {
                    log::debug!("unwind tables: {e}");
                    None
                }
            })
            .clone();
        let p = self.proc(pid);
        let Some((file, bias)) = file.and_then(|f| f.bias(start, offset).map(|b| (f, b))) else {
            p.modules.push((start, end, None));
            return;
        };
        p.unwinder.add_module(Module::new(path, start..end, bias, file.section_info()));
        p.modules.push((start, end, Some((file, bias))));
    }

    /// The prologue of the JIT method holding `addr` up to `addr`, when the runtime's perf map
    /// names the method (re-read at most every MAPS_REFRESH on a miss).
    fn prologue(&mut self, pid: u32, addr: u64) -> Option<jit::Prologue> {
        let p = self.proc(pid);
        if p.perf_map.is_none() {
            p.perf_map = ProcessSymbolizer::new(pid).ok();
            p.perf_map_read = Some(Instant::now());
        }
        let lookup = |p: &Proc| {
            p.perf_map.as_ref()?.perf_map().lookup_sorted(addr).map(|s| (s.start, s.tier.is_some_and(|t| t.contains("OSR"))))
        };
        let remembered = p.methods.get(&addr).copied();
        let (start, osr) = match remembered.or_else(|| lookup(p)) {
            Some(s) => s,
            None => {
                if p.perf_map_read.is_some_and(|t| t.elapsed() < MAPS_REFRESH) {
                    return None;
                }
                p.perf_map_read = Some(Instant::now());
                if p.perf_map.as_mut()?.refresh_perf_map().is_ok_and(|n| n > 0) {
                    p.methods.clear();
                }
                lookup(p)?
            }
        };
        if remembered.is_none() {
            memo(&mut p.methods, addr, (start, osr));
        }
        if !p.prologues.contains_key(&start) {
            let mem = p.mem.as_ref()?;
            let mut b = vec![0u8; jit::PROLOGUE_BYTES];
            let n = mem.read_at(&mut b, start);
            log::trace!("unwind pid {pid}: prologue of {start:#x} ({addr:#x}): {n:?} {:02x?}", &b[..16]);
            // Nothing read: the process has exited (its address space is gone). Not cached;
            // [`Unwinder::tick`] reads every method's prologue while the process lives.
            match n {
                Ok(n) if n > 0 => b.truncate(n),
                _ => return None,
            }
            p.prologues.insert(start, b);
        }
        let code = p.prologues.get(&start)?;
        Some(jit::Prologue { osr, ..jit::analyze_prologue(code, (addr - start) as usize) })
    }

    fn code_bytes<const N: usize>(&mut self, pid: u32, addr: u64) -> Option<[u8; N]> {
        let mem = self.proc(pid).mem.as_ref()?;
        let mut b = [0u8; N];
        mem.read_exact_at(&mut b, addr).ok()?;
        Some(b)
    }

    /// The code byte at a leaf address, read once while [`LEAF_BYTES`] hold it.
    fn leaf_byte(&mut self, pid: u32, addr: u64) -> Option<u8> {
        if let Some(&b) = self.proc(pid).leaf_bytes.get(&addr) {
            return Some(b);
        }
        let b = self.code_bytes::<1>(pid, addr)?[0];
        memo_within(&mut self.proc(pid).leaf_bytes, addr, b, LEAF_BYTES);
        Some(b)
    }

    /// Could the call ending at `ra` have entered the function holding `addr`? A direct call
    /// (`call rel32`, `call [rip+cell]`, through at most two `jmp` stubs) must land at or
    /// below `addr` and within 64 KiB of it; calls through registers cannot be checked. This
    /// keeps stale return addresses (from a frame's earlier calls) out of the scan.
    fn call_reaches(&mut self, pid: u32, ra: u64, addr: u64) -> bool {
        let cached = self.proc(pid).return_addresses.get(&ra).copied().flatten();
        let Some(b) = cached.or_else(|| self.code_bytes::<8>(pid, ra - 8)) else { return true };
        let rel = |x: &[u8]| i32::from_le_bytes([x[0], x[1], x[2], x[3]]) as i64;
        let mut target = if b[3] == 0xE8 {
            ra.wrapping_add_signed(rel(&b[4..8]))
        } else if b[2] == 0xFF && b[3] == 0x15 {
            let cell = ra.wrapping_add_signed(rel(&b[4..8]));
            match self.code_bytes::<8>(pid, cell) {
                Some(c) => u64::from_le_bytes(c),
                None => return true,
            }
        } else {
            return true;
        };
        for _ in 0..2 {
            let Some(c) = self.code_bytes::<6>(pid, target) else { break };
            if c[0] == 0xE9 {
                target = target.wrapping_add(5).wrapping_add_signed(rel(&c[1..5]));
            } else if c[0] == 0xFF && c[1] == 0x25 {
                let cell = target.wrapping_add(6).wrapping_add_signed(rel(&c[2..6]));
                match self.code_bytes::<8>(pid, cell) {
                    Some(v) => target = u64::from_le_bytes(v),
                    None => break,
                }
            } else {
                break;
            }
        }
        target <= addr && addr - target < 0x10000
    }

    fn is_return_address(&mut self, pid: u32, v: u64) -> bool {
        if v < 4096 {
            return false;
        }
        if let Some(&r) = self.proc(pid).return_addresses.get(&v) {
            return r.is_some();
        }
        let p = self.proc(pid);
        let executable = match p.maps.find(v) {
            Some(m) => m.executable,
            None => {
                // Not mapped as far as we know: maybe new JIT code; one re-read at most.
                if user_address(v) && may_be_mapped_later(&p.maps, v) && p.maps_read.is_none_or(|t| t.elapsed() >= MAPS_REFRESH) {
                    self.refresh(pid);
                }
                self.proc(pid).maps.find(v).is_some_and(|m| m.executable)
            }
        };
        let r = if executable { self.code_bytes::<8>(pid, v - 8).filter(jit::ends_with_call) } else { None };
        memo_within(&mut self.proc(pid).return_addresses, v, r, RETURN_ADDRESSES);
        r.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_addresses_between_the_lowest_and_highest_mapping_can_be_mapped_later() {
        let maps = Maps::parse(
            "55d0c0a00000-55d0c0a10000 r-xp 00000000 08:01 100 /usr/bin/dotnet\n\
             7f0000000000-7f0000100000 r-xp 00000000 08:01 200 /usr/lib/libcoreclr.so\n\
             7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n",
        )
        .expect("maps");
        // A count on a scanned stack, and a value past the stack: no reading can map them.
        assert!(!may_be_mapped_later(&maps, 100_000));
        assert!(!may_be_mapped_later(&maps, 0x55d0_c09f_ffff));
        assert!(!may_be_mapped_later(&maps, 0x7ffd_0002_1000));
        // In a gap (new JIT code, a library loaded since), or in a mapping.
        assert!(may_be_mapped_later(&maps, 0x7e00_0000_0000));
        assert!(may_be_mapped_later(&maps, 0x55d0_c0a0_0000));
        assert!(may_be_mapped_later(&maps, 0x7ffd_0002_0fff));
        // Maps not read yet: reading them is how to know.
        assert!(may_be_mapped_later(&Maps::default(), 100_000));
    }

    #[test]
    fn memo_tables_stay_within_their_cap() {
        let mut t = HashMap::new();
        // A long recording's stack scans: ever new values (heap pointers among them).
        for v in 0..(RETURN_ADDRESSES as u64 * 5 + 7) {
            memo_within(&mut t, 0x7f00_0000_0000 + v * 8, None::<[u8; 8]>, RETURN_ADDRESSES);
            assert!(t.len() <= RETURN_ADDRESSES);
        }
        // What was just remembered is there; a value already kept does not empty a full table.
        assert_eq!(t.get(&(0x7f00_0000_0000 + (RETURN_ADDRESSES as u64 * 5 + 6) * 8)), Some(&None));
        let full: HashMap<u64, u8> = (0..FRAME_MEMO as u64).map(|k| (k, 0)).collect();
        let mut again = full.clone();
        memo(&mut again, 5, 1);
        assert_eq!((again.len(), again[&5]), (FRAME_MEMO, 1));
        memo(&mut again, u64::MAX, 2);
        assert_eq!(again.len(), 1);
    }
}
