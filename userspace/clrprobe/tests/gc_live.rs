//! Live: the GC timeline, GC CPU and the `Garbage Collector` frame from `clrprobe record`, on
//! the GcWork workload (.NET 8), checked against what the runtime itself reports (the
//! workload prints GC.GetTotalPauseDuration increases) and against /proc.
use std::{process::Command, time::Duration};

use clrprobe_profile::Profile;
use clrprobe_tests::{Runtime, Running, Workload, require_root};
use serde_json::Value;

const GC_FRAME: &str = "Garbage Collector";

/// Records `w` (until it exits, or for `-d` s); returns the summary, the profile read back
/// from pprof, the Firefox profile's text and `clrprobe report`'s text of the pprof.
fn record(w: &mut Running, name: &str, extra: &[&str]) -> (Value, Profile, String, String) {
    let dir = clrprobe_tests::scratch_dir(&format!("gc-{name}"));
    let prefix = dir.join("p");
    let out = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args(["record", "--json", "--quiet", "--format", "pprof,firefox", "--cpu", "-F", "999", "-p", &w.pid.to_string(), "-o"])
        .arg(&prefix)
        .args(extra)
        .output()
        .expect("run clrprobe record");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    if !extra.contains(&"-d") {
        w.wait(Duration::from_secs(15));
    }
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let profile = clrprobe::report::load(std::slice::from_ref(&prefix)).unwrap();
    let firefox = std::fs::read_to_string(format!("{}.cpu.firefox.json", prefix.display())).unwrap_or_default();
    let report = Command::new(env!("CARGO_BIN_EXE_clrprobe")).arg("report").arg(&prefix).output().expect("run clrprobe report");
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let _ = std::fs::remove_dir_all(&dir);
    (summary, profile, firefox, String::from_utf8_lossy(&report.stdout).into_owned())
}

/// Sum of the `cpu` column over samples whose root frame is [`GC_FRAME`] and whose thread
/// name satisfies `thread`.
fn gc_samples(p: &Profile, mut thread: impl FnMut(&clrprobe_profile::LabelSet) -> bool) -> i64 {
    let col = p.sample_type_index("cpu").expect("cpu column");
    p.samples()
        .filter(|s| {
            let root = p.stack(s.stack).unwrap().first().map(|&f| p.frame(f).unwrap().name.to_string());
            root.as_deref() == Some(GC_FRAME) && thread(p.labels(s.labels).unwrap())
        })
        .map(|s| s.values[col])
        .sum()
}

fn gc_report(s: &Value) -> &Value {
    &s["events"][0][1]["gc"]
}

fn ms(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0) / 1e6
}

#[test]
fn workstation_gc_pauses_reasons_and_user_thread_cpu() {
    require_root();
    // Non-concurrent workstation GC: every collection runs on the allocating main thread.
    let mut w = Workload::new("GcWork", Runtime::Net8).env("DOTNET_gcConcurrent", "0").arg(3).arg(1500).arg(5).arg(400).start().unwrap();
    let (s, p, firefox, report) = record(&mut w, "wks", &["--alloc"]);
    let gc = gc_report(&s);
    let timeline = gc["timeline"].as_array().expect("timeline");
    let by_index = |i: u64| timeline.iter().find(|g| g["index"].as_u64() == Some(i)).unwrap_or_else(|| panic!("GC {i} not in the timeline"));
    // Induced GCs: reason Induced, gen 2, and the pause the runtime measured (±1 ms).
    let mut induced = 0;
    for line in w.output().iter().filter(|l| l.starts_with("induced gc=")) {
        let f: Vec<u64> = line.split(['=', ' ']).filter_map(|t| t.parse().ok()).collect();
        let (index, runtime_us) = (f[0], f[1]);
        let g = by_index(index);
        let pause_ms = ms(&g["pause_ns"]);
        eprintln!("induced GC {index}: timeline pause {pause_ms:.3} ms, runtime {:.3} ms", runtime_us as f64 / 1e3);
        assert_eq!(g["reason"], "Induced", "GC {index}: {g}");
        assert_eq!(g["generation"], 2);
        assert!((pause_ms - runtime_us as f64 / 1e3).abs() <= 1.0, "GC {index}: {pause_ms} ms vs runtime {runtime_us} us");
        induced += 1;
    }
    assert_eq!(induced, 5, "{:?}", w.output());
    // Every GC of the phases: the total pause agrees with the runtime's (±1 ms per GC at most,
    // and within 1%).
    let phase = w.output().into_iter().find(|l| l.starts_with("phase gcs=")).expect("phase line");
    let f: Vec<u64> = phase.split(['=', ' ']).filter_map(|t| t.parse().ok()).collect();
    let (first, last, runtime_us) = (f[0], f[1], f[2]);
    let ours: f64 = (first..=last).map(|i| ms(&by_index(i)["pause_ns"])).sum();
    let runtime_ms = runtime_us as f64 / 1e3;
    let n = (last - first + 1) as f64;
    eprintln!("GCs {first}..={last}: timeline pauses {ours:.3} ms, runtime {runtime_ms:.3} ms; max {} ms", gc["pause_max_ms"]);
    assert!((ours - runtime_ms).abs() <= (0.01 * runtime_ms).max(1.0).min(n), "pauses {ours} ms vs runtime {runtime_ms} ms");
    // LOH churn triggers gen-2 GCs with reason AllocLarge.
    assert!(timeline.iter().any(|g| g["reason"] == "AllocLarge" && g["generation"] == 2), "no AllocLarge GC");
    // The condemned generation (GCPerHeapHistory's final, GCGlobalHeapHistory's) is GCStart's depth.
    for g in timeline {
        assert_eq!(g["final_generation"], g["generation"], "{g}");
        assert_eq!(g["global_condemned_generation"], g["generation"], "{g}");
    }
    // GC work on the user thread: CPU samples of the main thread inside its pauses.
    let cpu = &gc["cpu"];
    let user_ms = ms(&cpu["user_thread_gc_ns"]);
    let pid = w.pid;
    let main_thread = gc_samples(&p, |l| l.tid == Some(pid));
    eprintln!("user-thread GC CPU {user_ms:.1} ms ({main_thread} samples at 999 Hz); paused {ours:.1} ms; GC CPU {:.1}% of the process", {
        let total = cpu["gc_threads_ns"].as_f64().unwrap() + cpu["user_thread_gc_ns"].as_f64().unwrap();
        total * 100.0 / cpu["process_ns"].as_f64().unwrap()
    });
    assert!(main_thread > 0 && user_ms > 0.0, "no GC samples on the main thread");
    // A GC can be on the CPU only while paused (and the sampler misses little of it). The main
    // thread is runnable throughout the phases, so it runs its pauses for the share of time the
    // machine gives it a core (on a loaded machine part of a pause is spent waiting for one).
    let sched = w.output().into_iter().find(|l| l.starts_with("sched run_ns=")).expect("sched line");
    let f: Vec<f64> = sched.split(['=', ' ']).filter_map(|t| t.parse().ok()).collect();
    let on_cpu = f[0] / (f[0] + f[1]).max(1.0);
    eprintln!("main thread on a CPU {:.1} % of its runnable time in the phases", on_cpu * 100.0);
    assert!(on_cpu > 0.05, "main thread ran {sched}");
    assert!(
        user_ms <= ours * 1.1 + 5.0 && user_ms >= ours * on_cpu * 0.5,
        "user-thread GC CPU {user_ms} ms vs pauses {ours} ms (main thread on a CPU {:.1} % of its runnable time)",
        on_cpu * 100.0
    );
    // EventPipe's clock is the kernel's CLOCK_MONOTONIC: the session's origin sits just after
    // the moment it was requested.
    let offset = gc["clock_offset_ns"].as_i64().expect("clock offset");
    eprintln!("EventPipe origin - CLOCK_MONOTONIC at the request: {:.3} ms", offset as f64 / 1e6);
    assert!((0..100_000_000).contains(&offset), "clock offset {offset} ns");
    // `clrprobe report` prints the summary and the timeline from the pprof alone.
    assert!(report.contains("== garbage collections of") && report.contains("reasons: ") && report.contains("Induced gen2"), "{report}");
    // Markers for the Firefox Profiler.
    assert!(firefox.contains("GC #1 gen2 Induced"), "no GC marker in the Firefox profile");
}

#[test]
fn server_gc_thread_cpu_from_bpf_matches_proc_within_10_percent() {
    require_root();
    let mut w = server_gc_workload().start().unwrap();
    // A fixed window while the GC threads live, so /proc can be read at its end.
    let (s, p, _, _) = record(&mut w, "svr", &["-d", "3"]);
    w.kill();
    let gc = gc_report(&s);
    let (bpf, proc) = (&gc["cpu"], &gc["cpu_proc"]);
    assert_eq!(bpf["source"], "bpf sched_switch");
    let servers = bpf["threads"].as_array().unwrap().iter().filter(|t| t[1] == ".NET Server GC").count();
    assert!(servers >= 2, "server GC threads: {}", bpf["threads"]);
    let (k, u) = (ms(&bpf["gc_threads_ns"]), ms(&proc["gc_threads_ns"]));
    eprintln!(
        "server GC threads: {k:.1} ms (BPF) vs {u:.1} ms (/proc) = {:+.1}%; GC CPU {:.1}% of the process; {} GCs, paused {:.1} ms",
        (k / u - 1.0) * 100.0,
        (k / ms(&bpf["process_ns"])) * 100.0,
        gc["collections"],
        gc["pause_total_ms"].as_f64().unwrap()
    );
    assert!(u > 200.0, "too little GC CPU to compare: {u} ms");
    assert!((k / u - 1.0).abs() <= 0.10, "BPF {k} ms vs /proc {u} ms");
    // Their samples stand under the `Garbage Collector` root.
    let on_gc_threads = gc_samples(&p, |l| l.thread_name.as_deref() == Some(".NET Server GC"));
    assert!(on_gc_threads > 0, "no `Garbage Collector` samples on the server GC threads");
}

#[test]
fn without_bpf_gc_thread_cpu_is_pulled_from_proc() {
    require_root();
    let mut w = server_gc_workload().start().unwrap();
    let (s, p, _, _) = record(&mut w, "pull", &["-d", "4", "--sampler", "perf"]);
    w.kill();
    let gc = gc_report(&s);
    let cpu = &gc["cpu"];
    assert_eq!(cpu["source"], "/proc task stat", "{gc}");
    let gc_ms = ms(&cpu["gc_threads_ns"]);
    eprintln!("perf_event sampler, /proc pull: server GC threads {gc_ms:.0} ms of {:.0} ms", ms(&cpu["process_ns"]));
    assert!(gc_ms > 100.0, "GC thread CPU from /proc: {gc_ms} ms");
    assert!(gc_samples(&p, |l| l.thread_name.as_deref() == Some(".NET Server GC")) > 0);
}

/// Server GC with two heaps; induced full GCs over 200 MB of live small objects, so the GC
/// threads mark for ~80 ms each.
fn server_gc_workload() -> Workload {
    Workload::new("GcWork", Runtime::Net8)
        .env("DOTNET_gcServer", "1")
        .env("DOTNET_GCHeapCount", "2")
        .arg(20)
        .arg(0)
        .arg(200)
        .arg(100)
        .arg(200)
}
