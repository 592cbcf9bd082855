//! Where downloaded and built test-bed parts are kept between runs.
use std::path::PathBuf;

/// `$CLRPROBE_CACHE`, else `$XDG_CACHE_HOME/clrprobe`, else `~/.cache/clrprobe`.
/// The test bed (`clrprobe-tests`) resolves the same directory.
pub fn dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CLRPROBE_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("clrprobe");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache").join("clrprobe")
}
