//! Real data: a live .NET 8 process (the `MultiThread` workload: three named threads spinning
//! in managed code while the main thread sleeps) is sampled through /proc — every thread's
//! state, name and kernel stack, 40 times 25 ms apart — into a profile with real thread names,
//! real kernel frames and both on- and off-CPU values. That profile then goes through every
//! writer and back through the pprof reader.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clrprobe_profile::folded::FoldedOptions;
use clrprobe_profile::speedscope::Grouping;
use clrprobe_profile::{
    Frame, FrameKind, LabelSet, Marker, Period, Profile, ProfileBuilder, SampleType, firefox, folded, kinds,
    pprof, speedscope, svg, units,
};
use clrprobe_tests::{Runtime, Workload};

const ROUNDS: u64 = 40;
const INTERVAL: Duration = Duration::from_millis(25);

struct Observed {
    profile: Profile,
    observations: u64,
    worker_observations: u64,
}

/// `/proc/.../stack` lines look like `[<0>] futex_wait_queue+0x60/0xa0`.
fn kernel_frames(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_once("] ").map(|(_, f)| f))
        .map(|f| f.split('+').next().unwrap_or(f).to_owned())
        .filter(|f| !f.is_empty())
        .collect()
}

fn sample_process(pid: u32) -> Observed {
    let mut b = ProfileBuilder::new(vec![
        SampleType::new(kinds::CPU, units::SAMPLES),
        SampleType::new(kinds::OFF_CPU, units::NANOSECONDS),
    ]);
    b.set_period(Period { sample_type: SampleType::new(kinds::CPU, units::NANOSECONDS), value: INTERVAL.as_nanos() as i64 });
    let start_wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
    b.set_start_time_ns(start_wall);
    let process_name = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap().trim().to_owned();
    let user = b.intern_frame(Frame::new("[user]", "", FrameKind::Synthetic)).unwrap();
    let start = Instant::now();
    let (mut observations, mut worker_observations) = (0, 0);
    for _ in 0..ROUNDS {
        let t = start.elapsed().as_nanos() as u64;
        for entry in fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
            let task = entry.unwrap().path();
            let tid: u32 = task.file_name().unwrap().to_str().unwrap().parse().unwrap();
            // A thread may exit between listing and reading: skip it then.
            let (Ok(comm), Ok(stat), Ok(kstack)) = (
                fs::read_to_string(task.join("comm")),
                fs::read_to_string(task.join("stat")),
                fs::read_to_string(task.join("stack")),
            ) else {
                continue;
            };
            let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()).unwrap();
            let name = comm.trim().to_owned();
            let mut stack = vec![user];
            for f in kernel_frames(&kstack).iter().rev() {
                stack.push(b.intern_frame(Frame::new(f.clone(), "[kernel]", FrameKind::Kernel)).unwrap());
            }
            let stack = b.intern_stack(&stack).unwrap();
            if name.starts_with("Worker") {
                worker_observations += 1;
            }
            let labels = b
                .intern_labels(LabelSet {
                    process_name: Some(process_name.as_str().into()),
                    thread_name: Some(name.into()),
                    ..LabelSet::thread(pid, tid)
                }.with_string("state", state.to_string()))
                .unwrap();
            let values = if state == 'R' { [1, 0] } else { [0, INTERVAL.as_nanos() as i64] };
            b.add_timed_sample(stack, &values, labels, t).unwrap();
            observations += 1;
        }
        std::thread::sleep(INTERVAL);
    }
    let elapsed = start.elapsed().as_nanos() as u64;
    b.set_duration_ns(elapsed);
    b.add_marker(Marker {
        name: "sampling window".into(),
        start_ns: 0,
        end_ns: elapsed,
        pid: Some(pid),
        tid: Some(pid),
        data: vec![("rounds".into(), ROUNDS.to_string())],
    });
    Observed { profile: b.build(), observations, worker_observations }
}

#[test]
fn live_dotnet_threads_through_every_writer() {
    clrprobe_tests::require_root();
    let mut run = Workload::new("MultiThread", Runtime::Net8).arg(30).arg(3).start().expect("start MultiThread workload");
    for k in 0..3 {
        run.wait_for_line(&format!("worker {k} tid="), Duration::from_secs(10)).expect("worker line");
    }
    let obs = sample_process(run.pid);
    run.kill();
    let p = &obs.profile;

    // The model saw what /proc showed.
    let cpu = p.sample_type_index(kinds::CPU).unwrap();
    let off = p.sample_type_index(kinds::OFF_CPU).unwrap();
    assert_eq!(p.sample_count() as u64, obs.observations);
    assert_eq!(p.total(cpu) + p.total(off) / INTERVAL.as_nanos() as i64, obs.observations as i64);
    let threads: BTreeSet<&str> = p.label_sets().iter().filter_map(|l| l.thread_name.as_deref()).collect();
    for w in ["Worker0", "Worker1", "Worker2"] {
        assert!(threads.contains(w), "thread {w} not seen: {threads:?}");
    }
    assert!(threads.iter().any(|t| t.starts_with(".NET")), "no runtime thread seen: {threads:?}");
    let worker_cpu: i64 = p
        .samples()
        .filter(|s| p.labels(s.labels).and_then(|l| l.thread_name.as_deref()).is_some_and(|n| n.starts_with("Worker")))
        .map(|s| s.values[cpu])
        .sum();
    assert!(
        worker_cpu * 2 > obs.worker_observations as i64,
        "spinning workers runnable in only {worker_cpu} of {} observations",
        obs.worker_observations
    );
    let kernel_frames = p.frames().iter().filter(|f| f.kind == FrameKind::Kernel).count();
    assert!(kernel_frames >= 3, "only {kernel_frames} distinct kernel frames");

    // pprof round trip.
    let dir = common::scratch("live");
    let path = dir.join("live.pb.gz");
    pprof::write_file(p, &path).unwrap();
    let back = pprof::read_file(&path).unwrap();
    assert_eq!(back, common::as_pprof_keeps(p));

    // Folded: counts add up; sleeping .NET threads wait in the kernel.
    let opts = FoldedOptions { thread_roots: true, ..FoldedOptions::default() };
    let off_lines = folded::lines(p, off, &opts).unwrap();
    let sum: i64 = off_lines.iter().map(|l| l.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap()).sum();
    assert_eq!(sum, p.total(off));
    assert!(off_lines.iter().any(|l| l.contains("_[k]")), "no kernel frame in off-CPU stacks: {off_lines:?}");
    let cpu_lines = folded::lines(p, cpu, &opts).unwrap();
    assert!(cpu_lines.iter().any(|l| l.contains("Worker0 (")), "{cpu_lines:?}");

    // SVG, speedscope, Firefox.
    let svg_path = dir.join("off.svg");
    svg::write_file(p, off, "off-CPU", &svg_path).unwrap();
    let text = fs::read_to_string(&svg_path).unwrap();
    assert!(text.contains("[user]"));

    let ss_path = dir.join("live.speedscope.json");
    speedscope::write_file(p, "live", Grouping::PerThread, &ss_path).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&ss_path).unwrap()).unwrap();
    // Timed CPU samples: one evented profile per thread, balanced and in time order, inside
    // the recording.
    let per_thread_cpu: BTreeMap<String, (u64, u64)> = v["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["name"].as_str().unwrap().starts_with("cpu: "))
        .map(|q| {
            assert_eq!(q["type"], "evented", "{}", q["name"]);
            assert_eq!(q["unit"], "nanoseconds");
            let mut depth = 0i64;
            let mut last = 0u64;
            for e in q["events"].as_array().unwrap() {
                let at = e["at"].as_u64().unwrap();
                assert!(at >= last, "events out of order in {}", q["name"]);
                last = at;
                depth += if e["type"] == "O" { 1 } else { -1 };
                assert!(depth >= 0);
            }
            assert_eq!(depth, 0, "unbalanced events in {}", q["name"]);
            (q["name"].as_str().unwrap().to_owned(), (q["startValue"].as_u64().unwrap(), q["endValue"].as_u64().unwrap()))
        })
        .collect();
    assert!(per_thread_cpu.values().all(|(a, b)| a <= b && *b <= p.duration_ns() + INTERVAL.as_nanos() as u64), "{per_thread_cpu:?}");
    assert!(per_thread_cpu.keys().any(|k| k.contains("Worker1")), "{per_thread_cpu:?}");

    let ff_path = dir.join("live.firefox.json");
    firefox::write_file(p, cpu, "clrprobe", &ff_path).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&ff_path).unwrap()).unwrap();
    let running_tids: BTreeSet<u32> =
        p.samples().filter(|s| s.values[cpu] > 0).filter_map(|s| p.labels(s.labels).and_then(|l| l.tid)).collect();
    let ff_threads = v["threads"].as_array().unwrap();
    let ff_tids: BTreeSet<u32> = ff_threads.iter().map(|t| t["tid"].as_str().unwrap().parse().unwrap()).collect();
    assert_eq!(ff_tids, running_tids);
    let ff_samples: u64 = ff_threads.iter().map(|t| t["samples"]["length"].as_u64().unwrap()).sum();
    assert_eq!(ff_samples as usize, p.samples().filter(|s| s.values[cpu] > 0).count());
    eprintln!(
        "live: {} observations of {} threads, {} cpu / {} off-cpu samples, {} kernel frames",
        obs.observations,
        threads.len(),
        p.total(cpu),
        p.total(off) / INTERVAL.as_nanos() as i64,
        kernel_frames
    );
}
