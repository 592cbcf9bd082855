//! Every file writer reports a full disk as an error naming the path and the cause, and leaves
//! nothing half-written behind; devices are not written; missing directories are created.

mod common;

use std::path::Path;

use clrprobe_profile::folded::FoldedOptions;
use clrprobe_profile::speedscope::Grouping;
use clrprobe_profile::{ProfileError, firefox, folded, pprof, speedscope, svg};

/// A 64 KiB tmpfs filled to the last byte: every write runs out of space for real.
struct FullFs(std::path::PathBuf);

impl FullFs {
    fn new(name: &str) -> Self {
        let dir = common::scratch(name);
        let st = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs"]).arg(&dir).status();
        assert!(st.is_ok_and(|s| s.success()), "mounting a tmpfs at {} needs root (CI runs as root)", dir.display());
        let fs = FullFs(dir);
        let mut f = std::fs::File::create(fs.0.join("filler")).expect("filler");
        let chunk = [0u8; 4096];
        while std::io::Write::write_all(&mut f, &chunk).is_ok() {}
        fs
    }
}

impl Drop for FullFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn check(result: Result<(), ProfileError>, path: &Path, what: &str) {
    let err = result.expect_err(what);
    match &err {
        ProfileError::Write { path: p, source } => {
            assert_eq!(p, path, "{what}");
            assert_eq!(source.raw_os_error(), Some(28), "{what}: {source}"); // ENOSPC
        }
        other => panic!("{what}: expected a write error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains(&*path.to_string_lossy()), "{what}: {text}");
    assert!(text.to_lowercase().contains("no space"), "{what}: {text}");
    // Nothing half-written is left: neither the final name nor a temporary file.
    let left: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().flatten().map(|e| e.file_name()).filter(|n| n != "filler").collect();
    assert!(left.is_empty(), "{what}: left {left:?}");
}

#[test]
fn writers_report_a_full_disk_and_leave_nothing() {
    let fs = FullFs::new("full-disk");
    let out = fs.0.join("out");
    let p = common::known_profile();
    check(pprof::write_file(&p, &out), &out, "pprof");
    check(folded::write_file(&p, 0, &FoldedOptions::default(), &out), &out, "folded");
    check(svg::write_file(&p, 0, "t", &out), &out, "svg");
    check(speedscope::write_file(&p, "t", Grouping::PerThread, &out), &out, "speedscope");
    check(firefox::write_file(&p, 0, "t", &out), &out, "firefox");
}

#[test]
fn a_device_is_not_written() {
    let err = pprof::write_file(&common::known_profile(), Path::new("/dev/full")).unwrap_err();
    assert!(matches!(err, ProfileError::Output(_)), "{err:?}");
    assert!(err.to_string().contains("/dev/full is not a regular file"), "{err}");
}

#[test]
fn a_missing_directory_is_created() {
    let dir = common::scratch("missing-dir");
    let path = dir.join("a/b/out.pb.gz");
    let err = pprof::read_file(&path).unwrap_err();
    assert!(matches!(err, ProfileError::Read { .. }), "{err:?}");
    pprof::write_file(&common::known_profile(), &path).expect("writes, creating a/b");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(dir.join("a")).unwrap().permissions().mode() & 0o7777, 0o755 & !umask());
    assert!(pprof::read_file(&path).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

fn umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let m = status.lines().find_map(|l| l.strip_prefix("Umask:")).unwrap().trim();
    u32::from_str_radix(m, 8).unwrap()
}

#[test]
fn stream_writer_errors_name_the_format() {
    struct Full;
    impl std::io::Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(28))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let p = common::known_profile();
    let err = speedscope::to_writer(&p, "t", Grouping::PerKind, Full).unwrap_err();
    assert!(matches!(err, ProfileError::Stream { format: "speedscope", .. }), "{err:?}");
    let err = pprof::to_writer(&p, Full).unwrap_err();
    assert!(matches!(err, ProfileError::Stream { format: "pprof", .. }), "{err:?}");
}
