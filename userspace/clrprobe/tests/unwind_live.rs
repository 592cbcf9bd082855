//! Live: stacks through code without frame pointers (Debian's libc) and JIT methods without
//! an RBP frame, off-CPU and on CPU, on .NET 8 and .NET Core 3.1.

use clrprobe_profile::Profile;
use clrprobe_tests::{Runtime, Running, Workload, require_root};

mod common;
use common::record_until_exit;


fn tid_of(w: &Running, name: &str) -> u32 {
    let prefix = format!("tid {name}=");
    w.output()
        .iter()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().parse().unwrap()))
        .unwrap_or_else(|| panic!("workload printed no {prefix}: {:?}", w.output()))
}

/// (value, root→leaf frame names) of the samples of `tid` in column `kind`.
fn stacks_of(p: &Profile, kind: &str, tid: u32) -> Vec<(i64, Vec<String>)> {
    let col = p.sample_type_index(kind).unwrap_or_else(|| panic!("no {kind} in the profile"));
    p.samples()
        .filter(|s| p.labels(s.labels).unwrap().tid == Some(tid) && s.values[col] > 0)
        .map(|s| {
            let names = p.stack(s.stack).unwrap().iter().map(|&f| p.frame(f).unwrap().name.to_string()).collect();
            (s.values[col], names)
        })
        .collect()
}

/// Share of `stacks` (by value) that `pred` accepts; prints the heaviest stacks it rejects.
fn share(what: &str, stacks: &[(i64, Vec<String>)], pred: impl Fn(&[String]) -> bool) -> f64 {
    let total: i64 = stacks.iter().map(|s| s.0).sum();
    let good: i64 = stacks.iter().filter(|s| pred(&s.1)).map(|s| s.0).sum();
    let mut bad: Vec<&(i64, Vec<String>)> = stacks.iter().filter(|s| !pred(&s.1)).collect();
    bad.sort_by_key(|s| -s.0);
    let share = if total == 0 { 0.0 } else { good as f64 / total as f64 };
    eprintln!("{what}: {:.1}% of {total}", share * 100.0);
    for (v, s) in bad.iter().take(3) {
        eprintln!("   missing ({v}): {}", s.join(";"));
    }
    share
}

/// The CPU tests need both cores' worth of samples from their own workload: one test at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn blocked_threads_reach_their_methods(runtime: Runtime) {
    require_root();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut w = Workload::new("Blockers", runtime).arg(5000).start().unwrap();
    let (s, p) = record_until_exit(&mut w, "offcpu", &["--offcpu"]);
    assert_eq!(s["offcpu"], true, "{s}");
    check_blocked(&format!("{runtime:?}"), &p, |thread| tid_of(&w, thread));
}

/// The same, the workload launched by `record --offcpu -- …` (recorded from its first
/// instruction).
fn blocked_threads_reach_their_methods_launched(runtime: Runtime) {
    require_root();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cmd = Workload::new("Blockers", runtime).arg(5000).command().unwrap();
    let dir = clrprobe_tests::scratch_dir(&format!("unwind-launch-{runtime:?}"));
    let prefix = dir.join("p");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        .args(["record", "--offcpu", "--quiet", "--format", "pprof", "-o"])
        .arg(&prefix)
        .arg("--")
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .current_dir(cmd.get_current_dir().unwrap())
        .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let p = clrprobe::report::load(std::slice::from_ref(&prefix)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    check_blocked(&format!("{runtime:?} launched"), &p, |thread| {
        let prefix = format!("tid {thread}=");
        stdout.lines().find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().parse().unwrap())).unwrap_or_else(|| panic!("no {prefix} in {stdout}"))
    });
}

/// ≥ 90 % of each blocking thread's off-CPU time under its method, its waits labelled.
fn check_blocked(runtime: &str, p: &Profile, tid_of: impl Fn(&str) -> u32) {
    let mut failed = Vec::new();
    for (thread, method) in [
        ("Monitor", "Blockers::InMonitorEnter"),
        ("Sleep", "Blockers::InSleep"),
        ("WaitOne", "Blockers::InWaitOne"),
        ("Socket", "Blockers::InSocketRead"),
    ] {
        let stacks = stacks_of(p, "off-cpu", tid_of(thread));
        let share = share(&format!("{runtime} {thread}: off-CPU under {method}"), &stacks, |f| {
            f.iter().any(|n| n.contains(method))
        });
        if share < 0.9 {
            failed.push(format!("{thread} {:.1}%", share * 100.0));
        }
    }
    // The kind of wait is a label of each off-CPU sample. Monitor.Enter spins before it
    // blocks, yielding its CPU (Thread.Yield): on a loaded machine a yield can wait on the run
    // queue longer than the shortest interval recorded, labelled `yield`.
    for (thread, wait) in [("Monitor", "lock|yield"), ("Socket", "socket")] {
        let tid = tid_of(thread);
        let col = p.sample_type_index("off-cpu").unwrap();
        let (mut total, mut labelled) = (0i64, 0i64);
        for smp in p.samples() {
            let l = p.labels(smp.labels).unwrap();
            if l.tid == Some(tid) {
                total += smp.values[col];
                if l.strings.iter().any(|(k, v)| &**k == "wait" && wait.split('|').any(|w| &**v == w)) {
                    labelled += smp.values[col];
                }
            }
        }
        eprintln!("{runtime} {thread}: {:.1}% of off-CPU time labelled wait={wait}", labelled as f64 * 100.0 / total.max(1) as f64);
        if (labelled as f64) < 0.9 * total as f64 {
            failed.push(format!("{thread} wait={wait} {labelled} of {total}"));
        }
    }
    assert!(failed.is_empty(), "off-CPU time under the blocking method below 90%: {failed:?}");
}

#[test]
fn off_cpu_time_of_blocked_threads_lies_under_their_methods_on_net8() {
    blocked_threads_reach_their_methods(Runtime::Net8);
}

#[test]
fn off_cpu_time_of_blocked_threads_lies_under_their_methods_on_core31() {
    blocked_threads_reach_their_methods(Runtime::Core31);
}

#[test]
fn off_cpu_time_of_blocked_threads_lies_under_their_methods_launched_on_net8() {
    blocked_threads_reach_their_methods_launched(Runtime::Net8);
}

#[test]
fn off_cpu_time_of_blocked_threads_lies_under_their_methods_launched_on_core31() {
    blocked_threads_reach_their_methods_launched(Runtime::Core31);
}

fn cpu_stacks_are_complete(runtime: Runtime, sampler: &str) {
    require_root();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut w = Workload::new("Chain", runtime).arg(6000).start().unwrap();
    let (s, p) = record_until_exit(&mut w, &format!("cpu-{sampler}"), &["--cpu", "-F", "499", "--sampler", sampler]);
    let expected = if sampler == "bpf" { "bpf" } else { "perf-event" };
    assert_eq!(s["sampler"], expected, "{s}");
    let runtime = format!("{runtime:?} {sampler}");
    let main = stacks_of(&p, "cpu", tid_of(&w, "Main"));
    let leaf: Vec<_> = main.iter().filter(|s| s.1.last().is_some_and(|n| n.contains("Chain::Leaf"))).cloned().collect();
    assert!(leaf.iter().map(|s| s.0).sum::<i64>() >= 50, "too few Leaf samples: {main:?}");
    let chain = share(&format!("{runtime} Leaf samples with Main directly above Alpha"), &leaf, |f| {
        f.windows(3).any(|w| w[0].contains("Chain::Main") && w[1].contains("Chain::Alpha") && w[2].contains("Chain::Leaf"))
    });
    let in_libc = |f: &[String]| f.iter().any(|n| n.contains("libc.so") || n.contains("memmove") || n.contains("malloc") || n.contains("free"));
    let copier: Vec<_> = stacks_of(&p, "cpu", tid_of(&w, "Copier")).into_iter().filter(|s| in_libc(&s.1)).collect();
    let mallocer: Vec<_> = stacks_of(&p, "cpu", tid_of(&w, "Mallocer")).into_iter().filter(|s| in_libc(&s.1)).collect();
    assert!(copier.iter().map(|s| s.0).sum::<i64>() >= 50, "too few Copier samples in libc: {copier:?}");
    assert!(mallocer.iter().map(|s| s.0).sum::<i64>() >= 50, "too few Mallocer samples in libc: {mallocer:?}");
    let copy = share(&format!("{runtime} Copier libc samples under CopyBig"), &copier, |f| f.iter().any(|n| n.contains("Chain::CopyBig")));
    let malloc =
        share(&format!("{runtime} Mallocer libc samples under MallocLoop"), &mallocer, |f| f.iter().any(|n| n.contains("Chain::MallocLoop")));
    let named = s["managed_named_samples"].as_f64().unwrap() / s["managed_samples"].as_f64().unwrap().max(1.0);
    eprintln!("{runtime}: {:.2}% of managed-leaf samples fully named", named * 100.0);
    assert!(chain >= 0.95, "Main directly above Alpha in {:.1}% of Leaf samples", chain * 100.0);
    assert!(copy >= 0.9, "memmove samples reach CopyBig: {:.1}%", copy * 100.0);
    assert!(malloc >= 0.9, "malloc samples reach MallocLoop: {:.1}%", malloc * 100.0);
}

#[test]
fn cpu_stacks_keep_callers_of_frameless_jit_methods_and_libc_on_net8() {
    cpu_stacks_are_complete(Runtime::Net8, "bpf");
}

#[test]
fn perf_event_fallback_sampler_keeps_callers_of_frameless_jit_methods_and_libc_on_net8() {
    cpu_stacks_are_complete(Runtime::Net8, "perf");
}

#[test]
fn perf_event_fallback_sampler_keeps_callers_of_frameless_jit_methods_and_libc_on_core31() {
    cpu_stacks_are_complete(Runtime::Core31, "perf");
}

#[test]
fn cpu_stacks_keep_callers_of_frameless_jit_methods_and_libc_on_core31() {
    cpu_stacks_are_complete(Runtime::Core31, "bpf");
}
