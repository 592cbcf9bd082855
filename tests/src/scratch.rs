//! Scratch space for tests that run as root: each directory is made new under `$TMPDIR` with a
//! random name and mode 0700 (mkdtemp), so nothing a local user planted in /tmp beforehand — a
//! link, a directory of theirs, a FIFO — is followed, reused or written into. A fixed name such
//! as `/tmp/clrprobe-NAME-PID` is predictable and would be.
use std::path::PathBuf;

/// A new, empty, private directory `$TMPDIR/clrprobe-TAG-XXXXXX`. Kept after the test (tests
/// remove it when they are done with it, or leave it to be looked at after a failure).
pub fn scratch_dir(tag: &str) -> PathBuf {
    // tempfile's default mode is 0777 less the umask (0755 here): ask for 0700 as mkdtemp gives.
    tempfile::Builder::new()
        .prefix(&format!("clrprobe-{tag}-"))
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir()
        .unwrap_or_else(|e| panic!("making a scratch directory under {}: {e}", std::env::temp_dir().display()))
        .keep()
}

/// A path named `name` inside a new private scratch directory (see [`scratch_dir`]); the file is
/// not created.
pub fn scratch_file(tag: &str, name: &str) -> PathBuf {
    scratch_dir(tag).join(name)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// Each call makes a different directory, owned by us, mode 0700 (not tempfile's default
    /// 0777 less the umask), not a link.
    #[test]
    fn scratch_dirs_are_new_and_private() {
        let (a, b) = (super::scratch_dir("t"), super::scratch_dir("t"));
        assert_ne!(a, b);
        for d in [&a, &b] {
            let m = std::fs::symlink_metadata(d).unwrap();
            assert!(m.file_type().is_dir());
            assert_eq!(m.permissions().mode() & 0o777, 0o700);
            assert_eq!(m.uid(), unsafe { libc::geteuid() });
            assert!(d.file_name().unwrap().to_str().unwrap().starts_with("clrprobe-t-"));
            std::fs::remove_dir(d).unwrap();
        }
    }
}
