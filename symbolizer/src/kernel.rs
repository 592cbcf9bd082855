//! Kernel frames from `/proc/kallsyms` (`ADDR TYPE NAME [MODULE]` lines).
//!
//! Read from `/proc/kallsyms`, only the text symbols' start addresses are kept (sorted, 4 bytes
//! each when they fit in one 4 GiB window, as on x86-64: ~0.5 MB for 122k symbols). Names are
//! read when asked for: [`KernelSymbolizer::prefetch`] names every symbol holding a set of
//! addresses in one more pass over the file, and keeps only those names. Holding every name
//! took 3 MB more (plus 16 B per symbol) for the few hundred a profile shows.
//! [`KernelSymbolizer::parse`] (saved inputs, tests) keeps the names of the text it is given.
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::Error;

const KALLSYMS: &str = "/proc/kallsyms";

/// Kernel addresses this far from their nearest symbol are not named (kallsyms has no sizes).
const MAX_OFFSET: u64 = 1 << 20;

/// A kernel symbol hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSymbol {
    /// `name` or `name [module]`.
    pub name: Arc<str>,
    pub offset: u64,
}

/// Sorted, distinct symbol start addresses.
#[derive(Debug, Clone)]
enum Addrs {
    /// Offsets from `base` (every address in `base..base + 4 GiB`).
    Narrow { base: u64, offs: Vec<u32> },
    Wide(Vec<u64>),
}

impl Default for Addrs {
    fn default() -> Self {
        Addrs::Wide(Vec::new())
    }
}

impl Addrs {
    /// Sorts, removes duplicates and narrows `v`.
    fn from_vec(mut v: Vec<u64>) -> Self {
        v.sort_unstable();
        v.dedup();
        match (v.first(), v.last()) {
            (Some(&lo), Some(&hi)) if hi - lo <= u64::from(u32::MAX) => {
                Addrs::Narrow { base: lo, offs: v.iter().map(|&a| (a - lo) as u32).collect() }
            }
            _ => {
                v.shrink_to_fit();
                Addrs::Wide(v)
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Addrs::Narrow { offs, .. } => offs.len(),
            Addrs::Wide(v) => v.len(),
        }
    }

    /// The greatest start at or below `addr`.
    fn floor(&self, addr: u64) -> Option<u64> {
        match self {
            Addrs::Narrow { base, offs } => {
                let rel = addr.checked_sub(*base)?;
                let rel = u32::try_from(rel).unwrap_or(u32::MAX);
                let i = offs.partition_point(|&o| o <= rel).checked_sub(1)?;
                Some(base + u64::from(offs[i]))
            }
            Addrs::Wide(v) => {
                let i = v.partition_point(|&a| a <= addr).checked_sub(1)?;
                Some(v[i])
            }
        }
    }
}

/// Symbol addresses as they are read: their low 4 bytes while every address shares its upper
/// 4 bytes (x86-64 kernel text and modules do), 8 bytes otherwise. Gathering 8-byte addresses
/// first held 1 MB for 122k symbols next to the 0.5 MB kept.
#[derive(Default)]
struct Gathered {
    high: Option<u32>,
    low: Vec<u32>,
    wide: Vec<u64>,
}

impl Gathered {
    fn push(&mut self, addr: u64) {
        let high = (addr >> 32) as u32;
        if !self.wide.is_empty() {
            self.wide.push(addr);
        } else if *self.high.get_or_insert(high) == high {
            self.low.push(addr as u32);
        } else {
            let h = u64::from(self.high.unwrap_or(0)) << 32;
            self.wide = std::mem::take(&mut self.low).into_iter().map(|l| h | u64::from(l)).collect();
            self.wide.push(addr);
        }
    }

    /// The same [`Addrs`] as [`Addrs::from_vec`] of every address pushed.
    fn finish(self) -> Addrs {
        if !self.wide.is_empty() {
            return Addrs::from_vec(self.wide);
        }
        let mut offs = self.low;
        offs.sort_unstable();
        offs.dedup();
        let Some(&lo) = offs.first() else { return Addrs::default() };
        for o in &mut offs {
            *o -= lo;
        }
        offs.shrink_to_fit();
        Addrs::Narrow { base: u64::from(self.high.unwrap_or(0)) << 32 | u64::from(lo), offs }
    }
}

/// Where names come from.
#[derive(Debug)]
enum Names {
    /// Every name of the parsed text, by start address.
    Held(HashMap<u64, Arc<str>>),
    /// Names read from /proc/kallsyms as they are asked for.
    Lazy(Mutex<LazyNames>),
}

#[derive(Debug, Default)]
struct LazyNames {
    /// By start address (`None`: the symbol was gone when its name was read).
    known: HashMap<u64, Option<Arc<str>>>,
    /// Starts of symbols seen in samples ([`KernelSymbolizer::note`]), named with the next
    /// pass; with [`Floors::Lazy`], the addresses themselves.
    pending: HashSet<u64>,
    /// With [`Floors::Lazy`]: the start of the symbol holding each address looked up (None:
    /// none within reach), found with the names in the same pass.
    starts: HashMap<u64, Option<u64>>,
}

/// Whether the symbols' starts are held ([`KernelSymbolizer::addrs`]) or found in the pass
/// that reads the names, for the addresses seen only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Floors {
    Held,
    /// `addrs` is empty; `count` text symbols were read when loaded.
    Lazy { count: usize },
}

/// Sorted kernel text symbols.
#[derive(Debug)]
pub struct KernelSymbolizer {
    addrs: Addrs,
    floors: Floors,
    names: Names,
    /// Past this, a pass over /proc/kallsyms stops where it is (see
    /// [`KernelSymbolizer::set_pass_deadline`]).
    pass_by: Mutex<Option<Instant>>,
}

impl Default for KernelSymbolizer {
    fn default() -> Self {
        KernelSymbolizer { addrs: Addrs::default(), floors: Floors::Held, names: Names::Held(HashMap::new()), pass_by: Mutex::default() }
    }
}

/// A text symbol of a kallsyms line: its address and `name` or `name [module]` parts.
fn text_symbol(line: &str) -> Option<(u64, &str, Option<&str>)> {
    let mut it = line.split_ascii_whitespace();
    let (addr, ty, name) = (it.next()?, it.next()?, it.next()?);
    if !matches!(ty, "t" | "T" | "w" | "W") {
        return None;
    }
    let addr = u64::from_str_radix(addr, 16).ok()?;
    if addr == 0 {
        return None;
    }
    Some((addr, name, it.next()))
}

fn full_name(name: &str, module: Option<&str>) -> Arc<str> {
    match module {
        Some(m) => format!("{name} {m}").into(),
        None => name.into(),
    }
}

/// Calls `f` with every line of /proc/kallsyms, read 64 KiB at a time.
fn each_line(f: impl FnMut(&str)) -> Result<(), Error> {
    each_line_until(None, f).map(|_| ())
}

/// [`each_line`], stopping once `by` has passed (checked every 1,024 lines); Ok(false): cut
/// short.
fn each_line_until(by: Option<Instant>, mut f: impl FnMut(&str)) -> Result<bool, Error> {
    use std::io::BufRead;
    let file = std::fs::File::open(KALLSYMS).map_err(|e| Error::io(KALLSYMS, e))?;
    let mut r = std::io::BufReader::with_capacity(64 * 1024, file);
    let mut line = String::new();
    let mut n = 0u32;
    loop {
        n = n.wrapping_add(1);
        if n.is_multiple_of(1024) && by.is_some_and(|by| Instant::now() >= by) {
            return Ok(false);
        }
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) => return Ok(true),
            Ok(_) => f(&line),
            Err(e) => return Err(Error::io(KALLSYMS, e)),
        }
    }
}

impl KernelSymbolizer {
    /// Parses kallsyms text, names included. Only text symbols (`t`/`T`/`w`/`W`) are kept;
    /// zero addresses (as printed under `kptr_restrict`) are dropped. Malformed lines are
    /// skipped. Of symbols sharing an address, the last one's name is used.
    pub fn parse(text: &str) -> Self {
        let mut addrs = Vec::new();
        let mut names = HashMap::new();
        for (addr, name, module) in text.lines().filter_map(text_symbol) {
            addrs.push(addr);
            names.insert(addr, full_name(name, module));
        }
        names.shrink_to_fit();
        KernelSymbolizer { addrs: Addrs::from_vec(addrs), floors: Floors::Held, names: Names::Held(names), pass_by: Mutex::default() }
    }

    /// Reads the text symbols' addresses from `/proc/kallsyms`; their names are read later,
    /// only for the symbols asked for.
    pub fn load() -> Result<Self, Error> {
        let mut addrs = Gathered::default();
        each_line(|line| {
            if let Some((addr, ..)) = text_symbol(line) {
                addrs.push(addr);
            }
        })?;
        Ok(KernelSymbolizer { addrs: addrs.finish(), floors: Floors::Held, names: Names::Lazy(Mutex::default()), pass_by: Mutex::default() })
    }

    /// Counts the text symbols of `/proc/kallsyms` and holds none: the symbol holding an
    /// address is found, with its name, in the pass that reads the names of the addresses
    /// seen (0.5 MB of starts not held for the few hundred kernel addresses a recording of
    /// .NET code shows).
    pub fn load_lazily() -> Result<Self, Error> {
        let mut count = 0;
        each_line(|line| count += usize::from(text_symbol(line).is_some()))?;
        Ok(KernelSymbolizer { addrs: Addrs::default(), floors: Floors::Lazy { count }, names: Names::Lazy(Mutex::default()), pass_by: Mutex::default() })
    }

    /// Number of usable symbols (0 when addresses are hidden).
    pub fn len(&self) -> usize {
        match self.floors {
            Floors::Held => self.addrs.len(),
            Floors::Lazy { count } => count,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Names held (every one for parsed text; those read so far otherwise).
    pub fn names_held(&self) -> usize {
        match &self.names {
            Names::Held(m) => m.len(),
            Names::Lazy(m) => lock(m).known.len(),
        }
    }

    /// The start of the symbol holding `addr`, if within reach.
    fn start_of(&self, addr: u64) -> Option<u64> {
        let start = self.addrs.floor(addr)?;
        (addr - start < MAX_OFFSET).then_some(start)
    }

    /// [`Self::start_of`] with lazy floors: Err when the address has not been through a pass.
    fn lazy_start(n: &LazyNames, addr: u64) -> Result<Option<u64>, ()> {
        n.starts.get(&addr).copied().ok_or(())
    }

    /// Passes over /proc/kallsyms (reading names) stop once `by` has passed: the names read
    /// by then are kept, the others stay noted for a later pass and their frames are unnamed
    /// meanwhile (a pass took a second on a loaded host, past the end of a recording stopped
    /// by Ctrl-C). None: passes run to the end.
    pub fn set_pass_deadline(&self, by: Option<Instant>) {
        *lock(&self.pass_by) = by;
    }

    /// Notes addresses whose names will be asked for (kernel frames of samples): they are
    /// read with the next name that is not known, in the same pass.
    pub fn note(&self, addrs: impl IntoIterator<Item = u64>) {
        let Names::Lazy(names) = &self.names else { return };
        let mut n = lock(names);
        if self.floors != Floors::Held {
            for a in addrs {
                if !n.starts.contains_key(&a) {
                    n.pending.insert(a);
                }
            }
            return;
        }
        for start in addrs.into_iter().filter_map(|a| self.start_of(a)) {
            if !n.known.contains_key(&start) {
                n.pending.insert(start);
            }
        }
    }

    /// Reads the names of every symbol holding one of `addrs`, and of those noted, that is not
    /// named yet, in one pass over /proc/kallsyms (no pass when all are known).
    pub fn prefetch(&self, addrs: impl IntoIterator<Item = u64>) -> Result<(), Error> {
        let Names::Lazy(names) = &self.names else { return Ok(()) };
        if self.floors != Floors::Held {
            return self.prefetch_floors(names, addrs);
        }
        let mut found: HashMap<u64, Option<Arc<str>>> = {
            let mut n = lock(names);
            let mut wanted = std::mem::take(&mut n.pending);
            wanted.extend(addrs.into_iter().filter_map(|a| self.start_of(a)).filter(|s| !n.known.contains_key(s)));
            wanted.into_iter().map(|s| (s, None)).collect()
        };
        if found.is_empty() {
            return Ok(());
        }
        let by = *lock(&self.pass_by);
        let read = if by.is_some_and(|by| Instant::now() >= by) {
            Ok(false)
        } else {
            each_line_until(by, |line| {
                if let Some((addr, name, module)) = text_symbol(line)
                    && let Some(slot) = found.get_mut(&addr)
                {
                    *slot = Some(full_name(name, module));
                }
            })
        };
        let mut n = lock(names);
        match read {
            Ok(true) => n.known.extend(found),
            // Cut short: the names read are kept, the rest asked for again next time.
            Ok(false) => {
                for (start, name) in found {
                    match name {
                        Some(name) => {
                            n.known.insert(start, Some(name));
                        }
                        None => {
                            n.pending.insert(start);
                        }
                    }
                }
            }
            // Asked for again next time.
            Err(_) => n.pending.extend(found.into_keys()),
        }
        read.map(|_| ())
    }

    /// [`Self::prefetch`] with lazy floors: one pass finds, for each address not seen yet
    /// (noted or asked for), the greatest text symbol at or below it within reach, and its
    /// name.
    fn prefetch_floors(&self, names: &Mutex<LazyNames>, addrs: impl IntoIterator<Item = u64>) -> Result<(), Error> {
        let mut wanted: Vec<u64> = {
            let mut n = lock(names);
            let mut w = std::mem::take(&mut n.pending);
            w.extend(addrs.into_iter().filter(|a| !n.starts.contains_key(a)));
            w.into_iter().collect()
        };
        if wanted.is_empty() {
            return Ok(());
        }
        wanted.sort_unstable();
        // The best start so far of each wanted address, and its name (a buffer reused as it
        // improves).
        let mut best: Vec<Option<(u64, String)>> = vec![None; wanted.len()];
        // A symbol is offered to the wanted addresses from its start up to the next line's
        // start where the file runs in order (so each gets about one offer), up to the reach
        // where it does not (modules); of symbols sharing a start, the last names it.
        let mut offer = |start: u64, name: &str, until: u64| {
            let from = wanted.partition_point(|&a| a < start);
            let until = until.min(start.saturating_add(MAX_OFFSET));
            for (i, _) in wanted.iter().enumerate().skip(from).take_while(|(_, a)| **a < until) {
                if best[i].as_ref().is_none_or(|(s, _)| *s <= start) {
                    let slot = best[i].get_or_insert_with(|| (start, String::new()));
                    slot.0 = start;
                    slot.1.clear();
                    slot.1.push_str(name);
                }
            }
        };
        let mut prev: Option<(u64, String)> = None;
        let by = *lock(&self.pass_by);
        let read = if by.is_some_and(|by| Instant::now() >= by) {
            Ok(false)
        } else {
            each_line_until(by, |line| {
                let Some((start, name, module)) = text_symbol(line) else { return };
                match prev.as_mut() {
                    Some((p, _)) if *p == start => {}
                    Some((p, pname)) => {
                        offer(*p, pname, if start > *p { start } else { u64::MAX });
                    }
                    None => {}
                }
                let (p, pname) = prev.get_or_insert_with(|| (start, String::new()));
                *p = start;
                pname.clear();
                pname.push_str(name);
                if let Some(m) = module {
                    pname.push(' ');
                    pname.push_str(m);
                }
            })
        };
        if let (Ok(true), Some((p, pname))) = (&read, &prev) {
            offer(*p, pname, u64::MAX);
        }
        let mut n = lock(names);
        match read {
            Ok(true) => {
                for (a, b) in wanted.into_iter().zip(best) {
                    match b {
                        Some((start, name)) => {
                            n.starts.insert(a, Some(start));
                            n.known.entry(start).or_insert_with(|| Some(name.into()));
                        }
                        None => {
                            n.starts.insert(a, None);
                        }
                    }
                }
            }
            // Cut short (a symbol further on may be nearer) or unreadable: asked for again.
            _ => n.pending.extend(wanted),
        }
        read.map(|_| ())
    }

    /// The nearest symbol at or below `addr` (kallsyms carries no sizes; hits 1 MiB or more
    /// from a symbol are refused). A name not read yet is read now, with those noted.
    pub fn lookup(&self, addr: u64) -> Option<KernelSymbol> {
        if self.floors != Floors::Held {
            let Names::Lazy(m) = &self.names else { return None };
            // The lock is let go before a pass (which takes it).
            let known = Self::lazy_start(&lock(m), addr);
            let start = match known {
                Ok(s) => s,
                Err(()) => {
                    if let Err(e) = self.prefetch([addr]) {
                        log::debug!("kernel symbols: {e}");
                    }
                    Self::lazy_start(&lock(m), addr).ok().flatten()
                }
            }?;
            let name = lock(m).known.get(&start).cloned().flatten()?;
            return Some(KernelSymbol { name, offset: addr - start });
        }
        let start = self.start_of(addr)?;
        let name = match &self.names {
            Names::Held(m) => m.get(&start).cloned()?,
            Names::Lazy(m) => {
                let cached = lock(m).known.get(&start).cloned();
                match cached {
                    Some(n) => n?,
                    None => {
                        if let Err(e) = self.prefetch([addr]) {
                            log::debug!("kernel symbol names: {e}");
                        }
                        lock(m).known.get(&start).cloned().flatten()?
                    }
                }
            }
        };
        Some(KernelSymbol { name, offset: addr - start })
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// True for addresses in the kernel half of the x86-64 / arm64 address space.
pub fn is_kernel_address(addr: u64) -> bool {
    addr >= 0xffff_0000_0000_0000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(name: &str, offset: u64) -> Option<KernelSymbol> {
        Some(KernelSymbol { name: name.into(), offset })
    }

    #[test]
    fn parses_text_symbols_and_modules() {
        let k = KernelSymbolizer::parse(
            "ffffffff81000000 T _stext\nffffffff81000100 t helper\nffffffff82000000 D some_data\n\
             ffffffffc0000000 t nf_hook\t[nf_tables]\nbad line\n0000000000000000 T hidden\n",
        );
        assert_eq!(k.len(), 3);
        assert_eq!(k.lookup(0xffffffff81000010), hit("_stext", 0x10));
        assert_eq!(k.lookup(0xffffffff81000100).map(|s| s.name), Some("helper".into()));
        assert_eq!(k.lookup(0xffffffffc0000004).map(|s| s.name), Some("nf_hook [nf_tables]".into()));
        assert_eq!(k.lookup(0xffffffff80000000), None);
        assert_eq!(k.lookup(0xffffffff81000100 + (2 << 20)), None, "too far from any symbol");
    }

    #[test]
    fn wide_address_ranges_and_aliases() {
        // More than 4 GiB between the lowest and highest symbol: addresses kept as u64.
        let k = KernelSymbolizer::parse("ffff800000000000 T low\nffffffff81000000 T a\nffffffff81000000 T b\n");
        assert!(matches!(k.addrs, Addrs::Wide(_)));
        assert_eq!(k.len(), 2, "aliases share one start");
        assert_eq!(k.lookup(0xffff800000000004), hit("low", 4));
        assert_eq!(k.lookup(0xffffffff81000001), hit("b", 1), "the last alias names the start");
        assert_eq!(k.lookup(0xffff7fffffffffff), None);
    }

    #[test]
    fn gathered_addresses_equal_the_sorted_narrowed_vector() {
        let eq = |a: &Addrs, b: &Addrs| match (a, b) {
            (Addrs::Narrow { base: x, offs: o }, Addrs::Narrow { base: y, offs: p }) => x == y && o == p,
            (Addrs::Wide(v), Addrs::Wide(w)) => v == w,
            _ => false,
        };
        let text = std::fs::read_to_string("/proc/kallsyms").expect("readable");
        let real: Vec<u64> = text.lines().filter_map(text_symbol).map(|(a, ..)| a).collect();
        assert!(real.len() > 1000, "{} text symbols", real.len());
        let cases: [&[u64]; 6] = [
            &real,
            &[],
            &[0xffff_ffff_8100_0000, 0xffff_ffff_8000_0000, 0xffff_ffff_8100_0000, 0xffff_ffff_c000_1000],
            &[0x1_0000_0010, 0x1_0000_0000],
            // upper bytes differ: wide, and also the narrow case of a range below 4 GiB
            &[0xffff_ffff_8100_0000, 0xffff_fffe_ffff_0000, 0xffff_ffff_8000_0000],
            &[0x5, 0x2_0000_0000, 0x3],
        ];
        for v in cases {
            let mut g = Gathered::default();
            for &a in v {
                g.push(a);
            }
            let (got, want) = (g.finish(), Addrs::from_vec(v.to_vec()));
            assert!(eq(&got, &want), "{v:x?}: {got:?} vs {want:?}");
        }
    }

    #[test]
    fn lazy_floors_hold_no_starts_and_name_as_the_held_ones() {
        let k = KernelSymbolizer::load_lazily().expect("/proc/kallsyms readable");
        let text = std::fs::read_to_string("/proc/kallsyms").expect("readable");
        let all = KernelSymbolizer::parse(&text);
        if all.is_empty() {
            panic!("kallsyms shows no addresses; run as root");
        }
        assert!(k.len() >= all.len(), "{} text symbols counted, {} starts", k.len(), all.len());
        assert_eq!(k.addrs.len(), 0);
        assert_eq!(k.names_held(), 0);
        // Starts, inside functions, between modules, far from any symbol, below the first.
        let starts: Vec<u64> = text.lines().filter_map(text_symbol).map(|(a, ..)| a).step_by(97).collect();
        let mut probes: Vec<u64> = starts.iter().flat_map(|&a| [a, a + 1, a + 0x33, a.wrapping_sub(1)]).collect();
        probes.extend([0xffff_0000_0000_0000, u64::MAX, starts[0] + (3 << 20)]);
        let (noted, asked) = probes.split_at(probes.len() / 2);
        k.note(noted.iter().copied());
        // One pass for the noted and the asked for.
        k.prefetch(asked.iter().copied()).expect("a pass");
        for &a in asked.iter().chain(noted) {
            assert_eq!(k.lookup(a), all.lookup(a), "{a:#x}");
        }
        // Past the pass deadline no pass runs: unnamed, named once passes may run again.
        let d = starts[1] + 5;
        let k = KernelSymbolizer::load_lazily().expect("readable");
        k.set_pass_deadline(Some(Instant::now() - std::time::Duration::from_millis(1)));
        assert_eq!(k.lookup(d), None, "no pass past the deadline");
        k.set_pass_deadline(None);
        assert_eq!(k.lookup(d), all.lookup(d));
    }

    #[test]
    fn real_kallsyms_names_known_functions_lazily() {
        let k = KernelSymbolizer::load().expect("/proc/kallsyms readable");
        if k.is_empty() {
            // kptr_restrict hides addresses from this user: nothing to check against.
            let restrict = std::fs::read_to_string("/proc/sys/kernel/kptr_restrict").unwrap_or_default();
            panic!("kallsyms shows no addresses (kptr_restrict = {}); run as root", restrict.trim());
        }
        assert_eq!(k.names_held(), 0, "no name read before one is asked for");
        let text = std::fs::read_to_string("/proc/kallsyms").expect("readable");
        let all = KernelSymbolizer::parse(&text);
        assert_eq!(k.len(), all.len());
        let mut probes = Vec::new();
        for want in [" T schedule", " T do_syscall_64", " T vfs_read"] {
            let line = text.lines().find(|l| l.ends_with(want)).expect("a core symbol");
            probes.push(u64::from_str_radix(line.split(' ').next().expect("addr"), 16).expect("hex") + 1);
        }
        k.prefetch(probes.iter().copied()).expect("second pass");
        assert_eq!(k.names_held(), 3, "only the names asked for are held");
        for &a in &probes {
            let s = k.lookup(a).expect("resolves");
            assert_eq!(Some(s.clone()), all.lookup(a));
            assert_eq!(s.offset, 1);
        }
        // A lookup of a symbol not prefetched reads its name by itself.
        let line = text.lines().find(|l| l.ends_with(" T vfs_write")).expect("vfs_write");
        let a = u64::from_str_radix(line.split(' ').next().expect("addr"), 16).expect("hex");
        assert_eq!(k.lookup(a + 2), all.lookup(a + 2));
        assert_eq!(k.names_held(), 4);
        // Noted addresses are named with the next unknown one, in the same pass.
        let line = text.lines().find(|l| l.ends_with(" T vfs_fsync")).expect("vfs_fsync");
        let b = u64::from_str_radix(line.split(' ').next().expect("addr"), 16).expect("hex");
        k.note([b + 4, a + 3]);
        let line = text.lines().find(|l| l.ends_with(" T vfs_open")).expect("vfs_open");
        let c = u64::from_str_radix(line.split(' ').next().expect("addr"), 16).expect("hex");
        assert_eq!(k.lookup(c), all.lookup(c));
        assert_eq!(k.names_held(), 6, "vfs_fsync was read with vfs_open");
        assert_eq!(k.lookup(b + 4), all.lookup(b + 4));
        // Past the pass deadline no pass runs: the frame is unnamed, its name read later.
        let line = text.lines().find(|l| l.ends_with(" T vfs_unlink")).expect("vfs_unlink");
        let d = u64::from_str_radix(line.split(' ').next().expect("addr"), 16).expect("hex");
        k.set_pass_deadline(Some(Instant::now() - std::time::Duration::from_millis(1)));
        assert_eq!(k.lookup(d), None, "no pass past the deadline");
        assert_eq!(k.names_held(), 6);
        k.set_pass_deadline(None);
        assert_eq!(k.lookup(d), all.lookup(d), "read once passes may run again");
    }
}
