//! Live: .NET 8.0.4 writes `FirstSecondApp::FirstSecon(int64)` in its perf map for the method
//! `FirstSecond` (dotnet/runtime#102938); the symbolizer completes it from the assembly's
//! metadata, and leaves names that are whole as written.
#![cfg(target_os = "linux")]

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clrprobe_symbolizer::{ImageCache, ProcessSymbolizer};
use clrprobe_tests::{Runtime, Workload};

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let pid = self.0.id();
        for f in [format!("/tmp/perf-{pid}.map"), format!("/tmp/perfinfo-{pid}.map"), format!("/tmp/jit-{pid}.dump")] {
            let _ = std::fs::remove_file(f);
        }
    }
}

#[test]
fn names_the_net8_perf_map_cuts_short_are_completed_from_metadata() {
    clrprobe_tests::require_root();
    // About 20 s of loop in FirstSecond: alive while we look.
    let mut cmd = Workload::new("FirstSecond", Runtime::Net8).arg(3000).command().unwrap();
    let child = cmd.env("DOTNET_PerfMapEnabled", "1").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let pid = child.id();
    let _child = Killed(child);
    let map = format!("/tmp/perf-{pid}.map");
    let deadline = Instant::now() + Duration::from_secs(30);
    let record = loop {
        let text = std::fs::read_to_string(&map).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains("FirstSecondApp::FirstSecon") && l.contains("[QuickJitted]")) {
            break line.to_string();
        }
        assert!(Instant::now() < deadline, "no FirstSecond record in {map} after 30 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    // The runtime's bug, as this test relies on it (a fixed runtime would make the test moot).
    assert!(record.contains("FirstSecondApp::FirstSecon(int64)"), "the runtime wrote the name whole: {record}");
    let addr = u64::from_str_radix(record.split_whitespace().next().unwrap().trim_start_matches("0x"), 16).unwrap();
    let main = std::fs::read_to_string(&map).unwrap().lines().find(|l| l.contains("FirstSecondApp::Main(")).map(|l| {
        u64::from_str_radix(l.split_whitespace().next().unwrap().trim_start_matches("0x"), 16).unwrap()
    });

    let mut s = ProcessSymbolizer::with_cache(pid, Arc::new(ImageCache::new())).unwrap();
    s.refresh_perf_map().unwrap();
    let frames = s.symbolize(&[addr + 4, main.expect("Main in the perf map") + 4]);
    assert_eq!(frames[0].name, "FirstSecondApp::FirstSecond", "{:?}", frames[0]);
    assert_eq!(frames[0].module.as_deref(), Some("FirstSecond"));
    assert_eq!(frames[0].tier.as_deref(), Some("QuickJitted"));
    // A whole name stays as written.
    assert_eq!(frames[1].name, "FirstSecondApp::Main", "{:?}", frames[1]);
}
