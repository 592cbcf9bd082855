//! `cargo xtask fuzz`: the fuzz targets of `fuzz/` (and `userspace/eventpipe/fuzz/`) with
//! cargo-fuzz on nightly, seeded from real files: the .NET 8 runtime's assemblies (ReadyToRun
//! images and their ECMA metadata, CoreLib's included), `shared/testdata` NetTrace files, this
//! machine's /proc maps and kallsyms, the small committed seeds in `fuzz/seeds/`, and inputs
//! that once crashed in `fuzz/regressions/`.
//! `--sanitizer none` builds without ASan for long runs (several times more executions);
//! `--runs N` stops a target at N executions. Prints per target: executions, crashes
//! (artifacts), peak RSS.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context, Result, bail};
use clrprobe_tests::Runtime;

use crate::util;

/// (crate directory, target, libFuzzer -max_len). Inputs are kept small so one execution is
/// cheap: 4 KiB for the line formats and one event payload, 16 KiB for a jitdump (dozens of
/// records), 64 KiB for binary images (most of the runtime's small assemblies fit whole).
pub const TARGETS: &[(&str, &str, usize)] = &[
    ("fuzz", "perf_map", 4 << 10),
    ("fuzz", "jitdump", 16 << 10),
    ("fuzz", "r2r_image", 64 << 10),
    ("fuzz", "metadata", 64 << 10),
    ("fuzz", "proc_maps", 4 << 10),
    ("fuzz", "kallsyms", 4 << 10),
    ("fuzz", "pprof_read", 64 << 10),
    ("fuzz", "clr_events", 4 << 10),
    ("userspace/eventpipe/fuzz", "nettrace_reader", 1 << 20),
    ("userspace/eventpipe/fuzz", "nettrace_in_memory", 1 << 20),
    ("userspace/eventpipe/fuzz", "ipc_reply", 65536),
];

/// How to run the targets.
pub struct Options {
    /// Longest run per target.
    pub seconds: u64,
    /// Stop a target after this many executions (when it gets there before `seconds`).
    pub runs: Option<u64>,
    /// cargo-fuzz sanitizer: "address" (the default, and CI's), or "none" (several times
    /// faster, for long runs; catches panics, overflows and aborts, not memory errors in
    /// unsafe code). Debug assertions (overflow checks) are on in both.
    pub sanitizer: String,
    /// Minimize the corpus (`cargo fuzz cmin`) before running.
    pub cmin: bool,
}

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

/// `cargo +nightly fuzz SUB` for one target under `nice`, built with `opts.sanitizer` into its
/// own directory (so ASan and plain builds do not evict each other).
fn cargo_fuzz(sub: &str, target: &str, opts: &Options) -> Command {
    let mut c = Command::new("nice");
    c.args(["-n", "15", "cargo", "+nightly", "fuzz", sub, "--sanitizer", &opts.sanitizer, "--target-dir"])
        .arg(util::target_dir().join(format!("fuzz-{}", opts.sanitizer)))
        .arg(target);
    c
}

/// Runs every target (or those named) for `opts.seconds` (or `opts.runs`) each; fails if any
/// crashed.
pub fn run(opts: &Options, only: &[String]) -> Result<Vec<Outcome>> {
    ensure_cargo_fuzz()?;
    if !matches!(opts.sanitizer.as_str(), "address" | "none") {
        bail!("--sanitizer {}: use address or none", opts.sanitizer);
    }
    // The targets named, in the order given (slow ones first, say), or all.
    let mut chosen = Vec::new();
    for name in only {
        let Some(t) = TARGETS.iter().find(|t| t.1 == name) else {
            bail!("no fuzz target {name}: use one of {:?}", TARGETS.iter().map(|t| t.1).collect::<Vec<_>>());
        };
        chosen.push(*t);
    }
    if only.is_empty() {
        chosen = TARGETS.to_vec();
    }
    let mut outcomes = Vec::new();
    for (dir, target, max_len) in chosen {
        let crate_dir = util::root().join(dir);
        let corpus = crate_dir.join("corpus").join(target);
        fs::create_dir_all(&corpus)?;
        seed(target, max_len, &corpus).with_context(|| format!("seeding {target}"))?;
        if opts.cmin {
            let before = list(&corpus).len();
            let out = cargo_fuzz("cmin", target, opts)
                .arg(&corpus)
                .arg("--")
                .arg(format!("-max_len={max_len}"))
                .current_dir(&crate_dir)
                .output()
                .with_context(|| format!("running cargo fuzz cmin {target}"))?;
            if !out.status.success() {
                bail!("cargo fuzz cmin {target} failed:\n{}", tail(&String::from_utf8_lossy(&out.stderr), 40));
            }
            eprintln!("xtask fuzz: {target}: corpus minimized from {before} to {} inputs", list(&corpus).len());
        }
        let artifacts = crate_dir.join("artifacts").join(target);
        fs::create_dir_all(&artifacts)?;
        let before: Vec<PathBuf> = list(&artifacts);
        let t0 = Instant::now();
        let mut cmd = cargo_fuzz("run", target, opts);
        cmd.arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={}", opts.seconds))
            .arg(format!("-max_len={max_len}"))
            .arg("-rss_limit_mb=2048")
            .arg("-malloc_limit_mb=1024")
            .arg("-print_final_stats=1")
            .arg(format!("-artifact_prefix={}/", artifacts.display()));
        if let Some(runs) = opts.runs {
            cmd.arg(format!("-runs={runs}"));
        }
        // libFuzzer's log goes to a file, to be watched while a long run goes on.
        let log_path = crate_dir.join("artifacts").join(format!("{target}.log"));
        let status = cmd
            .current_dir(&crate_dir)
            .stdout(fs::File::create(&log_path)?)
            .stderr(fs::File::options().append(true).open(&log_path)?)
            .status()
            .with_context(|| format!("running cargo fuzz run {target}"))?;
        let log = fs::read_to_string(&log_path).unwrap_or_default();
        let stat = |name: &str| -> u64 {
            log.lines()
                .rev()
                .filter_map(|l| l.strip_prefix(name))
                .find_map(|v| v.trim().trim_start_matches(':').trim().parse().ok())
                .unwrap_or(0)
        };
        let crashes: Vec<PathBuf> = list(&artifacts).into_iter().filter(|p| !before.contains(p)).collect();
        if !status.success() && crashes.is_empty() {
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
            "xtask fuzz: {target} ({}): {} execs in {:.0} s, peak RSS {} MB, {} crash(es){}",
            opts.sanitizer,
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

/// Up to `count` pieces of `text` of at most `max` bytes each, cut at line ends, spread evenly
/// over the text (its start, its end and between).
fn line_chunks(text: &[u8], max: usize, count: usize) -> Vec<&[u8]> {
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + max).min(text.len());
        if end < text.len()
            && let Some(nl) = text[start..end].iter().rposition(|&b| b == b'\n')
        {
            end = start + nl + 1;
        }
        chunks.push(&text[start..end]);
        start = end;
    }
    if chunks.len() <= count {
        return chunks;
    }
    let n = chunks.len();
    (0..count).map(|i| chunks[i * (n - 1) / (count - 1).max(1)]).collect()
}

/// Copies the seeds of `target` into its corpus directory (idempotent), each cut to `max_len`.
fn seed(target: &str, max_len: usize, corpus: &Path) -> Result<()> {
    let put = |name: &str, bytes: &[u8]| -> Result<()> {
        let p = corpus.join(format!("seed-{name}"));
        if !p.exists() {
            fs::write(&p, &bytes[..bytes.len().min(max_len)])?;
        }
        Ok(())
    };
    // Committed seeds, and inputs that once crashed (regressions: run first by libFuzzer).
    for kind in ["seeds", "regressions"] {
        for f in list(&util::root().join("fuzz").join(kind).join(target)) {
            let name = f.file_name().unwrap_or_default().to_string_lossy().into_owned();
            let bytes = fs::read(&f)?;
            if target == "perf_map" && kind == "seeds" {
                // A leading byte chooses the feed step; the rest is map text, cut at lines.
                let (step, text) = bytes.split_first().unwrap_or((&b'@', &[]));
                for (i, c) in line_chunks(text, max_len - 1, 4).into_iter().enumerate() {
                    put(&format!("{name}.{i}"), &[&[*step][..], c].concat())?;
                }
            } else {
                put(&name, &bytes)?;
            }
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
                // Whole files only: a cut image has its sections and metadata outside the input.
                if target == "r2r_image" && bytes.len() <= max_len {
                    put(&name, &bytes)?;
                }
                if target == "metadata"
                    && let Some(md) = metadata_blob(&bytes)
                    && md.len() <= max_len
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
                if let Ok(text) = fs::read(&maps)
                    && text.windows(14).any(|w| w == b"libcoreclr.so\n")
                {
                    for (i, c) in line_chunks(&text, max_len, 12).into_iter().enumerate() {
                        put(&format!("dotnet-maps.{i}"), c)?;
                    }
                    break;
                }
            }
        }
        "kallsyms" => {
            // Its start, end (module symbols) and pieces between.
            for (i, c) in line_chunks(&fs::read("/proc/kallsyms")?, max_len, 8).into_iter().enumerate() {
                put(&format!("kallsyms.{i}"), c)?;
            }
        }
        "clr_events" => {
            let dir = util::root().join("../shared/testdata/nettrace");
            for f in list(&dir) {
                let name = f.file_name().unwrap_or_default().to_string_lossy().into_owned();
                if name.ends_with(".nettrace") || name.ends_with(".netperf") {
                    for (i, input) in clr_event_inputs(&fs::read(&f)?).into_iter().enumerate() {
                        put(&format!("{name}.{i}"), &input)?;
                    }
                }
            }
        }
        "nettrace_reader" | "nettrace_in_memory" => {
            let dir = util::root().join("../shared/testdata/nettrace");
            for f in list(&dir) {
                let name = f.file_name().unwrap_or_default().to_string_lossy().into_owned();
                if name.ends_with(".nettrace") || name.ends_with(".netperf") {
                    put(&name, &fs::read(&f)?)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Inputs of the clr_events target (its layout is in `fuzz/fuzz_targets/clr_events.rs`) from
/// the events of a NetTrace file: two of each (provider, id, version) of the runtime, rundown
/// and sample-profiler providers, and two of each EventSource event with a field list.
fn clr_event_inputs(nettrace: &[u8]) -> Vec<Vec<u8>> {
    use clr_events::providers::{RUNDOWN, RUNTIME, SAMPLE_PROFILER};
    use clr_events::schema::{FieldType, TypeCode};
    fn encode(ty: &FieldType, out: &mut Vec<u8>) {
        match ty {
            FieldType::Primitive(TypeCode::Object) => out.extend([1, 20]),
            FieldType::Primitive(tc) => out.push(*tc as u8),
            FieldType::Struct(fields) => {
                out.push(1);
                fields.iter().for_each(|f| encode(&f.ty, out));
                out.push(20);
            }
            FieldType::Array(elem) => {
                out.push(19);
                encode(elem, out);
            }
        }
    }
    let Ok(mut r) = clrprobe_eventpipe::nettrace::NetTraceReader::new(nettrace) else { return Vec::new() };
    let mut seen = std::collections::HashMap::new();
    let mut inputs = Vec::new();
    while let Ok(Some(ev)) = r.next_event() {
        let raw = ev.raw_event();
        let Some(kind) = [RUNTIME, RUNDOWN, SAMPLE_PROFILER]
            .iter()
            .position(|p| raw.provider.eq_ignore_ascii_case(p))
            .or_else(|| ev.metadata().schema.as_ref().is_some_and(|s| !s.fields.is_empty()).then_some(3))
        else {
            continue;
        };
        let count = seen.entry((raw.provider.to_string(), raw.event_id, raw.version)).or_insert(0);
        *count += 1;
        if *count > 2 {
            continue;
        }
        let [lo, hi] = raw.event_id.to_le_bytes();
        let mut input = vec![kind as u8, lo, hi, raw.version, if raw.pointer_size == 4 { 1 } else { 0 }];
        if kind == 3 {
            let mut spec = Vec::new();
            for f in ev.metadata().schema.iter().flat_map(|s| &s.fields) {
                encode(&f.ty, &mut spec);
            }
            let Ok(n) = u8::try_from(spec.len()) else { continue };
            input.push(n);
            input.extend(spec);
        }
        input.extend_from_slice(raw.payload);
        inputs.push(input);
    }
    inputs
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
