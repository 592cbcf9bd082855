//! Snapshot files: written whole or not at all, read back with a one-line error.
use std::{
    fs::File,
    io::{BufWriter, Write},
    path::Path,
};

use anyhow::Context;
use clrprobe_pipeline::heap::HeapSummary;

/// Writes `path` through a temporary file in the same directory, renamed into place once
/// complete: an interrupted or failed write leaves no partial file.
pub fn write_atomically(path: &Path, body: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>) -> anyhow::Result<()> {
    let name = path.file_name().with_context(|| format!("{}: not a file name", path.display()))?;
    let tmp = path.with_file_name(format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id()));
    let result = (|| -> std::io::Result<()> {
        // create_new: never follow or reuse something already at the temporary path.
        let file = File::options().write(true).create_new(true).open(&tmp)?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        body(&mut w)?;
        w.flush()?;
        w.get_ref().sync_all()?;
        drop(w);
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {} (check the directory exists and is writable)", path.display()));
    }
    Ok(())
}

/// Reads a `PREFIX.heap.json` written by `clrprobe heap`.
pub fn read_snapshot(path: &Path) -> anyhow::Result<HeapSummary> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&text)
        .with_context(|| format!("{} is not a snapshot written by `clrprobe heap` (expected PREFIX.heap.json)", path.display()))
}
