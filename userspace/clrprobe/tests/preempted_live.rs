//! Live: off-CPU time a thread spends preempted (runnable, waiting for a CPU) is counted for it
//! under one `[preempted]` frame, without stacks walked; time it spends blocked keeps the
//! stack it blocked at; no stack's root is a bare address.
use clrprobe_profile::Profile;
use clrprobe_tests::{Runtime, Workload, require_root};

mod common;
use common::record_until_exit;

/// (off-CPU ns, root→leaf frame names, wait label) of each off-CPU sample of `tid`.
fn offcpu_of(p: &Profile, tid: u32) -> Vec<(i64, Vec<String>, String)> {
    let col = p.sample_type_index("off-cpu").expect("an off-cpu kind");
    p.samples()
        .filter_map(|s| {
            let l = p.labels(s.labels).unwrap();
            (l.tid == Some(tid) && s.values[col] > 0).then(|| {
                let names = p.stack(s.stack).unwrap().iter().map(|&f| p.frame(f).unwrap().name.to_string()).collect();
                let wait = l.strings.iter().find(|(k, _)| &**k == "wait").map(|(_, v)| v.to_string()).unwrap_or_default();
                (s.values[col], names, wait)
            })
        })
        .collect()
}

#[test]
fn preempted_time_is_counted_per_thread_without_stacks_and_waits_keep_theirs() {
    require_root();
    // Four threads spinning on this machine's two cores: each is runnable about half the time.
    let seconds = 4;
    let mut w = Workload::new("MultiThread", Runtime::Net8).arg(seconds).arg(4).start().unwrap();
    // Every interval (the run queue's are a few ms at most).
    let (s, p) = record_until_exit(&mut w, "preempted", &["--offcpu", "--offcpu-min-us", "0"]);
    assert_eq!(s["offcpu"], true, "{s}");
    let workers: Vec<u32> = w
        .output()
        .iter()
        .filter_map(|l| l.strip_prefix("worker ").and_then(|r| r.split_once(" tid=")).map(|(_, t)| t.trim().parse().unwrap()))
        .collect();
    assert_eq!(workers.len(), 4, "{:?}", w.output());
    let mut failed = Vec::new();
    for tid in workers {
        let samples = offcpu_of(&p, tid);
        let total: i64 = samples.iter().map(|s| s.0).sum();
        let preempted: i64 =
            samples.iter().filter(|s| s.1 == ["[preempted]"] && s.2 == "preempted").map(|s| s.0).sum();
        eprintln!("worker {tid}: off-CPU {:.0} ms, {:.1}% under [preempted]", total as f64 / 1e6, preempted as f64 * 100.0 / total.max(1) as f64);
        // Off CPU about half of the time it spun (at least a fifth, whatever else runs here).
        if total < (seconds as i64 * 1_000_000_000) / 5 || (preempted as f64) < 0.9 * total as f64 {
            let mut other: Vec<_> = samples.iter().filter(|s| s.1 != ["[preempted]"]).collect();
            other.sort_by_key(|s| -s.0);
            failed.push(format!("worker {tid}: {preempted} of {total} ns preempted; others {:?}", other.iter().take(3).collect::<Vec<_>>()));
        }
    }
    // The main thread sleeps 20 ms at a time: blocked, under its method, labelled a sleep or
    // a lock (.NET 8 sleeps on a futex).
    let main = offcpu_of(&p, w.pid);
    let total: i64 = main.iter().map(|s| s.0).sum();
    let under: i64 = main.iter().filter(|s| s.1.iter().any(|n| n.contains("MultiThread::Main")) && s.2 != "preempted").map(|s| s.0).sum();
    eprintln!("main thread: off-CPU {:.0} ms, {:.1}% blocked under MultiThread::Main", total as f64 / 1e6, under as f64 * 100.0 / total.max(1) as f64);
    if total == 0 || (under as f64) < 0.9 * total as f64 {
        failed.push(format!("main thread: {under} of {total} ns under MultiThread::Main"));
    }
    // Roots are named frames or `module+offset`, never a bare address (a frame-pointer walk
    // through code without frame pointers ends where the code ends).
    let col = p.sample_type_index("off-cpu").unwrap();
    let bare: Vec<String> = p
        .samples()
        .filter(|smp| smp.values[col] > 0)
        .filter_map(|smp| {
            let stack = p.stack(smp.stack).unwrap();
            let root = p.frame(*stack.first()?).unwrap().name.to_string();
            root.starts_with("0x").then(|| stack.iter().map(|&f| p.frame(f).unwrap().name.to_string()).collect::<Vec<_>>().join(";"))
        })
        .collect();
    if !bare.is_empty() {
        failed.push(format!("stacks rooted at a bare address: {:?}", &bare[..bare.len().min(3)]));
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
