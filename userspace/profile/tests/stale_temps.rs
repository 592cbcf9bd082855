//! Temporary files a killed clrprobe left (`.NAME.PID.N.tmp`) are removed when the output
//! directory is opened again: only regular files of the output's own names, of a pid that is no
//! running clrprobe; links, other names and other patterns stay.
#![cfg(unix)]
use std::ffi::OsStr;

use clrprobe_profile::safe_file::OutputDir;

#[test]
fn stale_temporary_outputs_are_removed_and_nothing_else() {
    let d = clrprobe_tests::scratch_dir("stale");
    // A pid that is no process: the highest possible one.
    let dead = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse::<u32>().unwrap() - 1;
    let stale = format!(".host.cpu.pb.gz.{dead}.0.tmp");
    for name in [stale.as_str(), ".other.cpu.pb.gz.1.0.tmp", ".host.notes.tmp", "host.cpu.pb.gz"] {
        std::fs::write(d.join(name), b"x").unwrap();
    }
    std::fs::write(d.join("target"), b"keep").unwrap();
    let link = format!(".host.folded.{dead}.1.tmp");
    std::os::unix::fs::symlink(d.join("target"), d.join(&link)).unwrap();
    let dir = OutputDir::open(&d).unwrap();
    let removed = dir.remove_stale_temps(OsStr::new("host"));
    assert_eq!(removed, vec![std::ffi::OsString::from(&stale)]);
    for kept in [".other.cpu.pb.gz.1.0.tmp", ".host.notes.tmp", "host.cpu.pb.gz", link.as_str(), "target"] {
        assert!(d.join(kept).symlink_metadata().is_ok(), "{kept} kept");
    }
    assert_eq!(std::fs::read(d.join("target")).unwrap(), b"keep");
    let _ = std::fs::remove_dir_all(&d);
}
