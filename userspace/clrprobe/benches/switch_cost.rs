//! Where the off-CPU program's time goes, path by path: clrprobe's sched_switch program run by
//! `BPF_PROG_TEST_RUN` (no scheduler, no workload), the fastest of many batches against an
//! empty program run the same way (the syscall's own cost, subtracted). Each run is one
//! switch-out of this thread and, with `next` = `prev`, its switch-in.
//!
//! `cargo bench -p clrprobe --bench switch_cost` (root). Prints ns per run above the floor.
#[cfg(target_os = "linux")]
fn main() {
    use clrprobe::bpf::Loaded;
    use clrprobe_common::{names, switch_config as sc, ustack};

    if unsafe { libc::geteuid() } != 0 {
        eprintln!("switch_cost: run as root (it loads BPF programs)");
        std::process::exit(1);
    }
    const CALLS: u32 = 2_000;
    const BATCHES: u32 = 30;
    // A made-up task address (only used as the map key), blocked (prev_state 1), not preempted.
    let task = 0xffff_8880_dead_0000u64;
    let blocked = [0, task, task, 1];
    // Another task switching in: no entry, as for a thread of no target.
    let other = [0, task, task + 0x4000, 1];
    let mut l = Loaded::load().expect("loading the BPF object");
    let me = std::process::id();
    let floor = l.switch_test_run(names::PROG_SCHED_SWITCH_FLOOR_RAW, blocked, CALLS, BATCHES, 1).expect("floor");
    let mut rows: Vec<(&str, f64)> = Vec::new();
    let mut ring = l.take_ustack_ring().ok();
    let mut run = |l: &mut Loaded, what: &'static str, flags: u64, copies: u64, args: [u64; 4], places: u32| {
        l.set_switch_config(flags, 0).expect("config");
        l.set_ustack_flags(copies).expect("ustack flags");
        let (calls, batches) = if places > 2 { (400, 20) } else { (CALLS, BATCHES) };
        let mut best = f64::MAX;
        for _ in 0..batches {
            let t = l.switch_test_run(names::PROG_SCHED_SWITCH, args, calls, 1, places).expect("test run");
            best = best.min(t.as_nanos() as f64 - floor.as_nanos() as f64);
            // Copies sent are consumed, so the ring never fills.
            if let Some(r) = ring.as_mut() {
                while r.next().is_some() {}
            }
        }
        rows.push((what, best));
    };
    // Not a target: the switch-out test (TARGET_PIDS) and the switch-in lookup.
    run(&mut l, "thread of no target, both sides", sc::FLAG_OFFCPU | sc::FLAG_ONCPU, ustack::COPY_OFFCPU, other, 1);
    l.add_targets(&[me]).expect("target");
    run(&mut l, "target, on-CPU time only", sc::FLAG_ONCPU, 0, blocked, 1);
    run(&mut l, "target, off-CPU, stacks reused (FP only)", sc::FLAG_OFFCPU | sc::FLAG_ONCPU, 0, blocked, 1);
    run(&mut l, "target, off-CPU, stacks and copy reused", sc::FLAG_OFFCPU | sc::FLAG_ONCPU, ustack::COPY_OFFCPU, blocked, 1);
    // Runnable switch-outs (prev_state TASK_RUNNING): preempted in the kernel, and at the
    // return to user mode (`preempt` 0; the user registers say it is no sched_yield).
    run(&mut l, "target, off-CPU, preempted in the kernel", sc::FLAG_OFFCPU | sc::FLAG_ONCPU, ustack::COPY_OFFCPU, [1, task, task, 0], 1);
    run(&mut l, "target, off-CPU, preempted, TASK_RUNNING", sc::FLAG_OFFCPU | sc::FLAG_ONCPU, ustack::COPY_OFFCPU, [0, task, task, 0], 1);
    run(&mut l, "target, off-CPU, two places in turn: reused", sc::FLAG_OFFCPU | sc::FLAG_ONCPU, ustack::COPY_OFFCPU, blocked, 2);
    run(&mut l, "target, off-CPU, new place: walks (FP only)", sc::FLAG_OFFCPU | sc::FLAG_ONCPU, 0, blocked, 3);
    run(&mut l, "target, off-CPU, new place: walks + 16 KiB copy", sc::FLAG_OFFCPU | sc::FLAG_ONCPU, ustack::COPY_OFFCPU, blocked, 3);
    println!("sched_switch program, ns per run (one switch-out and one switch-in) above an empty program");
    println!("(floor: empty raw tracepoint program through BPF_PROG_TEST_RUN, {} ns per call)", floor.as_nanos());
    for (what, ns) in rows {
        println!("{what:<50} {ns:>8.0}");
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {}
