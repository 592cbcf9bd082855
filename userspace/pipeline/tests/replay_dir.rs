//! Replay, without root: a saved directory (the `record --save-raw` layout, written here with
//! the format's own writer around a real runtime's EventPipe stream from shared/testdata)
//! drives the whole aggregator twice: the same profile and metrics bytes both times, and what
//! was saved comes out exactly (every sample, every event, every method range for the
//! symbolizer).
use std::{io::Write, path::PathBuf, sync::Arc};

use clrprobe_pipeline::stream::{
    Aggregator, ClrStream, Namer, ProcessInfo, ProfileKind, Record, Replay, StackRecord,
    raw::{self, RECORDS_FILE, RawItem, RawMeta},
};
use clrprobe_profile::{Frame, FrameKind, pprof};

const PID: u32 = 1484341;
const TRACE: &str = "perfview__speedscope__mixed_managed_external_samples.nettrace";
const SEC: u64 = 1_000_000_000;

struct Names;

impl Namer for Names {
    fn stack(&mut self, _pid: u32, kernel: &[u64], user: &[u64]) -> Vec<Frame> {
        kernel.iter().chain(user.iter()).rev().map(|a| Frame::new(format!("f_{a:x}"), "m", FrameKind::Jit).with_address(*a)).collect()
    }
    fn process_name(&mut self, pid: u32) -> String {
        format!("proc{pid}")
    }
}

fn testdata(name: &str) -> PathBuf {
    clrprobe_tests::corpus::path(name)
}

/// What the stream holds: (first and last event time, suspensions, method ranges, events).
fn stream_facts(bytes: &[u8]) -> (u64, u64, u64, u64, u64) {
    let mut s = ClrStream::new(PID, bytes).unwrap();
    let (mut first, mut last, mut restarts, mut methods, mut total) = (u64::MAX, 0, 0, 0, 0);
    while let Some(e) = s.next_record().unwrap() {
        total += 1;
        first = first.min(e.time_ns);
        last = last.max(e.time_ns);
        // GCRestartEEEnd (3), MethodDCEndVerbose (144) with a code range.
        if e.event_id == 3 && e.provider.as_ref() == "Microsoft-Windows-DotNETRuntime" {
            restarts += 1;
        }
        if e.event_id == 144 && e.provider.ends_with("Rundown") {
            methods += 1;
        }
    }
    (first, last, restarts, methods, total)
}

/// A saved directory: the stream as `PID.nettrace`, CPU samples and ticks each second across
/// it, the process's start and exit.
fn save(dir: &std::path::Path, bytes: &[u8], first: u64, last: u64) {
    std::fs::write(dir.join(format!("{PID}.nettrace")), bytes).unwrap();
    let mut w = std::io::BufWriter::new(std::fs::File::create(dir.join(RECORDS_FILE)).unwrap());
    raw::write_header(&mut w).unwrap();
    let item = |w: &mut std::io::BufWriter<std::fs::File>, i: RawItem| raw::write_item(w, &i).unwrap();
    item(&mut w, RawItem::Meta(RawMeta { freq_hz: 99, start_mono_ns: first, start_unix_ns: 1_700_000_000 * SEC, alloc: true, exceptions: true, contention: true, offcpu: true, version: "test".into() }));
    item(&mut w, RawItem::Record(Record::Started(ProcessInfo { pid: PID, name: "app".into(), container_id: String::new(), runtime_version: "6.0".into() })));
    item(&mut w, RawItem::Maps { pid: PID, time_ns: first, text: "00400000-00401000 r-xp 00000000 08:01 1 /bin/app\n".into() });
    item(&mut w, RawItem::Session { pid: PID, file: format!("{PID}.nettrace") });
    let mut t = first;
    let mut n = 0u64;
    while t <= last + SEC {
        for k in 0..5u64 {
            let user: Arc<[u64]> = Arc::from(vec![0x40_0000 + (n + k) % 7 * 0x10, 0x40_0800]);
            let s = StackRecord { pid: PID, tid: 7 + (k % 2) as u32, comm: Arc::from("worker"), time_ns: t + k * 100_000_000, kernel: Arc::from(vec![]), user, count: 1 };
            item(&mut w, RawItem::Record(Record::Cpu(s)));
        }
        n += 1;
        t += SEC;
        item(&mut w, RawItem::Record(Record::Tick { time_ns: t }));
    }
    item(&mut w, RawItem::Record(Record::Exited { pid: PID, time_ns: t }));
    item(&mut w, RawItem::End { end_ns: None });
    w.flush().unwrap();
}

struct Run {
    cpu: Vec<u8>,
    metrics: String,
    jit: usize,
    events: u64,
    samples: i64,
}

fn replay(dir: &std::path::Path) -> Run {
    let r = Replay::open(dir).unwrap();
    let mut agg = Aggregator::new(r.aggregator_config());
    let mut side = Vec::new();
    let stats = r.run(&mut agg, &mut |i| side.push(i.clone())).unwrap();
    assert!(stats.complete && stats.warnings.is_empty(), "{stats:?}");
    assert!(matches!(side.as_slice(), [RawItem::Maps { pid: PID, .. }]), "the maps go to the symbolizer's side: {side:?}");
    let p = agg.profile(ProfileKind::Cpu, None, 0, &mut Names).unwrap();
    let mut cpu = Vec::new();
    pprof::to_writer(&p, &mut cpu).unwrap();
    Run { cpu, metrics: agg.metrics_text(), jit: agg.take_jit_methods().len(), events: stats.events, samples: p.total(0) }
}

#[test]
fn a_saved_directory_replays_to_the_same_bytes_with_the_streams_counts() {
    let bytes = std::fs::read(testdata(TRACE)).unwrap();
    let (first, last, restarts, methods, total) = stream_facts(&bytes);
    assert!(restarts > 1000 && methods > 100, "{restarts} {methods}");
    let dir = clrprobe_tests::scratch_dir("replay-dir");
    save(&dir, &bytes, first, last);

    let a = replay(&dir);
    let b = replay(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(a.cpu, b.cpu, "the CPU profile bytes differ between two replays");
    assert_eq!(a.metrics, b.metrics);
    assert_eq!((a.jit, a.events), (b.jit, b.events));
    // Every saved sample is in the profile; every method range reaches the symbolizer; every
    // GC pause of the stream is counted.
    let seconds = (last + SEC - first) / SEC + 1;
    assert_eq!(a.samples as u64, seconds * 5);
    assert_eq!(a.jit as u64, methods);
    assert_eq!(a.events, total, "every event of the stream is replayed");
    // The stream's suspensions are the sample profiler's, not GCs: no pause is counted.
    assert!(a.metrics.contains(&format!("clrprobe_gc_pause_seconds_count{{pid=\"{PID}\",process_name=\"app\",container_id=\"\",runtime_version=\"6.0\"}} 0\n")), "{}", a.metrics);
    assert!(a.metrics.contains(&format!("clrprobe_cpu_samples_total{{pid=\"{PID}\",process_name=\"app\",container_id=\"\",runtime_version=\"6.0\"}} {}\n", seconds * 5)), "{}", a.metrics);
}

#[test]
fn a_damaged_directory_is_refused_with_the_reason() {
    let dir = clrprobe_tests::scratch_dir("replay-bad");
    let err = Replay::open(&dir).err().unwrap().to_string();
    assert!(err.contains("records.clrraw") && err.contains("--replay"), "{err}");
    std::fs::write(dir.join(RECORDS_FILE), b"PK\x03\x04 not ours").unwrap();
    let err = Replay::open(&dir).err().unwrap().to_string();
    assert!(err.contains("not a clrprobe --save-raw file"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_fifo_or_a_link_in_place_of_a_stream_is_refused_without_blocking() {
    let bytes = std::fs::read(testdata(TRACE)).unwrap();
    let (first, last, ..) = stream_facts(&bytes);
    for kind in ["fifo", "link"] {
        let dir = clrprobe_tests::scratch_dir("replay-special");
        save(&dir, &bytes, first, last);
        let stream = dir.join(format!("{PID}.nettrace"));
        std::fs::remove_file(&stream).unwrap();
        match kind {
            "fifo" => assert!(std::process::Command::new("mkfifo").arg(&stream).status().unwrap().success()),
            _ => std::os::unix::fs::symlink(dir.join(RECORDS_FILE), &stream).unwrap(),
        }
        // A plain open of a FIFO waits for a writer: the replay runs on a thread and must end.
        let (tx, rx) = std::sync::mpsc::channel();
        let d = dir.clone();
        std::thread::spawn(move || {
            let outcome = Replay::open(&d).and_then(|r| {
                let mut agg = Aggregator::new(r.aggregator_config());
                r.run(&mut agg, &mut |_| {})
            });
            let _ = tx.send(match outcome {
                Ok(stats) => format!("{:?}", stats.warnings),
                Err(e) => e.to_string(),
            });
        });
        let said = rx.recv_timeout(std::time::Duration::from_secs(20)).unwrap_or_else(|_| panic!("{kind}: the replay blocked"));
        assert!(said.contains("not a regular file"), "{kind}: {said}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
