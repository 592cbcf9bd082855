//! Live: `record --save-raw DIR` on a real .NET 8 process (root), then `report --replay DIR`
//! rebuilds the profiles from the saved inputs alone — twice as an unprivileged user (uid
//! nobody, which cannot read /proc of the target or the runtime's files under /root): the
//! same bytes both times; and once more where the files are readable: the CPU profile's top
//! frames have the live recording's names.
use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use clrprobe_tests::{
    Runtime, Workload,
    outputs::{self, files, run},
    require_root,
};
use serde_json::Value;

const NOBODY: u32 = 65534;
const CLRPROBE: &str = env!("CARGO_BIN_EXE_clrprobe");

fn out_dir(name: &str) -> PathBuf {
    outputs::out_dir("replay", name)
}

fn clrprobe() -> Command {
    Command::new(CLRPROBE)
}

/// `clrprobe ARGS` as uid/gid nobody, no supplementary groups.
fn as_nobody() -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid", &NOBODY.to_string(), "--regid", &NOBODY.to_string(), "--clear-groups", "--"]).arg(CLRPROBE);
    c
}

/// Top self frames of the cpu kind as `report --json` lists them: (name, self samples).
fn cpu_top(file: &Path) -> Vec<(String, i64)> {
    outputs::top(CLRPROBE, file, Some("cpu"), 5)
}

#[test]
fn replay_of_saved_inputs_is_byte_identical_without_root_and_names_the_live_top_frames() {
    require_root();
    // The recording ends by `-d` while the workload goes on: the live recording drops the
    // runtime events stamped after its end, which the saved stream still holds (up to the
    // session's stop), and the replay cuts them at the saved end.
    let mut w = Workload::new("Mixed", Runtime::Net8).arg(30.0).start().unwrap();
    let dir = out_dir("mixed");
    let raw = dir.join("raw");
    let live = dir.join("live");
    let out = run(clrprobe().args(["record", "--quiet", "-p", &w.pid.to_string(), "-d", "4s", "-F", "499", "--format", "pprof", "-o"]).arg(&live).arg("--save-raw").arg(&raw));
    assert!(w.is_alive(), "the workload outlives the recording");
    assert!(out.contains("saved the raw inputs"), "{out}");
    for f in ["records.clrraw", &format!("{}.nettrace", w.pid)] {
        assert!(raw.join(f).is_file(), "{f} saved: {:?}", std::fs::read_dir(&raw).unwrap().flatten().map(|e| e.file_name()).collect::<Vec<_>>());
    }

    // Twice without root: nobody reads the saved directory and writes its own.
    let theirs = dir.join("nobody");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut replays = Vec::new();
    for n in ["one", "two"] {
        let prefix = theirs.join(n);
        let out = run(as_nobody().args(["report", "--replay"]).arg(&raw).arg("-o").arg(&prefix));
        assert!(out.contains("runtime events"), "{out}");
        replays.push(files(&prefix));
    }
    let kinds: Vec<&String> = replays[0].keys().collect();
    for k in ["cpu.pb.gz", "alloc.pb.gz", "exceptions.pb.gz", "contention.pb.gz", "offcpu.pb.gz", "events.json"] {
        assert!(replays[0].contains_key(k), "replay wrote {k}: {kinds:?}");
    }
    assert_eq!(replays[0].keys().collect::<Vec<_>>(), replays[1].keys().collect::<Vec<_>>());
    for (file, bytes) in &replays[0] {
        assert!(bytes == &replays[1][file], "{file}: the two replays differ");
    }

    // Where the runtime's files are readable (root here): the live names.
    let mine = dir.join("root");
    run(clrprobe().args(["report", "--replay"]).arg(&raw).arg("-o").arg(&mine));
    let live_top = cpu_top(&PathBuf::from(format!("{}.cpu.pb.gz", live.display())));
    let replay_top = cpu_top(&PathBuf::from(format!("{}.cpu.pb.gz", mine.display())));
    eprintln!("live   {live_top:?}\nreplay {replay_top:?}");
    assert!(live_top.iter().any(|(n, _)| n.contains("Mixed::Spin")), "{live_top:?}");
    let names = |t: &[(String, i64)]| t.iter().take(3).map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&live_top), names(&replay_top), "the replay's top CPU frames are the live recording's");
    // The event reports (events.json) count the same exceptions and waits.
    let report = |p: &Path| -> Value {
        let v: Value = serde_json::from_slice(&std::fs::read(PathBuf::from(format!("{}.events.json", p.display()))).unwrap()).unwrap();
        v["reports"][0][1].clone()
    };
    let (l, r) = (report(&live), report(&mine));
    assert!(l["exceptions_by_type"].as_array().is_some_and(|a| !a.is_empty()), "{l}");
    assert_eq!(l["exceptions_by_type"], r["exceptions_by_type"]);
    assert_eq!(l["contention"]["waits"], r["contention"]["waits"]);
    assert_eq!(l["allocations"], r["allocations"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn replay_of_a_gc_heavy_recording_reports_every_gc_of_the_live_one() {
    require_root();
    // Non-concurrent workstation GC; collections start 4 s after "ready" (the recording is set
    // up by then even on a loaded machine) and go on until 12 s; recorded for 7 s (`-d`).
    let mut w = Workload::new("GcWork", Runtime::Net8).env("DOTNET_gcConcurrent", "0").arg(12).arg(4000).arg(5).arg(400).start().unwrap();
    let dir = out_dir("gc");
    let (raw, live, rep) = (dir.join("raw"), dir.join("live"), dir.join("rep"));
    run(clrprobe().args(["record", "--quiet", "-p", &w.pid.to_string(), "-d", "7s", "-F", "999", "--format", "pprof", "-o"]).arg(&live).arg("--save-raw").arg(&raw));
    assert!(w.is_alive(), "the workload outlives the recording");
    run(clrprobe().args(["report", "--replay"]).arg(&raw).arg("-o").arg(&rep));
    let gc = |p: &Path| -> Value {
        let v: Value = serde_json::from_slice(&std::fs::read(PathBuf::from(format!("{}.events.json", p.display()))).unwrap()).unwrap();
        v["reports"][0][1]["gc"].clone()
    };
    let (l, r) = (gc(&live), gc(&rep));
    eprintln!("live {} GCs {} ms paused; replay {} GCs {} ms paused", l["collections"], l["pause_total_ms"], r["collections"], r["pause_total_ms"]);
    assert!(l["collections"].as_u64().unwrap() >= 5, "{l}");
    for k in ["collections", "pauses", "per_generation", "pause_total_ms", "by_reason"] {
        assert_eq!(l[k], r[k], "{k}");
    }
    assert_eq!(l["timeline"].as_array().map(Vec::len), r["timeline"].as_array().map(Vec::len));
    std::fs::remove_dir_all(&dir).unwrap();
}
