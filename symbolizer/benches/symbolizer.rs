//! Benchmarks with peers in the same run, ratios printed:
//! - perf-map parse + index of a 100k-record map built from real method names (the .NET 8
//!   CoreLib's R2R methods) against a naive `str::lines` + `split` + `from_str_radix` parser and
//!   against merely reading the file;
//! - ReadyToRun parse of the real CoreLib;
//! - symbolizing 10k addresses of a live .NET 8 process against blazesym's process source.
use std::hint::black_box;
use std::time::{Duration, Instant};

use clrprobe_symbolizer::{PerfMap, R2rImage};
use clrprobe_tests::Runtime;
use criterion::{Criterion, criterion_group, criterion_main};

const RECORDS: usize = 100_000;

fn build_map() -> Vec<u8> {
    let dir = Runtime::Net8.framework_dir().unwrap_or_else(|e| panic!("{e}"));
    let bytes = std::fs::read(dir.join("System.Private.CoreLib.dll")).expect("CoreLib");
    let img = R2rImage::parse(&bytes).expect("R2R");
    let tiers = ["[OptimizedTier1]", "[Tier0]", "[QuickJitted]", "[PreJIT]", "[OSR]", "[InstrumentedTier]"];
    let mut out = Vec::new();
    let mut addr = 0x7f1d_d200_0000u64;
    for i in 0..RECORDS {
        let m = &img.methods[i % img.methods.len()];
        let size = 0x20 + (i as u64 * 37) % 0x400;
        let name = img.method_name(m);
        let ty = name.split("::").next().unwrap_or("");
        let method = name.rsplit("::").next().unwrap_or("");
        out.extend_from_slice(
            format!("0x{addr:x} 0x{size:x} instance void [System.Private.CoreLib] {ty}::{method}(int32,class System.String){}\n", tiers[i % tiers.len()])
                .as_bytes(),
        );
        addr += size + 0x10;
    }
    out
}

/// The peer: what a first attempt looks like.
fn naive(text: &[u8]) -> Vec<(u64, u64, String)> {
    let text = std::str::from_utf8(text).expect("utf8");
    let mut v: Vec<(u64, u64, String)> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            let start = u64::from_str_radix(it.next()?.trim_start_matches("0x"), 16).ok()?;
            let size = u64::from_str_radix(it.next()?.trim_start_matches("0x"), 16).ok()?;
            Some((start, size, it.next()?.to_string()))
        })
        .collect();
    v.sort_by_key(|e| e.0);
    v
}

fn time<T>(iters: u32, mut f: impl FnMut() -> T) -> Duration {
    let t = Instant::now();
    for _ in 0..iters {
        black_box(f());
    }
    t.elapsed() / iters
}

/// CPU time of this thread (time spent waiting for a core on a loaded machine is not counted).
fn thread_cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The least thread CPU time of one call over `rounds` rounds of `iters` calls.
fn best_cpu<T>(rounds: u32, iters: u32, mut f: impl FnMut() -> T) -> Duration {
    (0..rounds)
        .map(|_| {
            let t = thread_cpu();
            for _ in 0..iters {
                black_box(f());
            }
            (thread_cpu() - t) / iters
        })
        .min()
        .expect("rounds > 0")
}

fn bench(c: &mut Criterion) {
    let map = build_map();
    let path = clrprobe_tests::scratch_file("bench-perf", "perf.map");
    std::fs::write(&path, &map).expect("write temp map");
    let parsed = {
        let mut m = PerfMap::parse(&map);
        m.index();
        m
    };
    assert_eq!(parsed.len(), RECORDS);
    assert_eq!(naive(&map).len(), RECORDS);

    let corelib = std::fs::read(Runtime::Net8.framework_dir().unwrap_or_else(|e| panic!("{e}")).join("System.Private.CoreLib.dll")).expect("CoreLib");
    c.bench_function("r2r parse .NET 8 System.Private.CoreLib.dll", |b| b.iter(|| R2rImage::parse(black_box(&corelib)).map(|i| i.methods.len())));

    let mut g = c.benchmark_group("perf_map_100k");
    g.sample_size(20);
    g.bench_function("clrprobe parse+index", |b| {
        b.iter(|| {
            let mut m = PerfMap::parse(black_box(&map));
            m.index();
            m
        })
    });
    g.bench_function("naive lines+split+from_str_radix+sort", |b| b.iter(|| naive(black_box(&map))));
    g.bench_function("std::fs::read of the file", |b| b.iter(|| std::fs::read(&path).expect("read")));
    // Probes drawn uniformly over the map's whole address range (every one inside it).
    let lo = parsed.iter().next().map(|r| r.start).expect("records");
    let hi = parsed.iter().last().map(|r| r.start + r.size).expect("records");
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let probes: Vec<u64> = (0..1000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            lo + x % (hi - lo)
        })
        .collect();
    let found = probes.iter().filter(|&&a| parsed.lookup_sorted(a).is_some()).count();
    assert!(found > 950, "{found} of 1000 uniform probes inside the map found a record");
    // The peer: binary search over the naive parser's (start, size, name) records.
    let naive_map = naive(&map);
    let naive_lookup = |a: u64| {
        let i = naive_map.partition_point(|e| e.0 <= a);
        (i > 0 && a - naive_map[i - 1].0 < naive_map[i - 1].1).then(|| naive_map[i - 1].2.as_str())
    };
    assert_eq!(probes.iter().filter(|&&a| naive_lookup(a).is_some()).count(), found);
    // Each lookup reads its name's first byte: a name is what a lookup is for.
    let ours_run = || probes.iter().filter_map(|&a| parsed.lookup_sorted(black_box(a))).map(|s| s.name.as_bytes()[0] as usize).sum::<usize>();
    let peer_run = || probes.iter().filter_map(|&a| naive_lookup(black_box(a))).map(|n| n.as_bytes()[0] as usize).sum::<usize>();
    assert_eq!(ours_run(), peer_run());
    g.bench_function("1000 uniform lookups", |b| b.iter(ours_run));
    g.bench_function("1000 uniform lookups, naive binary search", |b| b.iter(peer_run));
    g.finish();
    let per = |d: Duration| 1000.0 / d.as_secs_f64() / 1e6;
    // Interleaved rounds, the best of each (thread CPU time: a loaded machine's waits are not
    // lookups).
    let (mut ours, mut peer) = (Duration::MAX, Duration::MAX);
    for _ in 0..10 {
        ours = ours.min(best_cpu(3, 200, ours_run));
        peer = peer.min(best_cpu(3, 200, peer_run));
    }
    println!(
        "perf map lookups, uniform inside {RECORDS} records ({found}/1000 found), best thread CPU time: clrprobe {:.1} M/s, naive binary search over (start, size, String) {:.1} M/s",
        per(ours),
        per(peer)
    );

    let ours = time(30, || {
        let mut m = PerfMap::parse(&map);
        m.index();
        m
    });
    let peer = time(30, || naive(&map));
    let read = time(30, || std::fs::read(&path).expect("read"));
    println!(
        "perf map, {RECORDS} records / {} KiB: clrprobe {ours:?}, naive {peer:?} (naive/clrprobe = {:.2}x), fs::read {read:?} (clrprobe/read = {:.2}x)",
        map.len() / 1024,
        peer.as_secs_f64() / ours.as_secs_f64(),
        ours.as_secs_f64() / read.as_secs_f64()
    );
    let _ = std::fs::remove_file(&path);
}

/// Symbolizing 10k addresses of a live .NET 8 process (JIT, R2R CoreLib, libcoreclr, libc)
/// with a warm cache, against blazesym's own process source on the same addresses.
fn bench_live(c: &mut Criterion) {
    use blazesym::symbolize::source::{Process, Source};
    use blazesym::symbolize::{Input, Symbolizer};
    use clrprobe_symbolizer::{FrameKind, ProcessSymbolizer};
    use clrprobe_tests::Workload;

    let w = Workload::new("Cpu", Runtime::Net8).arg(60).env("DOTNET_PerfMapEnabled", "1").start().unwrap_or_else(|e| panic!("{e}"));
    let _ = w.wait_for_line("tick 3", Duration::from_secs(20));
    let mut s = ProcessSymbolizer::new(w.pid).unwrap_or_else(|e| panic!("{e}"));
    let exec: Vec<(u64, u64)> =
        s.maps().mappings.iter().filter(|m| m.executable && m.path().is_some()).map(|m| (m.start, m.end)).collect();
    let jit: Vec<u64> = s.perf_map().iter().map(|r| r.start + r.size / 2).collect();
    let mut addrs = Vec::with_capacity(10_000);
    for i in 0..10_000usize {
        if i % 3 == 0 && !jit.is_empty() {
            addrs.push(jit[i % jit.len()]);
        } else {
            let (a, b) = exec[i % exec.len()];
            addrs.push(a + (i as u64 * 4099) % (b - a));
        }
    }
    // blazesym's process source fails a whole batch on a non-ELF executable mapping (CoreLib,
    // the memfd JIT heap, the runtime's /tmp/jit-PID.dump marker), so it gets only the
    // addresses inside ELF files.
    let elf_ranges: Vec<(u64, u64)> = s
        .maps()
        .mappings
        .iter()
        .filter(|m| m.executable && m.path().is_some_and(|p| p.contains(".so") || p.ends_with("/dotnet")))
        .map(|m| (m.start, m.end))
        .collect();
    let mut native: Vec<u64> = addrs.iter().copied().filter(|&a| elf_ranges.iter().any(|&(x, y)| a >= x && a < y)).collect();
    let frames = s.symbolize(&addrs);
    let count = |k: FrameKind| frames.iter().filter(|f| f.kind == k).count();
    let blaze = Symbolizer::new();
    let mut src = Process::new(w.pid.into());
    src.perf_map = false;
    src.debug_syms = false;
    let src = Source::Process(src);
    // Drop the few addresses blazesym's process source errors on (it fails whole batches).
    let mut first_err = None;
    let before = native.len();
    if let Err(e) = blaze.symbolize(&src, Input::AbsAddr(&native)) {
        native.retain(|a| match blaze.symbolize(&src, Input::AbsAddr(&[*a])) {
            Ok(_) => true,
            Err(e2) => {
                first_err.get_or_insert_with(|| format!("{a:#x}: {e2}"));
                false
            }
        });
        println!("blazesym failed the batch ({e}); dropped {} of {before} addresses, first: {first_err:?}", before - native.len());
    }
    let peer_named = blaze.symbolize(&src, Input::AbsAddr(&native)).map(|v| v.iter().filter(|s| s.as_sym().is_some()).count()).unwrap_or(0);
    let mut g = c.benchmark_group("symbolize_live_10k");
    g.sample_size(10);
    g.bench_function("clrprobe ProcessSymbolizer, all (warm)", |b| b.iter(|| s.symbolize(black_box(&addrs))));
    g.bench_function("clrprobe ProcessSymbolizer, ELF only (warm)", |b| b.iter(|| s.symbolize(black_box(&native))));
    g.bench_function("blazesym Process source, ELF only (warm)", |b| b.iter(|| blaze.symbolize(&src, Input::AbsAddr(black_box(&native))).map(|v| v.len())));
    g.finish();
    let all = time(5, || s.symbolize(&addrs));
    let ours = time(5, || s.symbolize(&native));
    let ours_named = s.symbolize(&native).iter().filter(|f| f.kind == FrameKind::Native).count();
    let peer = time(5, || blaze.symbolize(&src, Input::AbsAddr(&native)).map(|v| v.len()));
    println!(
        "symbolize {} live addresses: clrprobe {all:?} ({} JIT, {} R2R, {} native, {} unknown); the {} in ELF files: clrprobe {ours:?} ({ours_named} named), blazesym process source {peer:?} ({peer_named} named); blazesym/clrprobe = {:.2}x",
        addrs.len(),
        count(FrameKind::Jit),
        count(FrameKind::ReadyToRun),
        count(FrameKind::Native),
        count(FrameKind::Unknown),
        native.len(),
        peer.as_secs_f64() / ours.as_secs_f64()
    );
}

criterion_group!(benches, bench, bench_live);
criterion_main!(benches);
