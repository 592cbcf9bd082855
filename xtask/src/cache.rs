//! Where downloaded and built test-bed parts are kept between runs: the same directory the
//! test bed (`clrprobe-tests`) reads.
use std::path::PathBuf;

/// `$CLRPROBE_CACHE`, else `$XDG_CACHE_HOME/clrprobe`, else `~/.cache/clrprobe`.
pub fn dir() -> PathBuf {
    clrprobe_tests::cache_dir()
}
