//! Type-checking the Windows build (no Windows machine here: `cargo check` only).
use std::process::Command;

use anyhow::{Context, Result};

use crate::util::{self, output};

const TARGET: &str = "x86_64-pc-windows-gnu";
/// Crates that build for Windows.
const CRATES: &[&str] = &[
    "clrprobe",
    "clrprobe-etw",
    "clr-events",
    "clrprobe-profile",
    "clrprobe-pipeline",
    "clrprobe-eventpipe",
    "clrprobe-symbolizer",
];

pub fn check() -> Result<()> {
    let installed = output(Command::new("rustup").args(["target", "list", "--installed"])).unwrap_or_default();
    if !installed.lines().any(|l| l.trim() == TARGET) {
        eprintln!("xtask: adding the {TARGET} target (type-checking the Windows build)");
        util::check(Command::new("rustup").args(["target", "add", TARGET]), "rustup target add")
            .with_context(|| format!("run `rustup target add {TARGET}`"))?;
    }
    // clippy type-checks like `cargo check` and lints the Windows-only code paths too.
    let mut c = util::cargo();
    c.args(["clippy", "--target", TARGET]);
    for k in CRATES {
        c.args(["--package", k]);
    }
    c.args(["--", "-D", "warnings"]);
    util::check(&mut c, "cargo clippy for Windows (x86_64-pc-windows-gnu)")
}
