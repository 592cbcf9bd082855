//! Live: a real .NET process (the Cpu workload) with perf maps on; JIT, ReadyToRun, libcoreclr,
//! libc and kernel addresses symbolized through /proc.
#![cfg(target_os = "linux")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use clrprobe_symbolizer::{FrameKind, ImageCache, Module, ProcessSymbolizer};
use clrprobe_tests::{Runtime, Workload};
use object::{Object, ObjectSegment, ObjectSymbol};

/// Address at which file offset `off` of `path` is mapped in the process.
fn addr_of_file_offset(s: &ProcessSymbolizer, file_name: &str, off: u64) -> u64 {
    s.maps()
        .mappings
        .iter()
        .filter(|m| m.executable && m.path().is_some_and(|p| p.ends_with(file_name)))
        .find(|m| off >= m.offset && off < m.offset + (m.end - m.start))
        .map(|m| m.start + (off - m.offset))
        .unwrap_or_else(|| panic!("file offset {off:#x} of {file_name} is in no executable mapping: {:#?}", s.maps().mappings.iter().filter(|m| m.path().is_some_and(|p| p.ends_with(file_name))).collect::<Vec<_>>()))
}

/// Base address of an image as the runtime itself reports it in /tmp/perfinfo-PID.map.
fn perfinfo_base(pid: u32, file_name: &str) -> Option<u64> {
    let text = std::fs::read(format!("/proc/{pid}/root/tmp/perfinfo-{pid}.map")).ok()?;
    let text = String::from_utf8_lossy(&text);
    text.split(['\n', '\0']).find_map(|rec| {
        let f: Vec<&str> = rec.split(';').collect();
        (f.first() == Some(&"ImageLoad") && f.get(1)?.ends_with(file_name)).then(|| u64::from_str_radix(f.get(3)?.trim_start_matches("0x"), 16).ok())?
    })
}

fn elf_symbol_file_offset(path: &std::path::Path, name: &str) -> u64 {
    let data = std::fs::read(path).expect("read ELF");
    let elf = object::File::parse(&*data).expect("parse ELF");
    let sym = elf.dynamic_symbols().find(|s| s.name() == Ok(name)).unwrap_or_else(|| panic!("{name} not exported by {}", path.display()));
    let va = sym.address();
    elf.segments()
        .find_map(|seg| {
            let (off, size) = seg.file_range();
            (va >= seg.address() && va < seg.address() + size).then(|| va - seg.address() + off)
        })
        .expect("symbol in a loaded segment")
}

/// Symbolizes an address inside `n` CoreLib methods (spread over the image) in the live process
/// and counts those that come back with the method's name. Returns (named, n).
///
/// With `base` (the runtime's own load address of CoreLib, from perfinfo) addresses are
/// `base + RVA`; without, they come from the file offset and /proc/PID/maps.
fn corelib_methods_round_trip(s: &mut ProcessSymbolizer, n: usize, base: Option<u64>) -> (usize, usize) {
    let path = s
        .maps()
        .mappings
        .iter()
        .find_map(|m| m.path().filter(|p| p.ends_with("/System.Private.CoreLib.dll")).map(str::to_string))
        .expect("CoreLib mapped");
    let module = s.cache().module(std::path::Path::new(&path)).expect("CoreLib classified");
    let Module::ReadyToRun(img) = &*module else { panic!("CoreLib is not R2R: {module:?}") };
    let step = img.methods.len() / n;
    let picked: Vec<_> = img.methods.iter().step_by(step).take(n).collect();
    // One byte into each body (0 for 1-byte bodies); methods sharing folded code are named by
    // the range's owner, so the expectation is the image's own answer for that RVA.
    let expect: Vec<(u32, String)> = picked
        .iter()
        .map(|m| {
            let hit = img.lookup_rva(m.entry_rva).expect("entry has code");
            let delta = u32::from(hit.range.1 - hit.range.0 > 1);
            (m.entry_rva + delta, hit.name.to_string())
        })
        .collect();
    let addrs: Vec<u64> = expect
        .iter()
        .map(|(rva, _)| match base {
            Some(base) => base + *rva as u64,
            None => addr_of_file_offset(s, "System.Private.CoreLib.dll", img.pe.rva_to_offset(*rva).expect("on disk") as u64),
        })
        .collect();
    let frames = s.symbolize(&addrs);
    let named = frames.iter().zip(&expect).filter(|(f, (_, name))| f.kind == FrameKind::ReadyToRun && &f.name == name).count();
    if named != picked.len() {
        let bad: Vec<_> = frames.iter().zip(&expect).filter(|(f, (_, name))| &f.name != name).take(5).collect();
        eprintln!("mismatches: {bad:?}");
    }
    (named, picked.len())
}

#[test]
fn net8_cpu_workload() {
    let mut w = Workload::new("Cpu", Runtime::Net8).arg(20).env("DOTNET_PerfMapEnabled", "1").start().unwrap_or_else(|e| panic!("{e}"));
    assert!(w.wait_for_line("tick 5", Duration::from_secs(20)).is_some(), "no ticks: {:?}", w.output());
    let cache = Arc::new(ImageCache::new());
    let t = Instant::now();
    let mut s = ProcessSymbolizer::with_cache(w.pid, Arc::clone(&cache)).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("opened pid {} ({} mappings, {} perf-map records) in {:?}", w.pid, s.maps().mappings.len(), s.perf_map().len(), t.elapsed());
    assert!(s.perf_map().len() > 100, "perf map has {} records", s.perf_map().len());

    // JIT: Cpu::HotA from the perf map, every tier recorded.
    let hot: Vec<(u64, u64, Option<String>)> =
        s.perf_map().iter().filter(|r| r.name.contains("Cpu::HotA")).map(|r| (r.start, r.size, r.tier.map(str::to_string))).collect();
    assert!(!hot.is_empty(), "HotA not in the perf map");
    eprintln!("HotA records: {hot:x?}");
    let addrs: Vec<u64> = hot.iter().map(|&(start, size, _)| start + size / 2).collect();
    for (f, (_, size, tier)) in s.symbolize(&addrs).iter().zip(&hot) {
        assert_eq!((f.name.as_str(), f.kind), ("Cpu::HotA", FrameKind::Jit), "{f:?}");
        assert!(matches!(f.module.as_deref(), Some("Cpu" | "Cpu.dll")), "{f:?}");
        assert_eq!(&f.tier, tier);
        assert_eq!(f.offset, size / 2);
    }

    // ReadyToRun: String::Concat inside the mapped System.Private.CoreLib.dll.
    let corelib_path = s
        .maps()
        .mappings
        .iter()
        .find_map(|m| m.path().filter(|p| p.ends_with("/System.Private.CoreLib.dll")).map(str::to_string))
        .expect("CoreLib mapped");
    let module = cache.module(std::path::Path::new(&corelib_path)).expect("CoreLib classified");
    let Module::ReadyToRun(img) = &*module else { panic!("CoreLib is not R2R: {module:?}") };
    let concat = img.methods.iter().find(|m| &*img.method_name(m) == "System.String::Concat").expect("Concat has code");
    let off = img.pe.rva_to_offset(concat.entry_rva).expect("on disk") as u64;
    let addr = addr_of_file_offset(&s, "System.Private.CoreLib.dll", off + 3);
    // Oracle: the runtime's own record of where it loaded CoreLib.
    let base = perfinfo_base(w.pid, "System.Private.CoreLib.dll").expect("perfinfo has CoreLib");
    assert_eq!(addr, base + concat.entry_rva as u64 + 3, "file-offset route disagrees with the runtime's image base");
    let parses = cache.parses();
    let f = &s.symbolize(&[addr])[0];
    assert_eq!(
        (f.name.as_str(), f.module.as_deref(), f.kind, f.offset),
        ("System.String::Concat", Some("System.Private.CoreLib.dll"), FrameKind::ReadyToRun, 3),
        "{f:?}"
    );
    assert_eq!(cache.parses(), parses, "CoreLib was parsed again");

    // libcoreclr.so: an exported function by name; an address in its text keeps module+offset.
    let coreclr = Runtime::Net8.libcoreclr().expect("libcoreclr");
    let off = elf_symbol_file_offset(&coreclr, "coreclr_initialize");
    let addr = addr_of_file_offset(&s, "libcoreclr.so", off + 1);
    let text = s.maps().mappings.iter().find(|m| m.executable && m.path().is_some_and(|p| p.ends_with("/libcoreclr.so"))).expect("mapped").clone();
    let frames = s.symbolize(&[addr, text.start + 0x10]);
    assert_eq!((frames[0].name.as_str(), frames[0].kind, frames[0].offset), ("coreclr_initialize", FrameKind::Native, 1), "{:?}", frames[0]);
    assert_eq!(frames[0].module.as_deref(), Some("libcoreclr.so"));
    assert_eq!(frames[1].module.as_deref(), Some("libcoreclr.so"), "{:?}", frames[1]);
    eprintln!("libcoreclr text start + 0x10: {:?}", frames[1]);
    if frames[1].kind == FrameKind::Unknown {
        assert_eq!(frames[1].name, format!("libcoreclr.so+{:#x}", text.offset + 0x10));
    }

    // Unknown anonymous memory keeps module+offset form (or the bare address).
    let anon = s.maps().mappings.iter().find(|m| matches!(m.backing, clrprobe_symbolizer::Backing::Anon)).expect("anon mapping").clone();
    let f = &s.symbolize(&[anon.start])[0];
    assert!(f.kind == FrameKind::Unknown || f.kind == FrameKind::Jit, "{f:?}");

    // Incremental re-read while the process runs, then the table survives its exit.
    let before = s.perf_map().consumed();
    std::thread::sleep(Duration::from_millis(300));
    let added = s.refresh_perf_map().expect("refresh");
    eprintln!("refresh after 300 ms: +{added} records, {} -> {} bytes", before, s.perf_map().consumed());
    assert!(s.perf_map().consumed() >= before);
    w.kill();
    std::thread::sleep(Duration::from_millis(100));
    s.refresh_perf_map().expect("refresh after exit");
    s.refresh_maps().expect("maps kept after exit");
    let f = &s.symbolize(&addrs[..1])[0];
    assert_eq!(f.name, "Cpu::HotA", "after exit: {f:?}");
}

#[test]
fn second_process_reuses_parsed_images() {
    let cache = Arc::new(ImageCache::new());
    let mut times = Vec::new();
    for round in 0..2 {
        let w = Workload::new("Cpu", Runtime::Net8).arg(10).start().unwrap_or_else(|e| panic!("{e}"));
        let mut s = ProcessSymbolizer::with_cache(w.pid, Arc::clone(&cache)).unwrap_or_else(|e| panic!("{e}"));
        let t = Instant::now();
        let (named, total) = corelib_methods_round_trip(&mut s, 200, None);
        times.push(t.elapsed());
        eprintln!("round {round}: {named}/{total} R2R methods named back in {:?}, parses so far {}", times[round], cache.parses());
        assert_eq!(named, total);
    }
    let parses = cache.parses();
    assert_eq!(parses, 1, "CoreLib parsed once for both processes");
    assert!(times[1] < times[0], "second process was not faster: {times:?}");
}

#[test]
fn core31_perf_map_and_corelib() {
    let mut w = Workload::new("Cpu", Runtime::Core31).arg(20).env("DOTNET_PerfMapEnabled", "1").env("COMPlus_PerfMapEnabled", "1").start().unwrap_or_else(|e| panic!("{e}"));
    assert!(w.wait_for_line("tick 3", Duration::from_secs(20)).is_some(), "no ticks: {:?}", w.output());
    let mut s = ProcessSymbolizer::new(w.pid).unwrap_or_else(|e| panic!("{e}"));
    let hot = s.perf_map().iter().find(|r| r.name.contains("Cpu::HotA")).map(|r| (r.start, r.name.to_string(), r.tier.map(str::to_string)));
    let (start, raw, tier) = hot.unwrap_or_else(|| panic!("HotA not in the 3.1 perf map ({} records)", s.perf_map().len()));
    eprintln!("3.1 perf map: {raw:?} tier {tier:?}");
    let f = &s.symbolize(&[start])[0];
    assert_eq!((f.name.as_str(), f.kind), ("Cpu::HotA", FrameKind::Jit), "{f:?}");
    // The runtime's own statement of CoreLib's load address (perfinfo; 3.1 writes no jitdump).
    let base = perfinfo_base(w.pid, "System.Private.CoreLib.dll").expect("perfinfo names CoreLib's base");
    let (named, total) = corelib_methods_round_trip(&mut s, 300, Some(base));
    eprintln!("3.1: {named}/{total} CoreLib methods at perfinfo base {base:#x} + RVA named back");
    assert_eq!(named, total);
    w.kill();
}

#[test]
fn libc_write_and_kernel_in_this_process() {
    // SAFETY: dlsym with a NUL-terminated name on the default namespace.
    let write = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"write".as_ptr()) } as u64;
    assert_ne!(write, 0, "dlsym(write)");
    let mut s = ProcessSymbolizer::new(std::process::id()).expect("self");
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").expect("kallsyms");
    let line = kallsyms.lines().find(|l| l.ends_with(" T do_syscall_64") || l.ends_with(" T schedule")).expect("core symbol");
    let kaddr = u64::from_str_radix(line.split(' ').next().expect("addr"), 16).expect("hex");
    let frames = s.symbolize(&[write + 2, kaddr + 4]);
    let f = &frames[0];
    assert_eq!(f.kind, FrameKind::Native, "{f:?}");
    assert!(f.name.ends_with("write"), "{f:?}");
    assert_eq!(f.offset, 2);
    assert!(f.module.as_deref().is_some_and(|m| m.starts_with("libc")), "{f:?}");
    let k = &frames[1];
    assert_eq!(k.kind, FrameKind::Kernel, "{k:?} (kallsyms line {line})");
    assert!(line.ends_with(&k.name), "{k:?} vs {line}");
    assert_eq!(k.offset, 4);
}

#[test]
fn methods_jitted_after_open_are_found_without_explicit_refresh() {
    let w = Workload::new("Cpu", Runtime::Net8).arg(20).env("DOTNET_PerfMapEnabled", "1").start().unwrap_or_else(|e| panic!("{e}"));
    // Opened right at `ready`: HotA's optimized tier does not exist yet.
    let mut s = ProcessSymbolizer::new(w.pid).unwrap_or_else(|e| panic!("{e}"));
    let early = s.perf_map().len();
    assert!(w.wait_for_line("tick 5", Duration::from_secs(20)).is_some(), "no ticks");
    // Oracle: a fresh parse of the whole file, independent of the incremental reader.
    let bytes = std::fs::read(format!("/proc/{}/root/tmp/perf-{}.map", w.pid, w.pid)).expect("perf map");
    let whole = clrprobe_symbolizer::PerfMap::parse(&bytes);
    let (start, tier) = whole
        .iter()
        .filter(|r| r.name.contains("Cpu::HotA"))
        .last()
        .map(|r| (r.start, r.tier.map(str::to_string)))
        .expect("HotA recorded");
    eprintln!("perf map at open: {early} records; later: {}; HotA latest tier {tier:?}", whole.len());
    assert!(whole.len() > early, "nothing was added after open");
    assert!(s.perf_map().lookup_sorted(start).is_none(), "HotA's latest code was already known at open: the test proves nothing");
    let f = &s.symbolize(&[start])[0];
    assert_eq!((f.name.as_str(), f.kind, &f.tier), ("Cpu::HotA", FrameKind::Jit, &tier), "{f:?}");
    assert!(s.perf_map().len() >= whole.len(), "incremental table has fewer records than the whole-file parse");
}

/// `Type::Method` with every `[...]` instantiation removed, for comparing runtime-written names
/// (`Dictionary`2[System.__Canon,System.__Canon]::.ctor`) with metadata names.
fn plain(name: &str) -> String {
    let (_, n) = clrprobe_symbolizer::frame::split_managed_name(name);
    let mut out = String::new();
    let mut depth = 0;
    for c in n.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The runtime's own jitdump lists the ReadyToRun methods it started using (`[PreJIT]`) and
/// every JIT'd method, with their code ranges: an oracle for both symbolization paths.
#[test]
fn agrees_with_the_runtimes_jitdump_net8() {
    agrees_with_the_runtimes_jitdump(Runtime::Net8);
}

fn agrees_with_the_runtimes_jitdump(rt: Runtime) {
    let w = Workload::new("Cpu", rt).arg(20).env("DOTNET_PerfMapEnabled", "1").env("COMPlus_PerfMapEnabled", "1").start().unwrap_or_else(|e| panic!("{e}"));
    assert!(w.wait_for_line("tick 3", Duration::from_secs(20)).is_some(), "no ticks");
    let bytes = std::fs::read(format!("/proc/{}/root/tmp/jit-{}.dump", w.pid, w.pid)).expect("jitdump written");
    let (records, _) = clrprobe_symbolizer::jitdump::parse_jitdump(&bytes).expect("jitdump parses");
    let mut s = ProcessSymbolizer::new(w.pid).unwrap_or_else(|e| panic!("{e}"));
    let corelib = s
        .maps()
        .mappings
        .iter()
        .filter(|m| m.executable && m.path().is_some_and(|p| p.ends_with("/System.Private.CoreLib.dll")))
        .map(|m| (m.start, m.end))
        .next()
        .expect("CoreLib text mapped");
    let prejit: Vec<_> = records.iter().filter(|r| r.name.ends_with("[PreJIT]") && r.addr >= corelib.0 && r.addr < corelib.1).collect();
    let jitted: Vec<_> = records.iter().filter(|r| r.name.contains("::") && !r.name.ends_with("[PreJIT]") && !r.name.starts_with("stub")).collect();
    assert!(prejit.len() > 100, "only {} PreJIT records in CoreLib", prejit.len());
    assert!(jitted.iter().any(|r| r.name.contains("Cpu::HotA")), "HotA not in the jitdump");

    // .NET 8.0.4 sometimes drops the last character of a method name in the jitdump
    // (`EventSource::ValidateSetting` for `ValidateSettings`); such names count as agreeing,
    // and are counted.
    let mut truncated = 0;
    let mut check = |recs: &[&clrprobe_symbolizer::jitdump::CodeLoad], kind: FrameKind| -> (usize, Vec<String>) {
        let addrs: Vec<u64> = recs.iter().flat_map(|r| [r.addr, r.addr + r.size - 1]).collect();
        let frames = s.symbolize(&addrs);
        let mut bad = Vec::new();
        for (r, pair) in recs.iter().zip(frames.chunks(2)) {
            let want = plain(r.name.rsplit_once('[').map_or(&r.name, |(n, _)| n));
            for (f, at) in pair.iter().zip([0, r.size - 1]) {
                let got = plain(&f.name);
                let cut = got.len() == want.len() + 1 && got.starts_with(&want);
                truncated += usize::from(cut);
                if f.kind != kind || got != want && !cut || f.offset != at {
                    bad.push(format!("{:#x}+{at:#x} {:?} -> {:?} {:?} +{:#x}", r.addr, r.name, f.kind, f.name, f.offset));
                }
            }
        }
        (recs.len() * 2, bad)
    };
    let (n, bad) = check(&prejit, FrameKind::ReadyToRun);
    eprintln!("R2R: {}/{n} addresses agree with the jitdump; first disagreements: {:#?}", n - bad.len(), &bad[..bad.len().min(8)]);
    assert!(bad.is_empty(), "{} R2R disagreements", bad.len());
    let (n, bad) = check(&jitted, FrameKind::Jit);
    eprintln!("JIT: {}/{n} addresses agree with the jitdump; first disagreements: {:#?}", n - bad.len(), &bad[..bad.len().min(8)]);
    assert!(bad.is_empty(), "{} JIT disagreements", bad.len());
    eprintln!("{truncated} addresses matched a jitdump name missing its last character");
}

/// `DOTNET_PerfMapEnabled=2` writes only the jitdump: JIT frames must come from it.
#[test]
fn jitdump_only_runtime_still_names_jit_frames() {
    let w = Workload::new("Cpu", Runtime::Net8).arg(20).env("DOTNET_PerfMapEnabled", "2").start().unwrap_or_else(|e| panic!("{e}"));
    assert!(w.wait_for_line("tick 3", Duration::from_secs(20)).is_some(), "no ticks");
    let mut s = ProcessSymbolizer::new(w.pid).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.perf_map().len(), 0, "a perf map was written: the test proves nothing");
    let hot: Vec<(u64, u64, String)> =
        s.jitdump().records().iter().filter(|r| r.name.contains("Cpu::HotA")).map(|r| (r.addr, r.size, r.name.clone())).collect();
    assert!(!hot.is_empty(), "HotA not in the jitdump ({} records)", s.jitdump().len());
    let addrs: Vec<u64> = hot.iter().map(|&(a, size, _)| a + size - 1).collect();
    for (f, (_, size, raw)) in s.symbolize(&addrs).iter().zip(&hot) {
        assert_eq!((f.name.as_str(), f.kind, f.offset), ("Cpu::HotA", FrameKind::Jit, size - 1), "{f:?} for {raw:?}");
        assert!(f.tier.is_some(), "tier not split off {raw:?}");
    }
}
