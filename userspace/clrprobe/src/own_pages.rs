//! Giving back the pages of clrprobe's own code that only set-up used.
//!
//! Set-up (loading the BPF object, parsing BTF, kallsyms, CoreLib, the EventPipe handshake) runs
//! most of clrprobe's code once; the kernel maps 64 KiB around every page it faults in
//! (fault-around), so about 5 of the binary's 6.4 MB of code, its read-only data and 1.2 MB of
//! libc stay mapped in clrprobe's resident set although a 99 Hz recording then runs ~0.7 MB of
//! it. [`release_code`] unmaps the read-only, unmodified file pages of clrprobe's own mappings
//! (its binary and the libraries it loaded) with `MADV_DONTNEED`: they stay in the page cache,
//! and a page that is run again is mapped back by a minor fault (a few µs).
//!
//! Only mappings of files that are not writable and hold no private copy of any page
//! (`Anonymous: 0 kB` in smaps: no relocated RELRO page, no uprobe breakpoint) are released,
//! since `MADV_DONTNEED` would drop such a copy; and only those of clrprobe's binary and the
//! libraries the dynamic loader mapped at start, which stay mapped for the process's life:
//! a file clrprobe maps for a while (a target's library, to read its symbols) can be unmapped
//! by another thread between the read of smaps and the `madvise`, and its range reused for
//! that thread's heap, whose pages `MADV_DONTNEED` would zero. The BPF maps and rings, the
//! vdso and anonymous memory are left alone.
//!
//! `CLRPROBE_KEEP_CODE=1` turns it off (to measure what it saves).

/// What one call released.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// Mappings released.
    pub mappings: usize,
    /// Their resident size before, in KiB.
    pub kb: u64,
}

/// Whether `CLRPROBE_KEEP_CODE` asks to keep the pages mapped.
fn kept() -> bool {
    std::env::var_os("CLRPROBE_KEEP_CODE").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Releases the resident pages of clrprobe's read-only file mappings (see the module docs).
/// Call it where a phase that ran code once has ended. Never fails: a mapping that cannot be
/// read or released is skipped.
pub fn release_code(after: &str) -> Released {
    if kept() {
        return Released::default();
    }
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return Released::default();
    };
    let loaded = loaded_objects();
    let mut done = Released::default();
    for m in releasable(&smaps).into_iter().filter(|m| loaded.contains(&m.path)) {
        // SAFETY: the range is a whole mapping of this process, read-only, private and file
        // backed with no private page: MADV_DONTNEED only unmaps page-cache pages, which the
        // next access maps again with the same contents. Nothing in this process holds a
        // pointer that the call invalidates.
        let r = unsafe { libc::madvise(m.start as *mut libc::c_void, m.end - m.start, libc::MADV_DONTNEED) };
        if r == 0 {
            done.mappings += 1;
            done.kb += m.rss_kb;
        }
    }
    log::debug!("after {after}: {} KiB of code and read-only data in {} mappings released", done.kb, done.mappings);
    done
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    rss_kb: u64,
    path: String,
}

/// Canonical paths of clrprobe's binary and of the shared objects the dynamic loader mapped
/// (never unloaded: clrprobe does not dlclose).
fn loaded_objects() -> std::collections::HashSet<String> {
    unsafe extern "C" fn add(info: *mut libc::dl_phdr_info, _size: libc::size_t, data: *mut libc::c_void) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the call, and `data` is the
        // Vec given below, borrowed for the whole iteration.
        unsafe {
            let names = &mut *(data as *mut Vec<std::path::PathBuf>);
            let name = (*info).dlpi_name;
            if !name.is_null() {
                let name = std::ffi::CStr::from_ptr(name);
                if !name.is_empty() {
                    names.push(std::path::PathBuf::from(std::ffi::OsStr::from_encoded_bytes_unchecked(name.to_bytes())));
                }
            }
        }
        0
    }
    let mut names: Vec<std::path::PathBuf> = Vec::new();
    // SAFETY: `add` only reads the info it is given and pushes to `names`.
    unsafe { libc::dl_iterate_phdr(Some(add), &mut names as *mut Vec<std::path::PathBuf> as *mut libc::c_void) };
    names.push("/proc/self/exe".into());
    names.iter().filter_map(|p| std::fs::canonicalize(p).ok()).map(|p| p.to_string_lossy().into_owned()).collect()
}

/// The mappings of an smaps text that [`release_code`] releases: of a file by its path, not
/// writable, no anonymous (copied-on-write) page, something resident.
fn releasable(smaps: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    // (mapping, eligible by its header line, anonymous KiB, resident KiB)
    let mut cur: Option<(Mapping, bool, Option<u64>)> = None;
    let finish = |cur: Option<(Mapping, bool, Option<u64>)>, out: &mut Vec<Mapping>| {
        if let Some((m, true, Some(0))) = cur
            && m.rss_kb > 0
        {
            out.push(m);
        }
    };
    for line in smaps.lines() {
        if let Some((m, ok)) = header(line) {
            finish(cur.take(), &mut out);
            cur = Some((m, ok, None));
        } else if let Some((m, _, anon)) = cur.as_mut() {
            if let Some(v) = field_kb(line, "Rss:") {
                m.rss_kb = v;
            } else if let Some(v) = field_kb(line, "Anonymous:") {
                *anon = Some(v);
            }
        }
    }
    finish(cur, &mut out);
    out
}

/// A mapping's header line (`start-end perms offset dev inode [path]`): the mapping and
/// whether its kind allows release. `None` for the field lines under it.
fn header(line: &str) -> Option<(Mapping, bool)> {
    let mut f = line.split_ascii_whitespace();
    let (start, end) = f.next()?.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    let perms = f.next()?.as_bytes();
    let _offset = f.next()?;
    let dev = f.next()?;
    let inode: u64 = f.next()?.parse().ok()?;
    if perms.len() != 4 || !dev.contains(':') || end <= start {
        return None;
    }
    // A file by its path (not a BPF map, the vdso or memory with a name).
    // The path: the rest of the line (it may hold spaces).
    let path = f.collect::<Vec<_>>().join(" ");
    let file = inode != 0 && path.starts_with('/');
    let ok = perms[0] == b'r' && perms[1] == b'-' && file;
    Some((Mapping { start, end, rss_kb: 0, path }, ok))
}

fn field_kb(line: &str, name: &str) -> Option<u64> {
    line.strip_prefix(name)?.trim().strip_suffix("kB")?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0a0000000-55d0a01b4000 r--p 00000000 fd:00 1234 /usr/bin/clrprobe
Size:               1744 kB
Rss:                 900 kB
Anonymous:             0 kB
55d0a01b4000-55d0a07f6000 r-xp 001b4000 fd:00 1234 /usr/bin/clrprobe
Size:               6408 kB
Rss:                5000 kB
Anonymous:             0 kB
55d0a07f6000-55d0a0813000 r--p 007f6000 fd:00 1234 /usr/bin/clrprobe
Size:                116 kB
Rss:                 116 kB
Anonymous:           116 kB
55d0a0813000-55d0a0815000 rw-p 00813000 fd:00 1234 /usr/bin/clrprobe
Size:                  8 kB
Rss:                   8 kB
Anonymous:             8 kB
7f0000000000-7f0000040000 r--s 00000000 fd:00 99 /usr/lib/libcoreclr.so
Size:                256 kB
Rss:                 100 kB
Anonymous:             0 kB
7f0100000000-7f0100080000 r--s 00000000 00:0f 1057 anon_inode:bpf-map
Size:                512 kB
Rss:                 512 kB
Anonymous:             0 kB
7f0200000000-7f0200001000 r--s 00000000 fd:00 98 /usr/lib/with space.so
Size:                  4 kB
Rss:                   4 kB
Anonymous:             0 kB
7f1000000000-7f1000100000 rw-p 00000000 00:00 0
Size:               1024 kB
Rss:                 804 kB
Anonymous:           804 kB
7f2000000000-7f2000010000 r-xp 00000000 fd:00 77 /usr/lib/libc.so.6
Size:                 64 kB
Rss:                   0 kB
Anonymous:             0 kB
7f3000000000-7f3000020000 r-xp 00000000 fd:00 78 /usr/lib/libm.so.6
Size:                128 kB
Rss:                 128 kB
Anonymous:             4 kB
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]
Size:                  8 kB
Rss:                   8 kB
Anonymous:             0 kB
7f4000000000-7f4000010000 r-xp 00000000 fd:00 79 /usr/lib/libgcc_s.so.1
Size:                 64 kB
Rss:                  64 kB
";

    #[test]
    fn only_unmodified_read_only_file_mappings_with_resident_pages() {
        let got = releasable(SMAPS);
        // The binary's read-only data and code, the read-only shared file mappings; not its
        // RELRO (copied pages), data, a BPF map, anonymous memory, libc's empty mapping,
        // libm's text with a copied page (a breakpoint), the vdso, or a mapping whose
        // Anonymous line is missing.
        assert_eq!(
            got,
            [
                Mapping { start: 0x55d0a0000000, end: 0x55d0a01b4000, rss_kb: 900, path: "/usr/bin/clrprobe".into() },
                Mapping { start: 0x55d0a01b4000, end: 0x55d0a07f6000, rss_kb: 5000, path: "/usr/bin/clrprobe".into() },
                Mapping { start: 0x7f0000000000, end: 0x7f0000040000, rss_kb: 100, path: "/usr/lib/libcoreclr.so".into() },
                Mapping { start: 0x7f0200000000, end: 0x7f0200001000, rss_kb: 4, path: "/usr/lib/with space.so".into() },
            ]
        );
    }

    /// Releasing this process's code and read-only data: they drop out of the resident set,
    /// and the code still runs (its pages fault back in).
    #[test]
    fn release_code_shrinks_the_resident_set_and_code_still_runs() {
        // Touch the test binary's own code and data (the formatting machinery, smaps parsing).
        let before = releasable(&std::fs::read_to_string("/proc/self/smaps").unwrap());
        let resident: u64 = before.iter().map(|m| m.rss_kb).sum();
        assert!(resident > 0, "no resident read-only file pages: {before:?}");
        let r = release_code("the test");
        assert!(r.mappings > 0 && r.kb > 0, "{r:?}");
        let after = releasable(&std::fs::read_to_string("/proc/self/smaps").unwrap());
        let still: u64 = after.iter().map(|m| m.rss_kb).sum();
        assert!(still < resident, "resident {resident} KiB before, {still} KiB after");
        assert_eq!(format!("{:?}", vec![1, 2, 3]), "[1, 2, 3]");
    }

    /// A file mapped for a while (as a target's library, to read its symbols) is never
    /// released: another thread may unmap it and reuse its range before the `madvise`.
    #[test]
    fn only_the_binary_and_the_loaders_libraries_are_released() {
        let loaded = loaded_objects();
        let exe = std::fs::canonicalize("/proc/self/exe").unwrap().to_string_lossy().into_owned();
        assert!(loaded.contains(&exe), "{exe} not in {loaded:?}");
        assert!(loaded.iter().any(|p| p.contains("libc.so")), "{loaded:?}");
        // A file of our own mapped read-only, its pages touched: resident, eligible by its
        // kind, but not released.
        let path = clrprobe_tests::scratch_file("own-pages", "mapped");
        std::fs::write(&path, vec![7u8; 1 << 16]).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        // SAFETY: a fresh read-only private mapping of a file we own, unmapped below.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), 1 << 16, libc::PROT_READ, libc::MAP_PRIVATE, std::os::fd::AsRawFd::as_raw_fd(&f), 0) };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: reads within the mapping.
        let sum: u64 = (0..(1 << 16)).step_by(4096).map(|i| u64::from(unsafe { *(p as *const u8).add(i) })).sum();
        assert_eq!(sum, 7 * 16);
        let canon = std::fs::canonicalize(&path).unwrap().to_string_lossy().into_owned();
        let eligible = releasable(&std::fs::read_to_string("/proc/self/smaps").unwrap());
        assert!(eligible.iter().any(|m| m.path == canon), "{canon} not eligible by kind");
        release_code("the test");
        let after = releasable(&std::fs::read_to_string("/proc/self/smaps").unwrap());
        let rss = after.iter().find(|m| m.path == canon).map(|m| m.rss_kb);
        assert_eq!(rss, Some(64), "the temporary mapping was released");
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p, 1 << 16) };
        let _ = std::fs::remove_file(&path);
    }
}
