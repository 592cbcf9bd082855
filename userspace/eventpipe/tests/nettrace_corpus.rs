//! Conformance: every recording in shared/testdata/nettrace, against the oracles of its
//! README.md and baselines/*.baseline.txt (TraceEvent's output for the same file).

mod nettrace_support;

use std::collections::BTreeMap;

use clr_events::schema::{FieldType, TypeCode};
use clrprobe_eventpipe::nettrace::{FormatVersion, NetTraceError, StreamStatus};
use nettrace_support::{ARRAYTYPES, CHECKPOINTS, Ev, OBJVER4, P, Read_, corpus_dir, load, read_all};

const RT: &str = "Microsoft-Windows-DotNETRuntime";
const RUNDOWN: &str = "Microsoft-Windows-DotNETRuntimeRundown";
const PRIVATE: &str = "Microsoft-Windows-DotNETRuntimePrivate";
const SAMPLER: &str = "Microsoft-DotNETCore-SampleProfiler";

/// TraceEvent names of runtime-native events (whose metadata has no name) -> (provider, ids),
/// from the ClrEtwAll manifest.
const NATIVE_NAMES: &[(&str, &str, &[u32])] = &[
    ("Microsoft-DotNETCore-SampleProfiler/Thread/Sample", SAMPLER, &[0]),
    ("Microsoft-Windows-DotNETRuntime/AppDomainResourceManagement/ThreadCreated", RT, &[85]),
    ("Microsoft-Windows-DotNETRuntime/Contention/Start", RT, &[81]),
    ("Microsoft-Windows-DotNETRuntime/Contention/Stop", RT, &[91]),
    // IncreaseMemoryPressure / DecreaseMemoryPressure: TraceEvent has no parser, names them by task.
    ("Microsoft-Windows-DotNETRuntime/GC", RT, &[200, 201]),
    ("Microsoft-Windows-DotNETRuntime/GC/AllocationTick", RT, &[10]),
    ("Microsoft-Windows-DotNETRuntime/GC/BulkMovedObjectRanges", RT, &[22]),
    ("Microsoft-Windows-DotNETRuntime/GC/FinalizersStart", RT, &[14]),
    ("Microsoft-Windows-DotNETRuntime/GC/FinalizersStop", RT, &[13]),
    ("Microsoft-Windows-DotNETRuntime/GC/GenerationRange", RT, &[23]),
    ("Microsoft-Windows-DotNETRuntime/GC/GlobalHeapHistory", RT, &[205]),
    ("Microsoft-Windows-DotNETRuntime/GC/HeapStats", RT, &[4]),
    ("Microsoft-Windows-DotNETRuntime/GC/MarkWithType", RT, &[202]),
    ("Microsoft-Windows-DotNETRuntime/GC/PerHeapHistory", RT, &[204]),
    ("Microsoft-Windows-DotNETRuntime/GC/PinObjectAtGCTime", RT, &[33]),
    ("Microsoft-Windows-DotNETRuntime/GC/RestartEEStart", RT, &[7]),
    ("Microsoft-Windows-DotNETRuntime/GC/RestartEEStop", RT, &[3]),
    ("Microsoft-Windows-DotNETRuntime/GC/Start", RT, &[1]),
    ("Microsoft-Windows-DotNETRuntime/GC/Stop", RT, &[2]),
    ("Microsoft-Windows-DotNETRuntime/GC/SuspendEEStart", RT, &[9]),
    ("Microsoft-Windows-DotNETRuntime/GC/SuspendEEStop", RT, &[8]),
    ("Microsoft-Windows-DotNETRuntime/GC/Triggered", RT, &[35]),
    ("Microsoft-Windows-DotNETRuntime/Loader/AssemblyLoad", RT, &[154]),
    ("Microsoft-Windows-DotNETRuntime/Loader/DomainModuleLoad", RT, &[151]),
    ("Microsoft-Windows-DotNETRuntime/Loader/ModuleLoad", RT, &[152]),
    ("Microsoft-Windows-DotNETRuntime/Method/JittingStarted", RT, &[145]),
    ("Microsoft-Windows-DotNETRuntime/Method/LoadVerbose", RT, &[143]),
    ("Microsoft-Windows-DotNETRuntime/Method/R2RGetEntryPoint", RT, &[159]),
    ("Microsoft-Windows-DotNETRuntime/ThreadPool/Dequeue", RT, &[62]),
    ("Microsoft-Windows-DotNETRuntime/ThreadPool/Enqueue", RT, &[61]),
    ("Microsoft-Windows-DotNETRuntime/ThreadPoolWorkerThread/Start", RT, &[50]),
    ("Microsoft-Windows-DotNETRuntime/ThreadPoolWorkerThread/Wait", RT, &[57]),
    ("Microsoft-Windows-DotNETRuntime/ThreadPoolWorkerThreadAdjustment/Adjustment", RT, &[55]),
    ("Microsoft-Windows-DotNETRuntime/ThreadPoolWorkerThreadAdjustment/Sample", RT, &[54]),
    ("Microsoft-Windows-DotNETRuntime/ThreadPoolWorkerThreadAdjustment/Stats", RT, &[56]),
    ("Microsoft-Windows-DotNETRuntimePrivate/GC/PinPlugAtGCTime", PRIVATE, &[199]),
    ("Microsoft-Windows-DotNETRuntimeRundown/Loader/AppDomainDCStop", RUNDOWN, &[158]),
    ("Microsoft-Windows-DotNETRuntimeRundown/Loader/AssemblyDCStop", RUNDOWN, &[156]),
    ("Microsoft-Windows-DotNETRuntimeRundown/Loader/DomainModuleDCStop", RUNDOWN, &[152]),
    ("Microsoft-Windows-DotNETRuntimeRundown/Loader/ModuleDCStop", RUNDOWN, &[154]),
    ("Microsoft-Windows-DotNETRuntimeRundown/Method/DCStopComplete", RUNDOWN, &[146]),
    ("Microsoft-Windows-DotNETRuntimeRundown/Method/DCStopInit", RUNDOWN, &[148]),
    ("Microsoft-Windows-DotNETRuntimeRundown/Runtime/Start", RUNDOWN, &[187]),
    (
        "Microsoft-Windows-DotNETRuntimeRundown/ExecutionCheckpointRundown/ExecutionCheckpointDCEnd",
        RUNDOWN,
        &[300],
    ),
];

/// One line of a baseline: event type, count, and the example event's time and thread.
struct BaselineLine {
    name: String,
    count: usize,
    msec: f64,
    tid: u64,
}

fn attr<'a>(line: &'a str, key: &str) -> &'a str {
    let at = line.find(&format!(" {key}=")).unwrap_or_else(|| panic!("no {key} in {line}"));
    let rest = line[at + key.len() + 2..].trim_start();
    let rest = rest.strip_prefix('"').expect("quoted attribute");
    &rest[..rest.find('"').expect("closing quote")]
}

fn baseline(file: &str) -> Vec<BaselineLine> {
    let path = corpus_dir().join("baselines").join(format!("{file}.baseline.txt"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let text = text.trim_start_matches('\u{feff}');
    let lines: Vec<BaselineLine> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut parts = l.splitn(3, ", ");
            let name = parts.next().expect("name").to_string();
            let count = parts.next().expect("count").trim().parse().expect("count is a number");
            let ev = parts.next().expect("event");
            BaselineLine {
                name,
                count,
                msec: attr(ev, "MSec").trim().parse().expect("MSec"),
                tid: attr(ev, "TID").parse().expect("TID"),
            }
        })
        .collect();
    assert!(!lines.is_empty(), "{} is empty", path.display());
    lines
}

/// Whether `e` is of the baseline type `name`.
fn matches(name: &str, e: &Ev) -> bool {
    if let Some((_, provider, ids)) = NATIVE_NAMES.iter().find(|(n, _, _)| *n == name) {
        return e.provider == *provider && ids.contains(&e.event_id);
    }
    // EventSource events carry their name: "<provider>/<name>[/<opcode>]".
    let (provider, rest) = name.split_once('/').expect("provider/name");
    let (ev_name, opcode) = match rest.split_once('/') {
        Some((n, op)) => (n, op.parse::<u8>().expect("opcode suffix")),
        None => (rest, 0),
    };
    assert!(!ev_name.is_empty());
    e.provider == provider && e.name == ev_name && e.opcode == opcode
}

/// Every event type the baseline lists has exactly its count, and its first event has the
/// baseline's example time (ms since session start) and thread.
fn check_baseline(file: &str, read: &Read_) {
    let lines = baseline(file);
    for l in &lines {
        let of_type: Vec<&Ev> = read.events.iter().filter(|e| matches(&l.name, e)).collect();
        assert_eq!(of_type.len(), l.count, "{file}: count of {}", l.name);
        let first = of_type[0];
        let msec = first.time_ns as f64 / 1e6;
        assert!(
            (msec - l.msec).abs() < 0.0005,
            "{file}: first {} at {msec:.4} ms, baseline {:.4} ms",
            l.name,
            l.msec
        );
        assert_eq!(first.thread_id, l.tid, "{file}: thread of first {}", l.name);
    }
}

fn assert_time_ordered(read: &Read_) {
    for w in read.events.windows(2) {
        assert!(w[0].timestamp <= w[1].timestamp, "events out of order: {:?} then {:?}", w[0].timestamp, w[1].timestamp);
    }
}

fn assert_clean(read: &Read_) {
    assert!(read.error.is_none(), "read error: {:?}", read.error);
    assert_eq!(read.status, StreamStatus::Complete);
    assert_eq!(read.stats.unknown_metadata_events, 0);
    assert_eq!(read.stats.unknown_stack_ids, 0);
    assert_eq!(read.stats.events as usize, read.events.len());
    assert_time_ordered(read);
}

const NETPERF: &str = "perfview__eventpipe-dotnetcore2.1-linux-x64-tracelogging.netperf";

#[test]
fn objver4_header_processors_counts_and_stacks() {
    let read = read_all(&load(OBJVER4)).expect("header");
    assert_clean(&read);
    let i = &read.info;
    assert_eq!(i.format, FormatVersion::V4);
    assert_eq!(i.trace_object_version, 4);
    assert_eq!(i.pointer_size, 8);
    assert_eq!(i.process_id, Some(10064));
    assert_eq!(i.number_of_processors, Some(4));
    assert_eq!(i.qpc_frequency, 3_124_099);
    assert_eq!(i.sync_time_qpc, 100_935_252_313);
    assert_eq!(i.sync_time_utc.dotnet_ticks(), 636_962_398_197_540_000);

    let mut per_cpu = BTreeMap::new();
    for e in &read.events {
        assert!(e.processor < 4, "processor {} out of range", e.processor);
        *per_cpu.entry(e.processor).or_insert(0usize) += 1;
    }
    assert_eq!(per_cpu.len(), 4, "all 4 processors used: {per_cpu:?}");

    check_baseline(OBJVER4, &read);

    // CPU samples come with their stacks (resolved through stack blocks), 8-byte IPs.
    let samples: Vec<&Ev> = read.events.iter().filter(|e| e.provider == SAMPLER).collect();
    assert!(samples.iter().all(|e| !e.stack.is_empty()), "every sample has a stack");
    assert!(samples.iter().any(|e| e.stack.iter().any(|&ip| ip > u64::from(u32::MAX))));
    // Runtime events have empty metadata: no name, empty schema.
    let gc_start = read.events.iter().find(|e| e.provider == RT && e.event_id == 1).expect("GC/Start");
    assert_eq!(gc_start.name, "");
    assert_eq!(gc_start.version, 2);
}

#[test]
fn arraytypes_counts_array_payloads_schema_and_opcode() {
    let bytes = load(ARRAYTYPES);
    let read = read_all(&bytes).expect("header");
    assert_clean(&read);
    assert_eq!(read.info.process_id, Some(26240));
    check_baseline(ARRAYTYPES, &read);

    let e1 = read.events.iter().find(|e| e.name == "TestEvent1").expect("TestEvent1");
    let mut p = P(&e1.payload);
    let n = p.u16();
    let arg0: Vec<u32> = (0..n).map(|_| p.u32()).collect();
    let n = p.u16();
    let arg1: Vec<i16> = (0..n).map(|_| p.i16()).collect();
    let arg2 = p.i64();
    assert!(p.is_empty(), "{} bytes left in {:02x?}", p.0.len(), e1.payload);
    assert_eq!(arg0, [2032854139, 1608221689, 1470019200, 199494339, 1238846140, 1366609043]);
    assert_eq!(arg1, [26494, 17115, -7229, 18850, 27931]);
    assert_eq!(arg2, 2033417279);

    let e3 = read.events.iter().find(|e| e.name == "TestEvent3").expect("TestEvent3");
    assert_eq!(e3.opcode, 24);

    // The V2Params tag gives the array field types.
    let mut r = clrprobe_eventpipe::nettrace::NetTraceReader::new(&bytes[..]).expect("header");
    let mut seen = false;
    while let Some(e) = r.next_event().expect("event") {
        if e.metadata().name == "TestEvent1" {
            let schema = e.metadata().schema.clone().expect("representable schema");
            let f: Vec<(&str, &FieldType)> = schema.fields.iter().map(|f| (f.name.as_str(), &f.ty)).collect();
            assert_eq!(f.len(), 3);
            assert_eq!(f[0], ("arg0", &FieldType::Array(Box::new(FieldType::Primitive(TypeCode::UInt32)))));
            assert_eq!(f[1], ("arg1", &FieldType::Array(Box::new(FieldType::Primitive(TypeCode::Int16)))));
            assert_eq!(f[2], ("arg2", &FieldType::Primitive(TypeCode::Int64)));
            let raw = e.raw_event();
            assert_eq!((raw.provider, raw.event_id, raw.pointer_size), ("TestEventSource0", 5, 8));
            assert_eq!(raw.payload.len(), 2 + 6 * 4 + 2 + 5 * 2 + 8);
            seen = true;
        }
    }
    assert!(seen);
}

#[test]
fn execution_checkpoints_times() {
    let read = read_all(&load(CHECKPOINTS)).expect("header");
    assert_clean(&read);
    check_baseline(CHECKPOINTS, &read);
    let mut got = Vec::new();
    for e in &read.events {
        assert_eq!((e.provider.as_str(), e.event_id), (RUNDOWN, 300));
        let mut p = P(&e.payload);
        let _clr_instance = p.u16();
        let name = p.utf16z();
        let ts = p.i64();
        let ms = (ts - read.info.sync_time_qpc) as f64 * 1000.0 / read.info.qpc_frequency as f64;
        got.push((name, (ms * 100.0).round() / 100.0));
    }
    let want = [("RuntimeInit", -15.97), ("RuntimeSuspend", 11.91), ("RuntimeResumed", 12.20)];
    assert_eq!(got.len(), 3);
    for (name, ms) in want {
        let g = got.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("{name} missing: {got:?}"));
        assert!((g.1 - ms).abs() < 0.001, "{name}: {} ms, want {ms}", g.1);
    }
}

#[test]
fn netperf_v3_is_a_typed_error() {
    match read_all(&load(NETPERF)) {
        Err(NetTraceError::UnsupportedNetPerf) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("NetPerf accepted"),
    }
}

/// Files without a README oracle: whole, ordered, stacks resolved; pointer size and process id
/// agree with what the README and file names say.
#[test]
fn speedscope_recordings() {
    let cases: &[(&str, u32, Option<u64>)] = &[
        ("perfview__speedscope__mixed_managed_external_samples.nettrace", 8, None),
        ("perfview__speedscope__only_managed_samples.nettrace", 8, None),
        ("perfview__speedscope__HeartRateMonitor.10068.nettrace.zip", 4, Some(10068)),
        ("perfview__speedscope__VoiceMemo.23092.nettrace.zip", 4, Some(23092)),
    ];
    for &(file, psize, pid) in cases {
        let read = read_all(&load(file)).expect("header");
        assert_clean(&read);
        assert_eq!(read.info.pointer_size, psize, "{file}");
        if let Some(pid) = pid {
            assert_eq!(read.info.process_id, Some(pid), "{file}");
        }
        let samples: Vec<&Ev> = read.events.iter().filter(|e| e.provider == SAMPLER).collect();
        assert!(!samples.is_empty(), "{file}: no samples");
        assert!(samples.iter().all(|e| !e.stack.is_empty()), "{file}: sample without stack");
        if psize == 4 {
            assert!(samples.iter().flat_map(|e| &e.stack).all(|&ip| ip <= u64::from(u32::MAX)));
        }
        // rundown present: MethodDCEndVerbose events
        assert!(read.events.iter().any(|e| e.provider == RUNDOWN && e.event_id == 144), "{file}: no rundown");
    }
}

/// Every file of the corpus directory is covered by one of the tests above.
#[test]
fn every_corpus_file_is_covered() {
    let covered = [
        OBJVER4,
        ARRAYTYPES,
        CHECKPOINTS,
        NETPERF,
        "perfview__speedscope__mixed_managed_external_samples.nettrace",
        "perfview__speedscope__only_managed_samples.nettrace",
        "perfview__speedscope__HeartRateMonitor.10068.nettrace.zip",
        "perfview__speedscope__VoiceMemo.23092.nettrace.zip",
    ];
    for entry in std::fs::read_dir(corpus_dir()).expect("corpus dir") {
        let name = entry.expect("entry").file_name().into_string().expect("utf8 name");
        if name == "README.md" || name == "baselines" {
            continue;
        }
        assert!(covered.contains(&name.as_str()), "corpus file {name} has no test");
    }
    for entry in std::fs::read_dir(corpus_dir().join("baselines")).expect("baselines") {
        let name = entry.expect("entry").file_name().into_string().expect("utf8 name");
        let file = name.trim_end_matches(".baseline.txt");
        assert!(covered.contains(&file), "baseline {name} has no test");
    }
}

/// The NetPerf baseline lists events of a format this reader refuses; its oracle is the error.
#[test]
fn netperf_baseline_exists_and_is_answered_by_the_error() {
    assert!(!baseline(NETPERF).is_empty());
    assert!(matches!(read_all(&load(NETPERF)), Err(NetTraceError::UnsupportedNetPerf)));
}
