//! Live: allocation, exception, contention and off-CPU profiles from one `clrprobe record`,
//! checked against workloads whose truth is known (they count or time it themselves).
use std::{collections::HashMap, process::Command, time::Duration};

use clrprobe_profile::Profile;
use clrprobe_tests::{Runtime, Running, Workload, require_root};
use serde_json::Value;

mod common;
use common::record_until_exit;


fn line_value(w: &Running, prefix: &str) -> f64 {
    w.output()
        .iter()
        .find_map(|l| l.strip_prefix(prefix).and_then(|v| v.split_whitespace().next()).map(|v| v.parse().unwrap()))
        .unwrap_or_else(|| panic!("workload printed no {prefix}: {:?}", w.output()))
}

/// Sum of column `kind` over samples whose stack satisfies `pred` (frames root→leaf names).
fn sum_where(p: &Profile, kind: &str, mut pred: impl FnMut(&[&str], &clrprobe_profile::LabelSet) -> bool) -> i64 {
    let col = p.sample_type_index(kind).unwrap_or_else(|| panic!("no {kind} in the profile"));
    p.samples()
        .filter(|s| {
            let names: Vec<&str> = p.stack(s.stack).unwrap().iter().map(|&f| &*p.frame(f).unwrap().name).collect();
            pred(&names, p.labels(s.labels).unwrap())
        })
        .map(|s| s.values[col])
        .sum()
}

#[test]
fn allocations_upscale_to_the_bytes_of_five_types_within_10_percent() {
    require_root();
    let mut w = Workload::new("AllocTypes", Runtime::Net8).arg(3).arg(1500).start().unwrap();
    let (s, p) = record_until_exit(&mut w, "alloc", &["--alloc"]);
    let sizes = [("One", 24.0), ("Four", 48.0), ("System.Int64[]", 152.0), ("System.Int32[]", 1048.0), ("System.Double[]", 160024.0)];
    let report = &s["events"][0][1]["allocations"];
    let estimated: HashMap<&str, f64> =
        report.as_array().unwrap().iter().map(|a| (a[0].as_str().unwrap(), a[1].as_f64().unwrap())).collect();
    for (ty, size) in sizes {
        let truth = line_value(&w, &format!("count {ty}=")) * size;
        let est = estimated.get(ty).copied().unwrap_or(0.0);
        let err = est / truth - 1.0;
        eprintln!("{ty:<16} truth {truth:>14.0} B  estimated {est:>14.0} B  error {:+.1}%", err * 100.0);
        assert!(err.abs() <= 0.10, "{ty}: estimated {est} vs {truth} bytes");
        // The same totals are in the profile, with the type as the leaf frame.
        let in_profile = sum_where(&p, "alloc-bytes", |f, _| f.last() == Some(&ty));
        assert!((in_profile as f64 - est).abs() <= est * 0.001 + 1.0, "{ty}: profile {in_profile} vs report {est}");
    }
    // Large-object-heap allocations carry the LOH label; small ones SOH.
    let loh = sum_where(&p, "alloc-bytes", |f, l| f.last() == Some(&"System.Double[]") && l.string("heap") == Some("LOH"));
    let all_doubles = sum_where(&p, "alloc-bytes", |f, _| f.last() == Some(&"System.Double[]"));
    assert!(loh > 0 && loh == all_doubles, "double[20000] labelled LOH: {loh} of {all_doubles}");
    let soh_one = sum_where(&p, "alloc-bytes", |f, l| f.last() == Some(&"One") && l.string("heap") == Some("SOH"));
    assert!(soh_one > 0);
    // Allocation sites are named: One comes from AllocTypes::MakeOne.
    let from_site = sum_where(&p, "alloc-bytes", |f, _| f.last() == Some(&"One") && f.contains(&"AllocTypes::MakeOne"));
    assert!(from_site as f64 >= 0.9 * estimated["One"], "One allocated in MakeOne: {from_site}");
}

fn exceptions(runtime: Runtime) {
    require_root();
    let mut w = Workload::new("Exceptions", runtime).arg(4).arg(100).arg(50).arg(1500).arg(30).start().unwrap();
    let (s, p) = record_until_exit(&mut w, &format!("exc-{runtime:?}"), &["--exceptions", "--cxa-throw"]);
    eprintln!("{}", s["events"]);
    let list = s["events"][0][1]["exceptions"].as_array().unwrap();
    let count = |ty: &str, msg: &str| {
        list.iter().find(|e| e["exception_type"] == ty && e["message"] == msg).map(|e| e["count"].as_u64().unwrap())
    };
    assert_eq!(count("System.InvalidOperationException", "boom"), Some(100));
    assert_eq!(count("System.ArgumentException", "bad argument"), Some(50));
    assert_eq!(count("System.FormatException", "bad format"), Some(30));
    // On .NET 5+ the exceptions come from a session of their own at Error level (ExceptionThrown
    // only: no catch/finally events, each with a stack walk in the target); before, from the
    // process's own session.
    let sessions: Vec<&str> = s["eventpipe_providers"].as_array().unwrap().iter().filter_map(|e| e[1].as_str()).collect();
    let runtime_keywords = |spec: &str| {
        let e = spec.split(',').find(|p| p.starts_with("Microsoft-Windows-DotNETRuntime:")).unwrap();
        u64::from_str_radix(e.split(':').nth(1).unwrap().trim_start_matches("0x"), 16).unwrap()
    };
    if runtime == Runtime::Net8 {
        assert_eq!(sessions.len(), 2, "{sessions:?}");
        assert_eq!(runtime_keywords(sessions[0]) & 0x8000, 0, "{sessions:?}");
        assert_eq!(sessions[1], "Microsoft-Windows-DotNETRuntime:0x40008000:2");
    } else {
        assert_eq!(sessions.len(), 1, "{sessions:?}");
        assert_eq!(runtime_keywords(sessions[0]) & 0x8000, 0x8000, "{sessions:?}");
    }
    // Throw sites named: each type's samples sit under its throwing method.
    for (ty, site) in [
        ("System.InvalidOperationException", "Exceptions::ThrowInvalid"),
        ("System.ArgumentException", "Exceptions::ThrowArgument"),
        ("System.FormatException", "Exceptions::ThrowFormat"),
    ] {
        let total = sum_where(&p, "exceptions", |f, _| f.last() == Some(&ty));
        let mut stacks = Vec::new();
        let at_site = sum_where(&p, "exceptions", |f, _| {
            if f.last() == Some(&ty) {
                stacks.push(f.join(";"));
            }
            f.last() == Some(&ty) && f.contains(&site)
        });
        assert!(total > 0 && at_site == total, "{ty}: {at_site} of {total} under {site}: {stacks:?}");
    }
    // The kernel's count of C++ throws agrees with the runtime's events.
    let cxa = s["cxa_throws"][w.pid.to_string()].as_u64();
    assert_eq!(cxa, Some(180), "__cxa_throw count: {}", s["cxa_throws"]);
    // Priced before placed: a uprobe hit traps into the kernel (≈ 33 µs on the development VM).
    let cost = s["uprobe_cost_ns"].as_u64().unwrap_or(0);
    assert!((200..1_000_000).contains(&cost), "uprobe cost per hit {cost} ns");
}

#[test]
fn exceptions_are_counted_exactly_with_sites_and_cxa_throw_on_net8() {
    exceptions(Runtime::Net8);
}

#[test]
fn exceptions_are_counted_exactly_with_sites_and_cxa_throw_on_core31() {
    exceptions(Runtime::Core31);
}

fn contention(runtime: Runtime) {
    require_root();
    let mut w = Workload::new("LockWait", runtime).arg(40).arg(1500).arg(25).start().unwrap();
    let (s, p) = record_until_exit(&mut w, &format!("lock-{runtime:?}"), &["--contention"]);
    let truth_ns = line_value(&w, "waited_ns=");
    let holder = line_value(&w, "holder tid=") as u64;
    let waiter = line_value(&w, "waiter tid=") as u32;
    let c = &s["events"][0][1]["contention"];
    let total_ns = c["total_ms"].as_f64().unwrap() * 1e6;
    let err = total_ns / truth_ns - 1.0;
    eprintln!("{runtime:?}: contention {total_ns:.0} ns vs measured by the waiter {truth_ns:.0} ns ({:+.1}%): {c}", err * 100.0);
    assert!(err.abs() <= 0.10, "contention total {total_ns} vs {truth_ns}");
    // The waits are the waiter's, at its stack.
    let waiter_ns = sum_where(&p, "contention-ns", |_, l| l.tid == Some(waiter));
    assert!(waiter_ns as f64 >= 0.9 * total_ns, "waiter's share {waiter_ns}");
    if runtime == Runtime::Net8 {
        // ContentionStart_V2 names the owner: the holder thread.
        let owned = sum_where(&p, "contention-ns", |_, l| {
            l.string("lock.owner").is_some_and(|o| o.split_whitespace().next() == Some(&holder.to_string()))
        });
        assert!(owned as f64 >= 0.9 * total_ns, "waits owned by the holder {holder}: {owned} of {total_ns}");
    }
}

#[test]
fn contention_time_and_owner_on_net8() {
    contention(Runtime::Net8);
}

#[test]
fn contention_time_from_timestamps_on_core31() {
    contention(Runtime::Core31);
}

#[test]
fn off_cpu_time_of_a_sleeping_thread_within_10_percent() {
    require_root();
    let mut w = Workload::new("Sleeper", Runtime::Net8).arg(20).arg(1500).start().unwrap();
    let (s, p) = record_until_exit(&mut w, "offcpu", &["--offcpu", "--cpu"]);
    assert_eq!(s["offcpu"], true, "{s}");
    let tid = line_value(&w, "sleeper tid=") as u32;
    let truth = line_value(&w, "slept_ns=");
    let off = sum_where(&p, "off-cpu", |_, l| l.tid == Some(tid)) as f64;
    let err = off / truth - 1.0;
    eprintln!("Sleeper thread {tid}: off-CPU {off:.0} ns vs slept {truth:.0} ns ({:+.1}%)", err * 100.0);
    assert!(err.abs() <= 0.10, "off-CPU {off} vs {truth}");
    // Its stacks end in the kernel's timed wait (Thread.Sleep waits on a futex on .NET 8), and
    // the user frame above the syscall is named (libc keeps its exported symbols).
    // (Only the stacks of its waits: a preemption, at its exit say, is walked by frame
    // pointers alone, which Debian's libc does not keep.)
    let mut stacks = Vec::new();
    let in_wait = sum_where(&p, "off-cpu", |f, l| {
        let waits = l.tid == Some(tid) && f.iter().any(|n| n.contains("futex_wait") || n.contains("nanosleep"));
        if waits {
            stacks.push(f.join(";"));
        }
        waits
    }) as f64;
    assert!(in_wait >= 0.9 * off, "off-CPU stacks of the sleeper wait in the kernel: {in_wait} of {off}: {stacks:?}");
    assert!(!stacks.is_empty() && stacks.iter().all(|s| !s.starts_with("0x")), "user frames resolved to a module: {stacks:?}");
}

#[test]
fn report_prints_top_frames_contended_sites_owners_and_wait_percentiles() {
    require_root();
    let mut w = Workload::new("LockWait", Runtime::Net8).arg(40).arg(1500).arg(20).start().unwrap();
    let dir = clrprobe_tests::scratch_dir("report");
    let prefix = dir.join("p");
    let rec = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
        // 999 Hz: the workload mostly sleeps and waits (tens of ms of CPU), too few for a
        // CPU sample at 99 Hz every time.
        .args(["record", "--quiet", "--format", "pprof", "-F", "999", "-p", &w.pid.to_string(), "-o"])
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(rec.status.success(), "{}", String::from_utf8_lossy(&rec.stderr));
    w.wait(Duration::from_secs(10));
    let holder = line_value(&w, "holder tid=") as u64;
    let file = prefix.clone();
    let json = Command::new(env!("CARGO_BIN_EXE_clrprobe")).arg("report").arg(&file).arg("--json").output().unwrap();
    assert!(json.status.success(), "{}", String::from_utf8_lossy(&json.stderr));
    let r: Value = serde_json::from_slice(&json.stdout).unwrap();
    let kinds: Vec<&str> = r["kinds"].as_array().unwrap().iter().map(|k| k["kind"].as_str().unwrap()).collect();
    for k in ["cpu", "contention-ns", "contention-count", "off-cpu"] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    let site = &r["contended_sites"][0];
    assert!(site["site"].as_str().unwrap().starts_with("LockWait"), "{site}");
    assert!(site["owner"].as_str().unwrap().starts_with(&holder.to_string()), "owner {site} vs holder {holder}");
    assert_eq!(site["waits"], 20);
    let c = &r["events"][0][1]["contention"];
    let p50 = c["p50_ms"].as_f64().unwrap();
    assert!((38.0..=60.0).contains(&p50), "p50 wait {p50} ms for a 40 ms hold");
    let text = Command::new(env!("CARGO_BIN_EXE_clrprobe")).arg("report").arg(&file).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("== contended call sites ==") && text.contains("p50"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
