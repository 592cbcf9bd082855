//! Building the BPF programs: nightly + rust-src + bpf-linker 0.10.3, `-Z build-std=core`.
use std::{path::PathBuf, process::Command};

use anyhow::{Context, Result, bail};

use crate::util::{self, check, output};

const NIGHTLY: &str = "nightly";
const BPF_LINKER_VERSION: &str = "0.10.3";
const BPF_TARGET: &str = "bpfel-unknown-none";

/// A command that runs `program` on the nightly toolchain, with the outer toolchain's
/// environment removed so rustup picks nightly for every nested tool.
fn nightly(program: &str) -> Command {
    let mut c = Command::new("rustup");
    c.args(["run", NIGHTLY, program]);
    for v in ["RUSTUP_TOOLCHAIN", "RUSTC", "RUSTC_WRAPPER", "RUSTDOC", "CARGO", "RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS"] {
        c.env_remove(v);
    }
    c.current_dir(util::root());
    c
}

fn ensure_nightly() -> Result<()> {
    let have = output(Command::new("rustup").args(["toolchain", "list"]))
        .context("rustup is needed to build the BPF programs: install it from your distribution or rustup.rs")?
        .lines()
        .any(|l| l.starts_with("nightly"));
    if !have {
        eprintln!("xtask: installing the nightly toolchain (needed for -Z build-std)");
        check(
            Command::new("rustup").args(["toolchain", "install", NIGHTLY, "--profile", "minimal"]),
            "rustup toolchain install nightly",
        )
        .context("no nightly toolchain and it could not be installed; install one with `rustup toolchain install nightly`")?;
    }
    let comps = output(Command::new("rustup").args(["component", "list", "--installed", "--toolchain", NIGHTLY]))
        .unwrap_or_default();
    if !comps.lines().any(|l| l.starts_with("rust-src")) {
        eprintln!("xtask: adding rust-src to nightly");
        check(
            Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", NIGHTLY]),
            "rustup component add rust-src",
        )
        .context("could not add rust-src; run `rustup component add rust-src --toolchain nightly`")?;
    }
    Ok(())
}

fn ensure_bpf_linker() -> Result<()> {
    let version = output(Command::new("bpf-linker").arg("--version")).unwrap_or_default();
    if version.contains(BPF_LINKER_VERSION) {
        return Ok(());
    }
    eprintln!("xtask: installing bpf-linker {BPF_LINKER_VERSION} (uses rustc's LLVM; takes a few minutes once)");
    // Installed with the stable toolchain; its default features load rustc's LLVM at run time.
    let mut c = Command::new("cargo");
    c.args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION, "--locked"]);
    c.env_remove("RUSTUP_TOOLCHAIN");
    check(&mut c, "cargo install bpf-linker").with_context(|| {
        format!("could not install bpf-linker; run `cargo install bpf-linker --version {BPF_LINKER_VERSION} --locked`")
    })?;
    let version = output(Command::new("bpf-linker").arg("--version")).unwrap_or_default();
    if !version.contains(BPF_LINKER_VERSION) {
        bail!("bpf-linker {BPF_LINKER_VERSION} installed but `bpf-linker --version` says {version:?}: is ~/.cargo/bin on PATH?");
    }
    Ok(())
}

/// Builds the BPF object and returns its path.
pub fn build() -> Result<PathBuf> {
    ensure_nightly()?;
    ensure_bpf_linker()?;
    let mut c = nightly("cargo");
    c.args(["build", "--package", "clrprobe-ebpf", "--release", "--target", BPF_TARGET, "-Z", "build-std=core"])
        // The workspace's release profile sizes the userspace binary (fat LTO, one codegen unit,
        // dependencies at opt-level "s"); the BPF object keeps cargo's defaults.
        .args(["--config", "profile.release.lto=false", "--config", "profile.release.codegen-units=16"])
        .args(["--config", "profile.release.package.\"*\".opt-level=3"])
        // BTF for the programs (bpf-linker emits it from the debug info).
        .env("CARGO_ENCODED_RUSTFLAGS", ["-Cdebuginfo=2", "-Clink-arg=--btf"].join("\x1f"))
        .env("CARGO_TARGET_DIR", util::target_dir());
    check(&mut c, "building the BPF programs")?;
    let obj = util::target_dir().join(BPF_TARGET).join("release").join("clrprobe-ebpf");
    if !obj.is_file() {
        bail!("the BPF build succeeded but {} is missing", obj.display());
    }
    eprintln!("xtask: BPF object {}", obj.display());
    Ok(obj)
}

/// Builds the BPF object and `clrprobe` (release) with it embedded; returns the binary.
/// `BENCH_BIN=PATH` skips the builds and returns that binary (to measure another build).
pub fn build_userspace() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("BENCH_BIN") {
        let bin = PathBuf::from(bin);
        if !bin.is_file() {
            bail!("BENCH_BIN={} is not a file", bin.display());
        }
        eprintln!("xtask: BENCH_BIN {}", bin.display());
        return Ok(bin);
    }
    let obj = build()?;
    let mut c = util::cargo();
    c.args(["build", "--release", "--package", "clrprobe", "--bin", "clrprobe"]).env("CLRPROBE_BPF_OBJ", &obj);
    check(&mut c, "building clrprobe")?;
    Ok(util::target_dir().join("release").join("clrprobe"))
}
