//! `cargo xtask demo`: the main job on the bundled sample app, and the README's example
//! output from that real run.
//!
//! Runs `clrprobe record -p PID -d Ns -o out/demo` (every kind) on the sample app
//! `tests/workloads/Mixed.cs` (a hot loop that allocates and throws, a thread holding a lock,
//! a thread waiting for it) on .NET 8, then `clrprobe report out/demo --top 3`, and prints
//! both outputs and the list of files as one Markdown block, also written to
//! `out/demo-readme.md`.
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{Context, Result};
use clrprobe_tests::{Runtime, Workload};

use crate::{dotnet, ebpf, util};

pub fn run(seconds: u32) -> Result<()> {
    dotnet::setup()?;
    let bin = ebpf::build_userspace()?;
    // SAFETY: the cache dir the test bed reads is the one xtask filled.
    unsafe { std::env::set_var("CLRPROBE_CACHE", crate::cache::dir()) };
    let root = util::root();
    let out_dir = root.join("out");
    std::fs::create_dir_all(&out_dir)?;
    remove_old(&out_dir)?;
    let app = Workload::new("Mixed", Runtime::Net8)
        .arg(seconds + 4)
        .start()
        .context("starting the sample app (tests/workloads/Mixed.cs) on .NET 8")?;
    eprintln!("xtask demo: sample app running as pid {} on .NET {}", app.pid, Runtime::Net8.version());
    let load_before = load_average();
    let record_args: Vec<String> =
        ["record", "-p", &app.pid.to_string(), "-d", &format!("{seconds}s"), "-o", "out/demo"].iter().map(|s| s.to_string()).collect();
    let record = if util::is_root() {
        Command::new(&bin).args(&record_args).current_dir(&root).output()?
    } else {
        Command::new("sudo").arg(&bin).args(&record_args).current_dir(&root).output()?
    };
    drop(app);
    std::thread::sleep(Duration::from_millis(10));
    let load_after = load_average();
    anyhow::ensure!(record.status.success(), "clrprobe record exited with {}: {}", record.status, String::from_utf8_lossy(&record.stderr));
    let report_args = ["report", "out/demo", "--top", "3"];
    let report = Command::new(&bin).args(report_args).current_dir(&root).output()?;
    anyhow::ensure!(report.status.success(), "clrprobe report exited with {}: {}", report.status, String::from_utf8_lossy(&report.stderr));

    let mut block = String::new();
    block.push_str(&format!(
        "Example (`cargo xtask demo` on the development machine, 2 cores, load average {load_before:.1} before / {load_after:.1} after, .NET {}; the sample app is `tests/workloads/Mixed.cs`):\n\n```\n",
        Runtime::Net8.version()
    ));
    block.push_str(&format!("$ sudo clrprobe {}\n", record_args.join(" ")));
    block.push_str(&terminal_text(&record));
    block.push_str(&format!("$ clrprobe {}\n", report_args.join(" ")));
    block.push_str(&terminal_text(&report));
    block.push_str("$ ls -s --block-size=K out/\n");
    block.push_str(&file_list(&out_dir)?);
    block.push_str("```\n");
    std::fs::write(out_dir.join("demo-readme.md"), &block)?;
    println!("{block}");
    eprintln!(
        "xtask demo: outputs are in {} (open demo.cpu.svg in a browser, demo.cpu.firefox.json in https://profiler.firefox.com, demo.cpu.pb.gz with `go tool pprof`, `clrprobe report out/demo` for every kind); this text is in out/demo-readme.md",
        out_dir.display()
    );
    Ok(())
}

/// What a terminal would show of the command's output: stderr then stdout, a status line
/// rewritten with `\r` only in its last state.
fn terminal_text(o: &Output) -> String {
    let mut text = String::new();
    for part in [&o.stderr, &o.stdout] {
        for line in String::from_utf8_lossy(part).lines() {
            let shown = line.rsplit('\r').next().unwrap_or("").trim_end();
            text.push_str(shown);
            text.push('\n');
        }
    }
    text
}

/// `out/demo.*` and their sizes in KiB, as `ls -s` shows them.
fn file_list(dir: &Path) -> Result<String> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let meta = e.metadata().ok()?;
            (name.starts_with("demo.") && meta.is_file()).then_some((name, meta.len()))
        })
        .collect();
    files.sort();
    Ok(files.iter().map(|(n, len)| format!("{:>6}K {n}\n", len.div_ceil(1024))).collect())
}

/// Outputs of an earlier demo, so the list shows this run's files only.
fn remove_old(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir)?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("demo.") || name == "demo-readme.md" {
            std::fs::remove_file(e.path()).with_context(|| format!("removing {}", e.path().display()))?;
        }
    }
    Ok(())
}

fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg").ok().and_then(|s| s.split_whitespace().next()?.parse().ok()).unwrap_or(f64::NAN)
}
