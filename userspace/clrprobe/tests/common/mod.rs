//! Helpers shared by the live tests of `clrprobe record`.
// Each test binary that includes this module uses only some of it.
#![allow(dead_code)]
use std::{process::Command, time::Duration};

use clrprobe_profile::Profile;
use clrprobe_tests::Running;
use serde_json::Value;

/// Records `w` (attached) until it exits; returns the JSON summary and the profile read back
/// from every kind's pprof.
pub fn record_until_exit(w: &mut Running, name: &str, kinds: &[&str]) -> (Value, Profile) {
    let dir = clrprobe_tests::scratch_dir(&format!("record-{name}"));
    let prefix = dir.join("p");
    let out = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args(["record", "--json", "--quiet", "--format", "pprof", "-p", &w.pid.to_string(), "-o"])
        .arg(&prefix)
        .args(kinds)
        .output()
        .expect("run clrprobe record");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    w.wait(Duration::from_secs(20));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let profile = clrprobe::report::load(std::slice::from_ref(&prefix)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (summary, profile)
}

/// CPU samples whose stack has a frame named `name`.
pub fn samples_with(p: &Profile, name: &str) -> i64 {
    let col = p.sample_type_index("cpu").expect("cpu kind");
    p.samples()
        .filter(|s| p.stack(s.stack).unwrap().iter().any(|&f| &*p.frame(f).unwrap().name == name))
        .map(|s| s.values[col])
        .sum()
}

/// Every `PREFIX.KIND.pb.gz` (and the events file) as one profile.
pub fn read(prefix: &std::path::Path) -> Profile {
    clrprobe::report::load(&[prefix.to_path_buf()]).unwrap_or_else(|e| panic!("{}: {e}", prefix.display()))
}
