//! `cargo xtask demo`: the main job on the bundled sample app.
use std::time::Duration;

use anyhow::{Context, Result};
use clrprobe_tests::{Runtime, Workload};

use crate::{dotnet, ebpf, util};

pub fn run(seconds: u32) -> Result<()> {
    dotnet::setup()?;
    let bin = ebpf::build_userspace()?;
    // SAFETY: the cache dir the test bed reads is the one xtask filled.
    unsafe { std::env::set_var("CLRPROBE_CACHE", crate::cache::dir()) };
    let app = Workload::new("Cpu", Runtime::Net8)
        .arg(seconds + 3)
        .start()
        .context("starting the sample app (tests/workloads/Cpu.cs) on .NET 8")?;
    eprintln!("xtask demo: sample app running as pid {} on .NET {}", app.pid, Runtime::Net8.version());
    let out_dir = util::root().join("out");
    std::fs::create_dir_all(&out_dir)?;
    let prefix = out_dir.join("demo");
    let args: Vec<String> = vec![
        "record".into(),
        "-p".into(),
        app.pid.to_string(),
        "--duration".into(),
        seconds.to_string(),
        "-o".into(),
        prefix.display().to_string(),
        "--format".into(),
        "pprof,folded,svg,firefox,speedscope".into(),
    ];
    let status = if util::is_root() {
        std::process::Command::new(&bin).args(&args).status()?
    } else {
        std::process::Command::new("sudo").arg(&bin).args(&args).status()?
    };
    drop(app);
    std::thread::sleep(Duration::from_millis(10));
    anyhow::ensure!(status.success(), "clrprobe exited with {status}");
    eprintln!("xtask demo: outputs are in {} (open demo.cpu.svg in a browser, demo.cpu.firefox.json in https://profiler.firefox.com, demo.cpu.pb.gz with `go tool pprof`, `clrprobe report out/demo` for every kind)", out_dir.display());
    Ok(())
}
