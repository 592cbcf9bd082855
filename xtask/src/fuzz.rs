//! `cargo xtask fuzz`: the fuzz targets of `fuzz/` (and `userspace/eventpipe/fuzz/`) with
//! cargo-fuzz on nightly, seeded from real files: the .NET 8 runtime's assemblies (ReadyToRun
//! images and their ECMA metadata, CoreLib's included), `shared/testdata` NetTrace files, this
//! machine's /proc maps and kallsyms, the small committed seeds in `fuzz/seeds/`, and inputs
//! that once crashed in `fuzz/regressions/`.
//! Prints per target: executions, crashes (artifacts), peak RSS.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context, Result, bail};
use clrprobe_tests::Runtime;

use crate::util;

/// (crate directory, target, libFuzzer -max_len)
pub const TARGETS: &[(&str, &str, usize)] = &[
    ("fuzz", "perf_map", 1 << 20),
    ("fuzz", "jitdump", 1 << 20),
    ("fuzz", "r2r_image", 4 << 20),
    ("fuzz", "metadata", 4 << 20),
    ("fuzz", "proc_maps", 256 << 10),
    ("fuzz", "kallsyms", 1 << 20),
    ("fuzz", "pprof_read", 1 << 20),
    ("fuzz", "clr_events", 1 << 20),
    ("userspace/eventpipe/fuzz", "nettrace_reader", 1 << 20),
    ("userspace/eventpipe/fuzz", "ipc_reply", 65536),
];

/// Result of one target's run.
pub struct Outcome {
    pub target: &'static str,
    pub execs: u64,
    pub peak_rss_mb: u64,
    pub crashes: Vec<PathBuf>,
    pub seconds: f64,
}

/// Makes sure `cargo fuzz` works on nightly (installs cargo-fuzz when missing).
pub fn ensure_cargo_fuzz() -> Result<()> {
    if util::output(Command::new("cargo").args(["+nightly", "fuzz", "--version"])).is_some() {
        return Ok(());
    }
    eprintln!("xtask: installing cargo-fuzz (crates.io)");
    util::check(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]), "cargo install cargo-fuzz")
}

/// Runs every target (or those named) for `seconds` each; fails if any crashed.
pub fn run(seconds: u64, only: &[String]) -> Result<Vec<Outcome>> {
    ensure_cargo_fuzz()?;
    let mut outcomes = Vec::new();
    for &(dir, target, max_len) in TARGETS {
        if !only.is_empty() && !only.iter().any(|t| t == target) {
            continue;
        }
        let crate_dir = util::root().join(dir);
        let corpus = crate_dir.join("corpus").join(target);
        fs::create_dir_all(&corpus)?;
        seed(target, &corpus).with_context(|| format!("seeding {target}"))?;
        let artifacts = crate_dir.join("artifacts").join(target);
        fs::create_dir_all(&artifacts)?;
        let before: Vec<PathBuf> = list(&artifacts);
        let t0 = Instant::now();
        let out = Command::new("nice")
            .args(["-n", "10", "cargo", "+nightly", "fuzz", "run", "--release", target])
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg(format!("-max_len={max_len}"))
            .arg("-rss_limit_mb=2048")
            .arg("-malloc_limit_mb=1024")
            .arg("-print_final_stats=1")
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .current_dir(&crate_dir)
            .output()
            .with_context(|| format!("running cargo fuzz run {target}"))?;
        let log = String::from_utf8_lossy(&out.stderr);
        let stat = |name: &str| -> u64 {
            log.lines().rev().filter_map(|l| l.strip_prefix(name)).find_map(|v| v.trim().trim_start_matches(':').trim().parse().ok()).unwrap_or(0)
        };
        let crashes: Vec<PathBuf> = list(&artifacts).into_iter().filter(|p| !before.contains(p)).collect();
        if !out.status.success() && crashes.is_empty() {
            bail!("cargo fuzz run {target} failed without an artifact:\n{}", tail(&log, 40));
        }
        let o = Outcome {
            target,
            execs: stat("stat::number_of_executed_units"),
            peak_rss_mb: stat("stat::peak_rss_mb"),
            crashes,
            seconds: t0.elapsed().as_secs_f64(),
        };
        eprintln!(
            "xtask fuzz: {target}: {} execs in {:.0} s, peak RSS {} MB, {} crash(es){}",
            o.execs,
            o.seconds,
            o.peak_rss_mb,
            o.crashes.len(),
            if o.crashes.is_empty() { String::new() } else { format!(": {:?}\n{}", o.crashes, tail(&log, 30)) }
        );
        outcomes.push(o);
    }
    let crashed: Vec<&str> = outcomes.iter().filter(|o| !o.crashes.is_empty()).map(|o| o.target).collect();
    if !crashed.is_empty() {
        bail!("fuzz targets crashed: {crashed:?} (artifacts under fuzz/artifacts/)");
    }
    Ok(outcomes)
}

fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn list(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir).map(|r| r.flatten().map(|e| e.path()).collect()).unwrap_or_default()
}

/// Copies the seeds of `target` into its corpus directory (idempotent).
fn seed(target: &str, corpus: &Path) -> Result<()> {
    let put = |name: &str, bytes: &[u8]| -> Result<()> {
        let p = corpus.join(format!("seed-{name}"));
        if !p.exists() {
            fs::write(&p, bytes)?;
        }
        Ok(())
    };
    // Committed seeds, and inputs that once crashed (regressions: run first by libFuzzer).
    for kind in ["seeds", "regressions"] {
        for f in list(&util::root().join("fuzz").join(kind).join(target)) {
            put(&f.file_name().unwrap_or_default().to_string_lossy(), &fs::read(&f)?)?;
        }
    }
    match target {
        "r2r_image" | "metadata" => {
            let dir = Runtime::Net8.framework_dir().map_err(|e| anyhow::anyhow!("{e}"))?;
            for f in list(&dir) {
                let name = f.file_name().unwrap_or_default().to_string_lossy().into_owned();
                if !name.ends_with(".dll") {
                    continue;
                }
                let bytes = fs::read(&f)?;
                let corelib = name == "System.Private.CoreLib.dll";
                if target == "r2r_image" && bytes.len() <= 256 << 10 {
                    put(&name, &bytes)?;
                }
                if target == "metadata"
                    && let Some(md) = metadata_blob(&bytes)
                    && (md.len() <= 256 << 10 || corelib)
                {
                    put(&format!("{name}.md"), md)?;
                }
            }
        }
        "proc_maps" => {
            put("self-maps", &fs::read("/proc/self/maps")?)?;
            // A .NET process's maps when one is running (memfd:doublemapper, R2R images).
            for e in fs::read_dir("/proc")?.flatten() {
                let maps = e.path().join("maps");
                if let Ok(text) = fs::read_to_string(&maps)
                    && text.contains("libcoreclr.so")
                {
                    put("dotnet-maps", text.as_bytes())?;
                    break;
                }
            }
        }
        "kallsyms" => {
            let text = fs::read_to_string("/proc/kallsyms")?;
            let head: String = text.lines().take(4000).map(|l| format!("{l}\n")).collect();
            put("kallsyms-head", head.as_bytes())?;
        }
        "clr_events" | "nettrace_reader" => {
            let dir = util::root().join("../shared/testdata/nettrace");
            for f in list(&dir) {
                let name = f.file_name().unwrap_or_default().to_string_lossy().into_owned();
                if name.ends_with(".nettrace") || name.ends_with(".netperf") {
                    let bytes = fs::read(&f)?;
                    // Large recordings: their first 256 KiB (header, metadata, first blocks).
                    put(&name, &bytes[..bytes.len().min(256 << 10)])?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// The ECMA-335 metadata root of a managed PE file (PE32 or PE32+), by its CLR header.
fn metadata_blob(pe: &[u8]) -> Option<&[u8]> {
    let u16_at = |o: usize| pe.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| pe.get(o..o + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let nt = u32_at(0x3c)? as usize;
    let nsections = u16_at(nt + 6)? as usize;
    let opt_size = u16_at(nt + 20)? as usize;
    let opt = nt + 24;
    let dirs = opt + if u16_at(opt)? == 0x20b { 112 } else { 96 };
    let (clr_rva, _) = (u32_at(dirs + 14 * 8)?, u32_at(dirs + 14 * 8 + 4)?);
    let sections = opt + opt_size;
    let to_off = |rva: u32| -> Option<usize> {
        (0..nsections).find_map(|i| {
            let s = sections + i * 40;
            let (vsize, va, raw) = (u32_at(s + 8)?, u32_at(s + 12)?, u32_at(s + 20)?);
            (rva >= va && rva < va + vsize.max(1)).then(|| (rva - va + raw) as usize)
        })
    };
    let cor = to_off(clr_rva)?;
    let (md_rva, md_size) = (u32_at(cor + 8)?, u32_at(cor + 12)? as usize);
    let md = to_off(md_rva)?;
    pe.get(md..md + md_size)
}
