//! ReadyToRun parsing of the real System.Private.CoreLib.dll of .NET 8 and .NET Core 3.1.
use std::time::Instant;

use clrprobe_symbolizer::R2rImage;
use clrprobe_tests::Runtime;

fn corelib(rt: Runtime) -> (R2rImage, Vec<u8>) {
    let dir = rt.framework_dir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join("System.Private.CoreLib.dll");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e} (run `cargo xtask setup-dotnet`)", path.display()));
    let t = Instant::now();
    let img = R2rImage::parse(&bytes).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    eprintln!(
        "{:?}: R2R v{}.{} flags {:#x}: {} methods with code ({} instantiated, {} undecoded), {} runtime functions, parsed in {:?}",
        rt,
        img.major_version,
        img.minor_version,
        img.flags,
        img.methods.len(),
        img.methods.iter().filter(|m| m.instantiated()).count(),
        img.undecoded_instance_entries,
        img.runtime_function_count(),
        t.elapsed()
    );
    (img, bytes)
}

/// Finds `name` among non-instantiated methods, checks it has code, and that addresses inside
/// each of its code ranges resolve back to it.
fn round_trip(img: &R2rImage, name: &str) {
    let hits: Vec<_> = img.methods.iter().filter(|m| &*img.method_name(m) == name).collect();
    assert!(!hits.is_empty(), "{name} has no R2R code; similar: {:?}", similar(img, name));
    for m in hits {
        let ranges = img.code_ranges(m);
        assert!(!ranges.is_empty(), "{name} has an entry but no code range");
        assert!(ranges.iter().any(|&(b, _)| b == m.entry_rva), "entry {:#x} starts no range", m.entry_rva);
        for (b, e) in ranges {
            assert!(e > b, "empty range {b:#x}..{e:#x} for {name}");
            for rva in [b, b + (e - b) / 2, e - 1] {
                let hit = img.lookup_rva(rva).unwrap_or_else(|| panic!("{name}: rva {rva:#x} resolves to nothing"));
                assert_eq!(&*hit.name, name, "rva {rva:#x}");
                assert_eq!(hit.method.entry_rva, m.entry_rva);
                // And through the file-offset path a file mapping uses.
                let off = img.pe.rva_to_offset(rva).expect("code is on disk") as u64;
                assert_eq!(img.lookup_file_offset(off).map(|h| h.method.entry_rva), Some(m.entry_rva));
            }
        }
    }
}

fn similar(img: &R2rImage, name: &str) -> Vec<String> {
    let tail = name.rsplit("::").next().unwrap_or(name);
    img.methods.iter().map(|m| img.method_name(m)).filter(|n| n.ends_with(tail)).take(10).map(|n| n.to_string()).collect()
}

fn check(rt: Runtime, min_methods: usize) {
    let (img, _) = corelib(rt);
    assert!(img.methods.len() >= min_methods, "{:?}: only {} methods with R2R code", rt, img.methods.len());
    assert_eq!(img.undecoded_instance_entries, 0, "instance entry points left undecoded");
    assert_eq!(img.unclaimed_runtime_functions(), 0, "runtime functions owned by no method");
    for name in [
        "System.String::Concat",
        "System.String::IndexOf",
        "System.Collections.Generic.List`1::Add",
        "System.Collections.Generic.Dictionary`2::TryInsert",
        "System.Text.StringBuilder::Append",
        "System.Number+BigInteger::Multiply",
    ] {
        round_trip(&img, name);
    }
    let inst: Vec<_> = img.methods.iter().filter(|m| m.instantiated()).step_by(1500).map(|m| img.method_name(m)).collect();
    eprintln!("sample of instantiated: {inst:?}");
    // Every named method's entry resolves to itself.
    let mut checked = 0;
    for m in img.methods.iter().step_by(97) {
        let hit = img.lookup_rva(m.entry_rva).expect("entry resolves");
        assert_eq!(hit.method.entry_rva, m.entry_rva, "{}", img.method_name(m));
        assert_eq!(hit.offset, 0);
        checked += 1;
    }
    assert!(checked > 100);
    // Outside code: headers resolve to nothing.
    assert!(img.lookup_rva(0x10).is_none());
}

#[test]
fn net8_corelib() {
    check(Runtime::Net8, 20_000);
}

#[test]
fn core31_corelib() {
    check(Runtime::Core31, 15_000);
}

/// Corrupt inputs give errors, never panics: truncations and flipped bytes in the headers,
/// metadata and R2R sections.
#[test]
fn corrupt_corelib_fails_cleanly() {
    let (img, bytes) = corelib(Runtime::Net8);
    for len in [0, 1, 64, 0x200, 0x1000, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
        let _ = R2rImage::parse(&bytes[..len]).map(|_| ());
    }
    assert!(R2rImage::parse(&bytes[..0x1000]).is_err());
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    // Regions worth hitting: headers, CLR header + metadata root, R2R header and its sections.
    let hot = [0u64, 0x80, 0x180, img.pe.rva_to_offset(img.pe.clr_header.expect("clr").0).expect("on disk") as u64];
    let mut errors = 0;
    for round in 0..24 {
        let mut b = bytes.clone();
        let base = hot[round % hot.len()];
        for _ in 0..8 {
            let at = (base + next() % 0x400) as usize % b.len();
            b[at] ^= (next() as u8) | 1;
        }
        if R2rImage::parse(&b).is_err() {
            errors += 1;
        }
    }
    eprintln!("{errors}/24 corrupted images rejected with an error, the rest parsed");
}

/// Every managed image shipped with both runtimes either parses as ReadyToRun with code for
/// its methods, or is refused with a typed reason; none panics.
#[test]
fn every_framework_image_parses_or_is_refused() {
    for rt in Runtime::ALL {
        let dir = rt.framework_dir().unwrap_or_else(|e| panic!("{e}"));
        let (mut r2r, mut refused, mut methods) = (0, Vec::<&str>::new(), 0usize);
        let mut entries: Vec<_> = std::fs::read_dir(&dir).expect("framework dir").flatten().map(|e| e.path()).collect();
        entries.sort();
        for path in entries.iter().filter(|p| p.extension().is_some_and(|e| e == "dll")) {
            let bytes = std::fs::read(path).expect("read");
            match R2rImage::parse(&bytes) {
                Ok(img) => {
                    r2r += 1;
                    methods += img.methods.len();
                    assert_eq!(img.undecoded_instance_entries, 0, "{}", path.display());
                    assert_eq!(img.unclaimed_runtime_functions(), 0, "{}", path.display());
                }
                Err(clrprobe_symbolizer::FormatError::NotReadyToRun(why)) => refused.push(why),
                Err(e) => panic!("{}: {e}", path.display()),
            }
        }
        refused.sort();
        refused.dedup_by(|a, b| a == b);
        eprintln!("{rt:?}: {r2r} R2R images, {methods} methods with code; the rest refused because: {refused:?}");
        assert!(r2r > 50, "{rt:?}: only {r2r} R2R images");
        assert!(methods > 80_000, "{rt:?}: only {methods} methods with code");
    }
}

/// Counts the bytes a parse asks for.
struct Counting<'a> {
    data: &'a [u8],
    read: std::cell::Cell<u64>,
}

impl clrprobe_symbolizer::pe::ImageSource for Counting<'_> {
    fn len(&self) -> u64 {
        self.data.len() as u64
    }

    fn bytes_at(&self, offset: u64, len: u64, what: &'static str) -> Result<std::borrow::Cow<'_, [u8]>, clrprobe_symbolizer::FormatError> {
        self.read.set(self.read.get() + len);
        self.data.bytes_at(offset, len, what)
    }
}

/// Parsing CoreLib from the file reads the headers, the parts of the metadata that name methods
/// (not `#Blob`, `#US` or the other tables) and the R2R sections only (not the code): 17 % of
/// it. It gives the same methods, names (read from the file when asked for) and lookups as
/// parsing the bytes in memory.
#[test]
fn file_parse_reads_a_fifth_and_matches() {
    let (whole, bytes) = corelib(Runtime::Net8);
    let counting = Counting { data: &bytes, read: std::cell::Cell::new(0) };
    let partial = R2rImage::parse_source(&counting).expect("parse by ranges");
    let path = Runtime::Net8.framework_dir().expect("net8").join("System.Private.CoreLib.dll");
    let f = std::fs::File::open(&path).expect("open CoreLib");
    let from_file = R2rImage::parse_source(&clrprobe_symbolizer::pe::FileSource::new(&f, bytes.len() as u64)).expect("parse the file");
    let read = counting.read.get();
    // Names are built when asked for: before that the file's image holds only the rows that
    // name methods (the in-memory one also a copy of the `#Strings` heap).
    let held = from_file.name_bytes();
    eprintln!(
        "CoreLib {} bytes, {} read ({:.1} %); {} methods, names: {} bytes held before any is built ({} with the heap copied)",
        bytes.len(),
        read,
        100.0 * read as f64 / bytes.len() as f64,
        whole.methods.len(),
        held,
        whole.name_bytes()
    );
    assert!(read * 5 < bytes.len() as u64, "read {read} of {} bytes", bytes.len());
    assert!(held * 2 < whole.name_bytes(), "{held} bytes held for names from the file");
    for (img, step) in [(&partial, 13), (&from_file, 1)] {
        assert_eq!(img.methods, whole.methods);
        assert_eq!(img.runtime_function_count(), whole.runtime_function_count());
        for (a, b) in img.methods.iter().zip(&whole.methods).step_by(step) {
            assert_eq!(img.method_name(a), whole.method_name(b));
            assert!(!img.method_name(a).is_empty());
        }
        for m in whole.methods.iter().step_by(101) {
            assert_eq!(img.lookup_rva(m.entry_rva).map(|h| h.name), Some(whole.method_name(m)));
        }
    }
    // The file's table is read block by block when looked up (only every 64th begin is held):
    // the same hits as the whole table in memory, inside bodies and funclets, at their ends
    // and between them (funclets too: an RVA past a body's end is often in its funclet).
    let mut rvas: Vec<u32> = Vec::new();
    for m in whole.methods.iter().step_by(7) {
        if let Some((b, e)) = whole.lookup_rva(m.entry_rva).map(|h| h.range) {
            rvas.extend([b.wrapping_sub(1), b, b + (e - b) / 2, e.wrapping_sub(1), e]);
        }
    }
    assert!(rvas.len() > 20_000, "{} RVAs", rvas.len());
    for rva in rvas.into_iter().chain([0, 1, u32::MAX]) {
        let (a, b) = (from_file.lookup_rva(rva), whole.lookup_rva(rva));
        assert_eq!(a.as_ref().map(|h| (h.method, h.offset, h.range)), b.as_ref().map(|h| (h.method, h.offset, h.range)), "rva {rva:#x}");
    }
    assert_eq!(from_file.unclaimed_runtime_functions(), whole.unclaimed_runtime_functions());
    // A file shorter than its headers claim fails cleanly.
    let short = std::fs::File::open(&path).expect("open");
    assert!(R2rImage::parse_source(&clrprobe_symbolizer::pe::FileSource::new(&short, 0x1000)).is_err());
}

/// A file whose metadata headers are corrupt parses from the file (only the parts that name
/// methods read) as it does from the bytes in memory: the same error, or the same methods and
/// names. Corruptions of the root, the stream headers and the `#~` header, one at a time.
#[test]
fn file_parse_of_corrupt_metadata_matches_the_bytes() {
    let (_, bytes) = corelib(Runtime::Net8);
    let root = bytes.windows(4).position(|w| w == b"BSJB").expect("metadata root");
    let tables = root + bytes[root..].windows(4).position(|w| w == b"#~\0\0").expect("#~ stream header") - 8;
    let t_off = u32::from_le_bytes(bytes[tables..tables + 4].try_into().expect("4 bytes")) as usize;
    let dir = clrprobe_tests::scratch_dir("r2r-corrupt");
    let path = dir.join("CoreLib.dll");
    let spots = [root + 12, root + 30, tables, tables + 4, root + t_off + 6, root + t_off + 8, root + t_off + 24, root + t_off + 32];
    for (i, &at) in spots.iter().enumerate() {
        for value in [0xff, 0x00] {
            let mut bad = bytes.clone();
            bad[at] = value;
            bad[at + 1] = value;
            std::fs::write(&path, &bad).expect("write");
            let f = std::fs::File::open(&path).expect("open");
            let from_file = R2rImage::parse_source(&clrprobe_symbolizer::pe::FileSource::new(&f, bad.len() as u64));
            let from_bytes = R2rImage::parse(&bad);
            match (from_file, from_bytes) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a.methods, b.methods, "spot {i}");
                    for (x, y) in a.methods.iter().zip(&b.methods).step_by(97) {
                        assert_eq!(a.method_name(x), b.method_name(y), "spot {i}");
                    }
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "spot {i}"),
                (a, b) => panic!("spot {i} ({at:#x} = {value:#x}): from the file {:?}, from the bytes {:?}", a.map(|_| ()), b.map(|_| ())),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The largest single allocation made while `LARGEST` is being watched.
struct Largest;
static LARGEST: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
unsafe impl std::alloc::GlobalAlloc for Largest {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, n: usize) -> *mut u8 {
        LARGEST.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.realloc(p, l, n) }
    }
}
#[global_allocator]
static ALLOC: Largest = Largest;

/// A RuntimeFunctions section whose size says 4 GB in a 12 MB image is refused before anything
/// is sized by it (the r2r_image fuzz target found a 2.6 GB allocation from such an input).
#[test]
fn runtime_functions_past_the_end_refused_without_allocating() {
    let (img, mut bytes) = corelib(Runtime::Net8);
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let cor20 = img.pe.rva_to_offset(img.pe.clr_header.expect("clr header").0).expect("on disk") as usize;
    let r2r = img.pe.rva_to_offset(u32_at(&bytes, cor20 + 64)).expect("R2R header on disk") as usize;
    assert_eq!(&bytes[r2r..r2r + 4], b"RTR\0");
    let sections = u32_at(&bytes, r2r + 12) as usize;
    let entry = (0..sections).map(|i| r2r + 16 + 12 * i).find(|&e| u32_at(&bytes, e) == 102).expect("RuntimeFunctions section");
    bytes[entry + 8..entry + 12].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    drop(img);
    LARGEST.store(0, std::sync::atomic::Ordering::Relaxed);
    let err = R2rImage::parse(&bytes).map(|_| ()).expect_err("a table past the end is refused");
    let largest = LARGEST.load(std::sync::atomic::Ordering::Relaxed);
    assert!(err.to_string().contains("past the end"), "{err}");
    assert!(largest < 64 << 20, "largest allocation while parsing: {largest} bytes");
}
