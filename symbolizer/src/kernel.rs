//! Kernel frames from `/proc/kallsyms` (`ADDR TYPE NAME [MODULE]` lines).
use crate::Error;

#[derive(Debug, Clone, Copy)]
struct Sym {
    addr: u64,
    name_off: u32,
    name_len: u32,
}

/// A kernel symbol hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSymbol<'a> {
    /// `name` or `name [module]`.
    pub name: &'a str,
    pub offset: u64,
}

/// Sorted kernel text symbols.
#[derive(Debug, Clone, Default)]
pub struct KernelSymbolizer {
    syms: Vec<Sym>,
    names: String,
}

impl KernelSymbolizer {
    /// Parses kallsyms text. Only text symbols (`t`/`T`/`w`/`W`) are kept; zero addresses (as
    /// printed under `kptr_restrict`) are dropped. Malformed lines are skipped.
    pub fn parse(text: &str) -> Self {
        let mut k = KernelSymbolizer::default();
        for line in text.lines() {
            k.add_line(line);
        }
        k.finish()
    }

    /// Reads `/proc/kallsyms` line by line (its text is megabytes; the kept symbols are a
    /// fraction of it).
    pub fn load() -> Result<Self, Error> {
        use std::io::BufRead;
        let path = "/proc/kallsyms";
        let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let mut r = std::io::BufReader::with_capacity(64 * 1024, f);
        let mut k = KernelSymbolizer::default();
        let mut line = String::new();
        loop {
            line.clear();
            match r.read_line(&mut line) {
                Ok(0) => break,
                Ok(_) => k.add_line(&line),
                Err(e) => return Err(Error::io(path, e)),
            }
        }
        Ok(k.finish())
    }

    fn finish(mut self) -> Self {
        self.syms.sort_by_key(|s| s.addr);
        self.syms.shrink_to_fit();
        self.names.shrink_to_fit();
        self
    }

    /// Adds one kallsyms line when it is a text symbol.
    fn add_line(&mut self, line: &str) {
        let mut it = line.split_ascii_whitespace();
        let (Some(addr), Some(ty), Some(name)) = (it.next(), it.next(), it.next()) else { return };
        if !matches!(ty, "t" | "T" | "w" | "W") {
            return;
        }
        let Ok(addr) = u64::from_str_radix(addr, 16) else { return };
        if addr == 0 {
            return;
        }
        let start = self.names.len();
        self.names.push_str(name);
        if let Some(module) = it.next() {
            self.names.push(' ');
            self.names.push_str(module);
        }
        let (Ok(name_off), Ok(name_len)) = (u32::try_from(start), u32::try_from(self.names.len() - start)) else {
            self.names.truncate(start);
            return;
        };
        self.syms.push(Sym { addr, name_off, name_len });
    }

    /// Number of usable symbols (0 when addresses are hidden).
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// The nearest symbol at or below `addr` (kallsyms carries no sizes; hits farther than
    /// 1 MiB from a symbol are refused).
    pub fn lookup(&self, addr: u64) -> Option<KernelSymbol<'_>> {
        let i = self.syms.partition_point(|s| s.addr <= addr).checked_sub(1)?;
        let s = self.syms[i];
        let offset = addr - s.addr;
        if offset >= 1 << 20 {
            return None;
        }
        let name = self.names.get(s.name_off as usize..(s.name_off + s.name_len) as usize)?;
        Some(KernelSymbol { name, offset })
    }
}

/// True for addresses in the kernel half of the x86-64 / arm64 address space.
pub fn is_kernel_address(addr: u64) -> bool {
    addr >= 0xffff_0000_0000_0000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_text_symbols_and_modules() {
        let k = KernelSymbolizer::parse(
            "ffffffff81000000 T _stext\nffffffff81000100 t helper\nffffffff82000000 D some_data\n\
             ffffffffc0000000 t nf_hook\t[nf_tables]\nbad line\n0000000000000000 T hidden\n",
        );
        assert_eq!(k.len(), 3);
        assert_eq!(k.lookup(0xffffffff81000010), Some(KernelSymbol { name: "_stext", offset: 0x10 }));
        assert_eq!(k.lookup(0xffffffff81000100).map(|s| s.name), Some("helper"));
        assert_eq!(k.lookup(0xffffffffc0000004).map(|s| s.name), Some("nf_hook [nf_tables]"));
        assert_eq!(k.lookup(0xffffffff80000000), None);
        assert_eq!(k.lookup(0xffffffff81000100 + (2 << 20)), None, "too far from any symbol");
    }

    #[test]
    fn real_kallsyms_names_a_known_function() {
        let k = KernelSymbolizer::load().expect("/proc/kallsyms readable");
        if k.is_empty() {
            // kptr_restrict hides addresses from this user: nothing to check against.
            let restrict = std::fs::read_to_string("/proc/sys/kernel/kptr_restrict").unwrap_or_default();
            panic!("kallsyms shows no addresses (kptr_restrict = {}); run as root", restrict.trim());
        }
        let text = std::fs::read_to_string("/proc/kallsyms").expect("readable");
        let line = text.lines().find(|l| l.ends_with(" T schedule") || l.ends_with(" T do_syscall_64")).expect("a core symbol");
        let addr = u64::from_str_radix(line.split(' ').next().expect("addr"), 16).expect("hex");
        let s = k.lookup(addr + 1).expect("resolves");
        assert!(line.ends_with(s.name), "{line} vs {s:?}");
        assert_eq!(s.offset, 1);
    }
}
