//! `/proc/PID/maps` parsing: address ranges, permissions, file offsets and what backs them.

use crate::Error;

/// What backs a mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// A file on disk (path as the process sees it, inside its mount namespace).
    File { path: String, deleted: bool },
    /// A memfd (e.g. CoreCLR's `memfd:doublemapper` W^X JIT heap); name without `memfd:`.
    Memfd { name: String },
    /// `[heap]`, `[stack]`, `[vdso]`, `[anon:...]` and the like.
    Special(String),
    /// Anonymous memory.
    Anon,
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub readable: bool,
    pub writable: bool,
    pub executable: bool,
    pub shared: bool,
    /// File offset mapped at `start`.
    pub offset: u64,
    pub inode: u64,
    pub backing: Backing,
}

impl Mapping {
    /// File path if file-backed (and not a memfd).
    pub fn path(&self) -> Option<&str> {
        match &self.backing {
            Backing::File { path, .. } => Some(path),
            _ => None,
        }
    }

    /// File offset of `addr`, for an address inside this mapping.
    /// Saturates instead of overflowing on nonsense offsets (found by fuzzing).
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr.saturating_sub(self.start).saturating_add(self.offset)
    }

    /// Short module name: file name of the path, or the special/memfd name.
    pub fn module_name(&self) -> Option<String> {
        match &self.backing {
            Backing::File { path, .. } => Some(path.rsplit('/').next().unwrap_or(path).to_string()),
            Backing::Memfd { name } => Some(format!("memfd:{name}")),
            Backing::Special(s) => Some(s.clone()),
            Backing::Anon => None,
        }
    }
}

/// All mappings of a process, sorted by start (as the kernel lists them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Maps {
    pub mappings: Vec<Mapping>,
}

impl Maps {
    /// Parses the text of `/proc/PID/maps`.
    pub fn parse(text: &str) -> Result<Maps, Error> {
        let mut mappings = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            mappings.push(parse_line(line).map_err(|cause| Error::Maps { line: i + 1, cause, text: line.to_string() })?);
        }
        mappings.sort_by_key(|m| m.start);
        Ok(Maps { mappings })
    }

    /// Takes a newer reading of the same process. Mappings the newer reading no longer shows
    /// are kept unless a newer mapping overlaps them: samples taken earlier still point into
    /// them, and a process that is exiting shows its maps partly or wholly torn down.
    pub fn update(&mut self, newer: Maps) {
        let mut merged = newer.mappings;
        let fresh = merged.clone();
        let overlaps = |m: &Mapping| {
            let i = fresh.partition_point(|n| n.end <= m.start);
            fresh.get(i).is_some_and(|n| n.start < m.end)
        };
        merged.extend(self.mappings.drain(..).filter(|m| !overlaps(m)));
        merged.sort_by_key(|m| m.start);
        self.mappings = merged;
    }

    /// The mapping holding `addr`.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let i = self.mappings.partition_point(|m| m.start <= addr).checked_sub(1)?;
        let m = &self.mappings[i];
        (addr < m.end).then_some(m)
    }
}

fn parse_line(line: &str) -> Result<Mapping, &'static str> {
    // start-end perms offset dev inode [path, may hold spaces]
    let mut rest = line;
    let mut field = |what: &'static str| -> Result<&str, &'static str> {
        let t = rest.trim_start();
        let end = t.find([' ', '\t']).unwrap_or(t.len());
        let (f, r) = t.split_at(end);
        rest = r;
        if f.is_empty() { Err(what) } else { Ok(f) }
    };
    let range = field("missing address range")?;
    let perms = field("missing permissions")?;
    let offset = field("missing offset")?;
    let _dev = field("missing device")?;
    let inode = field("missing inode")?;
    let path = rest.trim();

    let (s, e) = range.split_once('-').ok_or("address range has no '-'")?;
    let start = u64::from_str_radix(s, 16).map_err(|_| "bad start address")?;
    let end = u64::from_str_radix(e, 16).map_err(|_| "bad end address")?;
    if end < start {
        return Err("end address below start");
    }
    let p = perms.as_bytes();
    if p.len() < 4 {
        return Err("permissions shorter than 4 characters");
    }
    let offset = u64::from_str_radix(offset, 16).map_err(|_| "bad offset")?;
    let inode = inode.parse::<u64>().map_err(|_| "bad inode")?;
    let backing = if path.is_empty() {
        Backing::Anon
    } else if let Some(memfd) = path.strip_prefix("/memfd:") {
        Backing::Memfd { name: memfd.strip_suffix(" (deleted)").unwrap_or(memfd).to_string() }
    } else if path.starts_with('/') {
        match path.strip_suffix(" (deleted)") {
            Some(p) => Backing::File { path: p.to_string(), deleted: true },
            None => Backing::File { path: path.to_string(), deleted: false },
        }
    } else {
        Backing::Special(path.to_string())
    };
    Ok(Mapping {
        start,
        end,
        readable: p[0] == b'r',
        writable: p[1] == b'w',
        executable: p[2] == b'x',
        shared: p[3] == b's',
        offset,
        inode,
        backing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
7f1dc9a00000-7f1dca62d000 r--s 00000000 fe:00 10117239                   /root/.cache/clrprobe/dotnet/net8/shared/Microsoft.NETCore.App/8.0.4/System.Private.CoreLib.dll
7f1dd1240000-7f1dd1241000 r-xs 00000000 00:01 25                         /memfd:doublemapper (deleted)
7f1dd1280000-7f1dd1bbf000 r-xp 00000000 fe:00 10117239                   /root/.cache/clrprobe/dotnet/net8/shared/Microsoft.NETCore.App/8.0.4/System.Private.CoreLib.dll
7f1dd1bde000-7f1dd1ec3000 rw-p 0093e000 fe:00 10117239                   /tmp/dir with space/x.so (deleted)
7f1dd2000000-7f1dd2001000 rw-p 00000000 00:00 0 
7ffd5f1e3000-7ffd5f204000 rw-p 00000000 00:00 0                          [stack]
";

    #[test]
    fn parses_real_lines() {
        let maps = Maps::parse(SAMPLE).expect("parses");
        assert_eq!(maps.mappings.len(), 6);
        let jit = maps.find(0x7f1dd1240010).expect("memfd mapping");
        assert_eq!(jit.backing, Backing::Memfd { name: "doublemapper".into() });
        assert!(jit.executable && jit.shared);
        let text = maps.find(0x7f1dd1280200).expect("CoreLib text");
        assert_eq!(text.module_name().as_deref(), Some("System.Private.CoreLib.dll"));
        assert_eq!(text.file_offset(0x7f1dd1280200), 0x200);
        let data = maps.find(0x7f1dd1bde010).expect("deleted file");
        assert_eq!(data.backing, Backing::File { path: "/tmp/dir with space/x.so".into(), deleted: true });
        assert_eq!(data.file_offset(0x7f1dd1bde010), 0x93e010);
        assert_eq!(maps.find(0x7f1dd2000000).map(|m| &m.backing), Some(&Backing::Anon));
        assert_eq!(maps.find(0x7f1dd2001000), None);
        assert_eq!(maps.find(0x1000), None);
    }

    #[test]
    fn malformed_lines_name_the_cause() {
        let err = Maps::parse("7f00-zz r-xp 0 00:00 0\n").expect_err("bad end");
        assert!(err.to_string().contains("bad end address"), "{err}");
        let err = Maps::parse("ok\n").expect_err("short");
        assert!(err.to_string().contains("line 1"), "{err}");
    }

    #[test]
    fn update_keeps_vanished_mappings_unless_replaced() {
        let old = "7f0000000000-7f0000001000 r-xp 00000000 08:01 11 /usr/lib/libc.so.6\n\
                   7f0000002000-7f0000003000 r-xp 00000000 08:01 12 /usr/lib/libx.so\n";
        let mut maps = Maps::parse(old).unwrap();
        // The process is exiting: libc is gone from the reading, libx was replaced by anon memory.
        maps.update(Maps::parse("7f0000002800-7f0000004000 rw-p 00000000 00:00 0\n").unwrap());
        assert_eq!(maps.find(0x7f0000000010).and_then(|m| m.path()), Some("/usr/lib/libc.so.6"));
        assert_eq!(maps.find(0x7f0000002900).and_then(|m| m.path()), None);
        assert!(maps.find(0x7f0000002100).is_none(), "an overlapped old mapping is dropped");
        // An empty reading (a zombie) keeps everything.
        maps.update(Maps::parse("").unwrap());
        assert!(maps.find(0x7f0000000010).is_some());
    }

    #[test]
    fn nonsense_offsets_do_not_overflow() {
        // Found by the proc_maps fuzz target (fuzz/regressions/proc_maps/file-offset-overflow).
        let maps = Maps::parse("48dac0074-850582000 r--p 00fffffffff0000000 08:01 101 /rf\n").unwrap();
        let m = &maps.mappings[0];
        assert_eq!(m.file_offset(m.end - 1), u64::MAX);
    }
}