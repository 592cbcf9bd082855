//! `clrprobe doctor` reports the real machine: as root everything BPF needs is there; as an
//! unprivileged user it names what is missing and exits non-zero.
use std::{os::unix::fs::PermissionsExt, process::Command};

use clrprobe_tests::require_root;
use serde_json::Value;

fn status_of<'a>(v: &'a Value, name: &str) -> &'a str {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {v}"))["status"]
        .as_str()
        .unwrap()
}

#[test]
fn doctor_as_root_finds_everything_bpf_needs() {
    require_root();
    let out = Command::new(env!("CARGO_BIN_EXE_clrprobe")).args(["doctor", "--json"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for name in ["kernel", "CAP_BPF", "CAP_PERFMON", "CAP_SYS_ADMIN", "perf_event_paranoid", "bpf() syscall", "perf_event_open", "uprobe PMU", "BTF"] {
        assert_eq!(status_of(&v, name), "ok", "{name}: {v}");
    }
    assert!(out.status.success(), "{v}");
}

#[test]
fn doctor_without_privileges_names_what_is_missing() {
    require_root();
    // Copy the binary where an unprivileged user can execute it (the target dir may be under
    // /root), then run it as nobody with no capabilities.
    let dir = clrprobe_tests::scratch_dir("doctor");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join("clrprobe");
    std::fs::copy(env!("CARGO_BIN_EXE_clrprobe"), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
        .arg(&bin)
        .arg("doctor")
        .output()
        .expect("setpriv (util-linux) runs");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "doctor must fail without privileges:\n{text}");
    for line in ["MISSING CAP_BPF", "MISSING CAP_PERFMON", "MISSING bpf() syscall", "MISSING perf_event_open"] {
        assert!(text.contains(line), "expected {line:?} in:\n{text}");
    }
    assert!(text.contains("fix: run as root (sudo"), "a one-line fix is printed:\n{text}");
}
