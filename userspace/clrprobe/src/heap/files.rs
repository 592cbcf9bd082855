//! Snapshot files: written whole or not at all, read back with a one-line error.
use std::{
    fs::File,
    io::BufWriter,
    path::Path,
};

use anyhow::Context;
use clrprobe_pipeline::heap::HeapSummary;

/// Writes `path` safely (no link followed, a temporary file renamed into place once complete;
/// see `clrprobe_profile::safe_file`): an interrupted or failed write leaves no partial file.
pub fn write_atomically(path: &Path, body: impl FnOnce(&mut BufWriter<&mut File>) -> std::io::Result<()>) -> anyhow::Result<()> {
    clrprobe_profile::safe_file::write_file(path, body)
        .with_context(|| format!("writing {} (check the directory exists and is writable)", path.display()))
}

/// Reads a `PREFIX.heap.json` written by `clrprobe heap`.
pub fn read_snapshot(path: &Path) -> anyhow::Result<HeapSummary> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&text)
        .with_context(|| format!("{} is not a snapshot written by `clrprobe heap` (expected PREFIX.heap.json)", path.display()))
}
