//! speedscope's own file-format schema (npm package `speedscope`, `dist/release/
//! file-format-schema.json`) for the test that validates clrprobe's speedscope files, and
//! Debian's python3-jsonschema to validate with.
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};

use crate::{cache, util};

/// The npm package version whose schema the tests use.
pub const VERSION: &str = "1.25.0";

/// Where the tests find the schema (`$CLRPROBE_CACHE/speedscope-VERSION/file-format-schema.json`).
pub fn schema_path() -> PathBuf {
    cache::dir().join(format!("speedscope-{VERSION}")).join("file-format-schema.json")
}

/// Fetches the schema with `npm pack` once (idempotent) and makes sure `jsonschema` imports.
pub fn setup() -> Result<()> {
    util::ensure_apt("npm", "npm", "npm pack fetches speedscope's file-format schema for a test")?;
    let have_jsonschema = || Command::new("python3").args(["-c", "import jsonschema"]).status().is_ok_and(|s| s.success());
    if !have_jsonschema() {
        eprintln!("xtask: installing python3-jsonschema from Debian (validates speedscope files against the schema)");
        util::check(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends", "python3-jsonschema"])
                .env("DEBIAN_FRONTEND", "noninteractive"),
            "apt-get install python3-jsonschema",
        )?;
    }
    let schema = schema_path();
    if schema.is_file() {
        return Ok(());
    }
    let dir = schema.parent().context("schema dir")?.to_path_buf();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    eprintln!("xtask: fetching speedscope@{VERSION}'s file-format schema (npm pack)");
    util::check(
        Command::new("npm").args(["pack", "--silent", &format!("speedscope@{VERSION}")]).current_dir(&dir),
        "npm pack speedscope",
    )?;
    let tgz = dir.join(format!("speedscope-{VERSION}.tgz"));
    util::check(
        Command::new("tar").arg("-xzf").arg(&tgz).args(["-C"]).arg(&dir).args(["--strip-components=3", "package/dist/release/file-format-schema.json"]),
        "unpacking speedscope's schema",
    )?;
    let _ = std::fs::remove_file(&tgz);
    anyhow::ensure!(schema.is_file(), "{} missing after unpacking speedscope@{VERSION}", schema.display());
    Ok(())
}
