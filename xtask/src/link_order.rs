//! `cargo xtask link-order`: which of the release binary's functions `record -p PID --cpu`
//! runs, in the order it first runs them, written to `userspace/clrprobe/link-order.txt`.
//! The clrprobe package's build.rs hands that file to the linker (`--symbol-ordering-file`), so
//! the release binary keeps those functions together at the start of its text. Each page fault
//! on the binary's code maps the 64 KiB around the page, so code the recording runs spread over
//! the whole 7.3 MB of text kept most of it resident; together, about 2.4 MB of it.
//!
//! 1. Callgrind (valgrind) runs `record -p PID --cpu -F 99 -d 6s` on the Bench cpu workload,
//!    dumping its counts every million basic blocks. Functions are grouped by the phases they
//!    run in (set-up, recording, building and writing the profile: the code is given back
//!    between them, see `by_phase`), each group in the order its functions first run.
//! 2. With `perf` present, the same recording runs natively under
//!    `perf record -e exceptions:page_fault_user`: functions whose code faults in but that the
//!    list does not hold yet (paths valgrind does not take, e.g. AVX-512 CRC code) are added
//!    at its end. Each fault names only the first function of its 64 KiB, so run the task again
//!    on a binary built with the new file until it adds nothing (`BENCH_BIN=PATH` measures a
//!    binary built elsewhere).
//!
//! Functions of the previous file that this run did not see are kept, after the others, while
//! the binary still has them (`--fresh` starts over). Names are the binary's mangled symbols; a
//! name the linker does not find (code changed) is skipped without a warning, so a stale file
//! costs only layout.
use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use clrprobe_tests::{Runtime, Workload};

use crate::{ebpf, util};

/// Where build.rs looks for the order.
pub fn order_file() -> PathBuf {
    util::root().join("userspace/clrprobe/link-order.txt")
}

pub fn run(fresh: bool, runs: usize) -> Result<()> {
    crate::dotnet::setup()?;
    if !util::is_root() {
        bail!("the recordings load BPF programs: run it as root");
    }
    util::ensure_apt("valgrind", "valgrind", "callgrind lists the functions a recording runs")?;
    let bin = ebpf::build_userspace()?.canonicalize()?;
    // SAFETY: single-threaded at this point.
    unsafe { std::env::set_var("CLRPROBE_CACHE", crate::cache::dir()) };
    let tmp = util::scratch_dir("link-order")?;
    let text = text_symbols(&bin)?;

    let mut phases: HashMap<String, (u8, usize)> = HashMap::new();
    for run in 0..runs.max(1) {
        let dir = tmp.join(format!("run{run}"));
        std::fs::create_dir_all(&dir)?;
        for (f, (groups, first)) in callgrind_phases(&bin, &dir, &text)? {
            let e = phases.entry(f).or_insert((0, first));
            e.0 |= groups;
            e.1 = e.1.min(first);
        }
    }
    let mut order = by_phase(phases);
    eprintln!("callgrind, {runs} runs: {} functions, {} KiB", order.len(), size_kib(&order, &text));
    let mut seen: HashSet<String> = order.iter().cloned().collect();
    if util::have("perf") {
        let faulted = fault_order(&bin, &tmp, &text)?;
        let new: Vec<String> = faulted.into_iter().filter(|f| !seen.contains(f)).collect();
        eprintln!("page faults: {} functions not in callgrind's list: {new:?}", new.len());
        seen.extend(new.iter().cloned());
        order.extend(new);
    } else {
        eprintln!("perf is not installed: only callgrind's list");
    }
    let path = order_file();
    if !fresh && let Ok(old) = std::fs::read_to_string(&path) {
        let kept: Vec<String> = names(&old)
            .filter(|n| text.contains_key(*n) && !seen.contains(*n))
            .map(str::to_string)
            .collect();
        eprintln!("kept from the previous file: {} functions", kept.len());
        order.extend(kept);
    }
    let mut out = String::from(
        "# Functions `clrprobe record -p PID --cpu` runs, in the order it first runs them: the\n\
         # linker places them together (build.rs). Made by `cargo xtask link-order`; do not edit.\n",
    );
    for f in &order {
        out.push_str(f);
        out.push('\n');
    }
    std::fs::write(&path, out)?;
    println!("{}: {} functions, {} KiB of code", path.display(), order.len(), size_kib(&order, &text));
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}

/// How many of the order file's functions `bin` has (found, listed): a file the code or the
/// toolchain has left behind orders little (symbol names carry hashes of both).
pub fn coverage(bin: &Path) -> Option<(usize, usize)> {
    let file = std::fs::read_to_string(order_file()).ok()?;
    let text = text_symbols(bin).ok()?;
    let listed: Vec<&str> = names(&file).collect();
    Some((listed.iter().filter(|n| text.contains_key(**n)).count(), listed.len()))
}

/// The order file's symbol names (lld skips blank lines and `#` comments the same way).
fn names(file: &str) -> impl Iterator<Item = &str> {
    file.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'))
}

fn size_kib(order: &[String], text: &HashMap<String, (u64, u64)>) -> u64 {
    order.iter().filter_map(|f| text.get(f)).map(|&(_, size)| size).sum::<u64>() / 1024
}

/// The binary's function symbols: name -> (address, size).
fn text_symbols(bin: &Path) -> Result<HashMap<String, (u64, u64)>> {
    let out = util::output(Command::new("nm").args(["-S", "--defined-only"]).arg(bin))
        .context("nm (binutils) lists the binary's symbols")?;
    let mut map = HashMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [addr, size, kind, name] = f[..]
            && matches!(kind, "t" | "T" | "w" | "W")
            && let (Ok(addr), Ok(size)) = (u64::from_str_radix(addr, 16), u64::from_str_radix(size, 16))
        {
            map.insert(name.to_string(), (addr, size));
        }
    }
    if map.is_empty() {
        bail!("{} has no function symbols (stripped?)", bin.display());
    }
    Ok(map)
}

fn workload() -> Result<clrprobe_tests::Running> {
    let mut w = Workload::new("Bench", Runtime::Net8).arg("cpu").arg(30.0).arg(1.5);
    w.ready_timeout = Duration::from_secs(120);
    w.start().context("starting the Bench workload")
}

/// `record -p PID --cpu -F 99 -d 6s`, as `cargo xtask bench-memory` measures it.
fn record_args(pid: u32, tmp: &Path) -> Vec<String> {
    ["record", "--quiet", "-F", "99", "-d", "6s", "-p", &pid.to_string(), "-o"]
        .iter()
        .map(|s| s.to_string())
        .chain([tmp.join("p").display().to_string(), "--cpu".into()])
        .collect()
}

/// One `record -p --cpu` of a fresh Bench workload, run under `tool ARGS… bin`; the workload
/// is stopped whatever the outcome.
fn under_tool(tool: &str, args: &[String], bin: &Path, tmp: &Path) -> Result<()> {
    let mut w = workload()?;
    let status = Command::new(tool)
        .args(args)
        .arg(bin)
        .args(record_args(w.pid, tmp))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("running {tool}"));
    w.kill();
    let status = status?;
    if !status.success() {
        bail!("clrprobe under {tool} failed ({status})");
    }
    Ok(())
}

/// Functions of `bin` callgrind saw run in one recording: the phases each ran in (bits A 1,
/// B 2, C 4; see [`by_phase`]) and the first dump that counts it.
fn callgrind_phases(bin: &Path, tmp: &Path, text: &HashMap<String, (u64, u64)>) -> Result<HashMap<String, (u8, usize)>> {
    let cg = tmp.join("cg");
    under_tool(
        "valgrind",
        &["--tool=callgrind".into(), "--demangle=no".into(), "--dump-every-bb=1000000".into(), format!("--callgrind-out-file={}.%p", cg.display())],
        bin,
        tmp,
    )?;
    // cg.PID.1, cg.PID.2, … then cg.PID (the counts at exit). The guardian, forked at start,
    // writes its own cg.PID2 (and is not this process's memory): take the files of the pid
    // with the most dumps.
    let mut by_pid: HashMap<String, Vec<(u64, PathBuf)>> = HashMap::new();
    for e in std::fs::read_dir(tmp)? {
        let p = e?.path();
        let Some(name) = p.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix("cg.")) else { continue };
        let (pid, part) = match name.split_once('.') {
            Some((pid, part)) => (pid.to_string(), part.parse().unwrap_or(u64::MAX)),
            None => (name.to_string(), u64::MAX),
        };
        by_pid.entry(pid).or_default().push((part, p));
    }
    let mut files = by_pid.into_values().max_by_key(|v| v.len()).context("callgrind wrote no output")?;
    files.sort();
    let own = bin.file_name().and_then(|n| n.to_str()).unwrap_or("clrprobe").to_string();
    // Per function: the dumps it runs in, in order of its first.
    let mut uses: Vec<(String, Vec<usize>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (dump, (_, file)) in files.iter().enumerate() {
        for f in callgrind_functions(&std::fs::read_to_string(file)?, &own) {
            if !text.contains_key(&f) {
                continue;
            }
            let i = *index.entry(f.clone()).or_insert_with(|| {
                uses.push((f, Vec::new()));
                uses.len() - 1
            });
            if uses[i].1.last() != Some(&dump) {
                uses[i].1.push(dump);
            }
        }
    }
    Ok(phases_of(uses))
}

const GROUPS: [(&str, u8); 7] = [("A", 1), ("AB", 3), ("B", 2), ("BC", 6), ("ABC", 7), ("AC", 5), ("C", 4)];

/// The phases each function ran in. `own_pages::release_code` gives the code back after
/// set-up (A), during the first seconds of recording (B) and before the profile is built (C);
/// after each, only code run from then on is resident again. Without release_code in the dumps
/// (renamed?) every function counts as set-up's, which leaves the first-run order.
fn phases_of(uses: Vec<(String, Vec<usize>)>) -> HashMap<String, (u8, usize)> {
    let release = uses.iter().find(|(f, _)| f.contains("9own_pages12release_code")).map(|(_, d)| d.clone());
    let bounds = release.as_ref().and_then(|d| Some((*d.first()?, *d.last()?)));
    if bounds.is_none() {
        eprintln!("own_pages::release_code did not run under callgrind: functions in first-run order");
    }
    let (a_end, c_start) = bounds.unwrap_or((usize::MAX, usize::MAX));
    uses.into_iter()
        .map(|(f, d)| {
            let mut g = 0;
            if d.iter().any(|&x| x <= a_end) {
                g |= 1;
            }
            if d.iter().any(|&x| x > a_end && x < c_start) {
                g |= 2;
            }
            if d.iter().any(|&x| x >= c_start) {
                g |= 4;
            }
            (f, (g, d[0]))
        })
        .collect()
}

/// Groups A, AB, B, BC, ABC, AC, C (each in first-run order): what recording runs stays
/// together, and what building the profile runs, so each phase faults in only the 64 KiB
/// blocks of its own code.
fn by_phase(phases: HashMap<String, (u8, usize)>) -> Vec<String> {
    let mut keyed: Vec<(usize, usize, String)> = phases
        .into_iter()
        .map(|(f, (g, first))| (GROUPS.iter().position(|x| x.1 == g).unwrap_or(GROUPS.len()), first, f))
        .collect();
    keyed.sort();
    let mut counts = [0usize; GROUPS.len()];
    for (g, _, _) in &keyed {
        if let Some(c) = counts.get_mut(*g) {
            *c += 1;
        }
    }
    eprintln!(
        "callgrind: functions by phase (A set-up, B recording, C build): {:?}",
        GROUPS.iter().map(|g| g.0).zip(counts).collect::<Vec<_>>()
    );
    keyed.into_iter().map(|(_, _, f)| f).collect()
}

/// The functions of object `own` that have costs in one callgrind dump, in file order.
/// Names are compressed: `fn=(N) name` the first time, `fn=(N)` after.
fn callgrind_functions(dump: &str, own: &str) -> Vec<String> {
    let mut objects: HashMap<&str, &str> = HashMap::new();
    let mut fns: HashMap<&str, &str> = HashMap::new();
    let mut in_own = false;
    let mut out = Vec::new();
    for line in dump.lines() {
        if let Some(v) = line.strip_prefix("ob=") {
            let (id, name) = split(v);
            if let Some(name) = name {
                objects.insert(id, name);
            }
            in_own = objects.get(id).or(name.as_ref()).is_some_and(|o| o.ends_with(own));
        } else if let Some(v) = line.strip_prefix("cob=") {
            if let (id, Some(name)) = split(v) {
                objects.insert(id, name);
            }
        } else if let Some(v) = line.strip_prefix("cfn=") {
            if let (id, Some(name)) = split(v) {
                fns.insert(id, name);
            }
        } else if let Some(v) = line.strip_prefix("fn=") {
            let (id, name) = split(v);
            if let Some(name) = name {
                fns.insert(id, name);
            }
            if in_own && let Some(name) = fns.get(id).copied().or(name) {
                // Callgrind marks recursion levels `name'2`.
                let name = name.rsplit_once('\'').map_or(name, |(n, lvl)| if lvl.parse::<u32>().is_ok() { n } else { name });
                out.push(name.to_string());
            }
        }
    }
    out
}

/// `(N) name`, `(N)` or `name` -> (N, name).
fn split(v: &str) -> (&str, Option<&str>) {
    match v.strip_prefix('(').and_then(|r| r.split_once(')')) {
        Some((id, rest)) => (id, Some(rest.trim()).filter(|r| !r.is_empty())),
        None => ("", Some(v.trim())),
    }
}

/// Functions of `bin` whose code faulted in during a native recording, in fault order
/// (clrprobe's own process; the guardian it forks is left out).
fn fault_order(bin: &Path, tmp: &Path, text: &HashMap<String, (u64, u64)>) -> Result<Vec<String>> {
    // The executable segment: file offset and address.
    let headers = util::output(Command::new("readelf").args(["-lW"]).arg(bin)).context("readelf -l")?;
    let (seg_off, seg_addr) = headers
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.first() == Some(&"LOAD") && f.len() >= 8 && f[6..f.len() - 1].join("").contains('E'))
        .and_then(|f| Some((u64::from_str_radix(f[1].trim_start_matches("0x"), 16).ok()?, u64::from_str_radix(f[2].trim_start_matches("0x"), 16).ok()?)))
        .context("no executable LOAD segment")?;
    let data = tmp.join("pf.data");
    under_tool(
        "perf",
        &["record".into(), "-q".into(), "-e".into(), "exceptions:page_fault_user".into(), "-o".into(), data.display().to_string(), "--".into()],
        bin,
        tmp,
    )?;
    let script = util::output(Command::new("perf").args(["script", "--show-mmap-events", "-F", "pid,tid,trace", "-i"]).arg(&data))
        .context("perf script")?;
    let mut sorted: Vec<(u64, u64, &str)> = text.iter().map(|(n, &(a, s))| (a, s, n.as_str())).collect();
    sorted.sort();
    let own = bin.display().to_string();
    // (pid, start, length, file offset) of the binary's executable mapping.
    let mut map: Option<(String, u64, u64, u64)> = None;
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    for line in script.lines() {
        let pid = line.split_whitespace().next().and_then(|p| p.split('/').next()).unwrap_or("");
        if line.contains("PERF_RECORD_MMAP") {
            if map.is_none() && line.contains("r-xp") && line.trim_end().ends_with(&own) {
                // [0xSTART(0xLEN) @ 0xOFF ...
                let parse = || -> Option<(u64, u64, u64)> {
                    let r = line.split_once('[')?.1;
                    let (start, r) = r.split_once('(')?;
                    let (len, r) = r.split_once(')')?;
                    let off = r.trim_start().strip_prefix('@')?.split_whitespace().next()?;
                    Some((hex(start)?, hex(len)?, hex(off)?))
                };
                if let Some((s, l, o)) = parse() {
                    map = Some((pid.to_string(), s, l, o));
                }
            }
            continue;
        }
        let Some((ref mpid, start, len, off)) = map else { continue };
        if pid != mpid {
            continue;
        }
        let Some(addr) = line.split_whitespace().find_map(|t| t.strip_prefix("address=")).and_then(hex) else { continue };
        if addr < start || addr >= start + len {
            continue;
        }
        let va = addr - start + off - seg_off + seg_addr;
        let i = sorted.partition_point(|&(a, _, _)| a <= va);
        if i > 0 && va < sorted[i - 1].0 + sorted[i - 1].1.max(1) && seen.insert(sorted[i - 1].2) {
            order.push(sorted[i - 1].2.to_string());
        }
    }
    if map.is_none() {
        bail!("perf recorded no mapping of {}", bin.display());
    }
    Ok(order)
}
