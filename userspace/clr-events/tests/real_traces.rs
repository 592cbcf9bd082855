//! Decodes every runtime event of the real NetTrace recordings in shared/testdata (read with
//! the project's NetTrace reader) and checks counts and values against TraceEvent's baselines.

use std::collections::BTreeMap;

use clr_events::schema::EventSchema;
use clr_events::{ClrEvent, Value, decode, decode_fields, providers};
use clrprobe_eventpipe::nettrace::NetTraceReader;

use clrprobe_tests::corpus::read as load;

fn is_runtime_provider(p: &str) -> bool {
    p == providers::RUNTIME || p == providers::RUNDOWN || p == providers::SAMPLE_PROFILER
}

/// Name of the variant (for counting).
fn variant(ev: &ClrEvent<'_>) -> String {
    let dbg = format!("{ev:?}");
    dbg.split(['(', ' ', '{']).next().unwrap_or("").to_string()
}

#[derive(Default)]
struct Summary {
    /// Decoded events per variant.
    counts: BTreeMap<String, usize>,
    /// Decoded (non-Unknown) events whose layout did not use every payload byte.
    not_exact: BTreeMap<String, usize>,
    method_names: Vec<String>,
    module_paths: Vec<String>,
    type_names: BTreeMap<String, usize>,
    first: BTreeMap<String, String>,
}

/// Reads a whole trace and decodes every runtime-provider event, failing on any decode error.
fn decode_trace(name: &str) -> Summary {
    let bytes = load(name);
    let mut reader = NetTraceReader::new(&bytes[..]).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut s = Summary::default();
    while let Some(e) = reader
        .next_event()
        .unwrap_or_else(|err| panic!("{name}: reader: {err}"))
    {
        let raw = e.raw_event();
        if !is_runtime_provider(raw.provider) {
            continue;
        }
        let ev = decode(&raw).unwrap_or_else(|err| {
            panic!(
                "{name}: {} id {} v{} ({} bytes): {err}",
                raw.provider,
                raw.event_id,
                raw.version,
                raw.payload.len()
            )
        });
        if ev == ClrEvent::Unknown {
            *s.counts
                .entry(format!("Unknown {}/{}", raw.provider, raw.event_id))
                .or_default() += 1;
            continue;
        }
        let v = variant(&ev);
        // A layout that consumed every byte fails when one byte is missing.
        if !raw.payload.is_empty() {
            let mut short = raw;
            short.payload = &raw.payload[..raw.payload.len() - 1];
            if decode(&short).is_ok() {
                *s.not_exact
                    .entry(format!("{v} v{}", raw.version))
                    .or_default() += 1;
            }
        }
        s.first
            .entry(v.clone())
            .or_insert_with(|| format!("{ev:?}"));
        match &ev {
            ClrEvent::MethodLoadVerbose(m)
            | ClrEvent::MethodDcEndVerbose(m)
            | ClrEvent::MethodDcStartVerbose(m) => {
                s.method_names.push(m.full_name());
            }
            ClrEvent::ModuleLoad(m) | ClrEvent::ModuleDcEnd(m) | ClrEvent::ModuleDcStart(m) => {
                s.module_paths.push(
                    m.il_path
                        .to_string_checked()
                        .expect("module path is valid UTF-16"),
                );
            }
            ClrEvent::AllocationTick(t) => {
                let n = t.type_name.map(|n| n.to_string_lossy()).unwrap_or_default();
                *s.type_names.entry(n).or_default() += 1;
            }
            _ => {}
        }
        *s.counts.entry(v).or_default() += 1;
    }
    s
}

fn count(s: &Summary, v: &str) -> usize {
    s.counts.get(v).copied().unwrap_or(0)
}

#[test]
fn objver4_dotnetcore30_counts_and_values_match_traceevent() {
    let s = decode_trace("perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace");
    // Counts from baselines/…objver4.nettrace.baseline.txt (TraceEvent's output).
    for (v, n) in [
        ("ThreadSample", 35161),
        ("ThreadCreated", 14),
        ("ContentionStart", 8),
        ("ContentionStop", 8),
        ("AllocationTick", 35458),
        ("GcGlobalHeapHistory", 478),
        ("GcHeapStats", 478),
        ("GcPerHeapHistory", 478),
        ("GcRestartEeBegin", 6002),
        ("GcRestartEeEnd", 6002),
        ("GcStart", 478),
        ("GcEnd", 478),
        ("GcSuspendEeBegin", 5953),
        ("GcSuspendEeEnd", 5953),
        ("GcTriggered", 478),
        ("ModuleLoad", 14),
        ("MethodLoadVerbose", 53),
    ] {
        assert_eq!(count(&s, v), n, "{v}: counts {:?}", s.counts);
    }
    assert!(
        s.not_exact.is_empty(),
        "layouts shorter than real payloads: {:?}",
        s.not_exact
    );

    // Values from the baseline's first-event lines.
    assert!(
        s.method_names
            .iter()
            .any(|n| n == "System.Text.Unicode.Utf16Utility.GetPointerToFirstInvalidChar")
    );
    assert!(
        s.module_paths.iter().any(|p| p
            == r"C:\Program Files\dotnet\shared\Microsoft.NETCore.App\3.0.0-preview5-27626-15\System.Collections.dll"),
        "{:?}",
        s.module_paths
    );
    assert!(
        s.type_names.contains_key("System.Object[]"),
        "{:?}",
        s.type_names.keys().take(20).collect::<Vec<_>>()
    );
    let first_thread = &s.first["ThreadCreated"];
    assert!(
        first_thread.contains("managed_thread_id: 1762986694672"),
        "{first_thread}"
    ); // 0x19A7A321810
    assert!(
        first_thread.contains("os_thread_id: 3444"),
        "{first_thread}"
    );
    let first_suspend = &s.first["GcSuspendEeBegin"];
    assert!(
        first_suspend.contains("SuspendOther") && first_suspend.contains("count: Some(4294967295)"),
        "{first_suspend}"
    );
    let first_start = &s.first["GcStart"];
    assert!(
        first_start.contains("count: 1,") && first_start.contains("AllocSmall"),
        "{first_start}"
    );
}

#[test]
fn objver4_gc_history_and_contention_values() {
    let bytes = load("perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace");
    let mut reader = NetTraceReader::new(&bytes[..]).unwrap();
    let (mut per_heap, mut global, mut stats, mut stop) = (None, None, None, None);
    while let Some(e) = reader.next_event().unwrap() {
        let raw = e.raw_event();
        match decode(&raw).unwrap() {
            ClrEvent::GcPerHeapHistory(h) if per_heap.is_none() => per_heap = Some(h),
            ClrEvent::GcGlobalHeapHistory(g) if global.is_none() => global = Some((g, raw.version)),
            ClrEvent::GcHeapStats(h) if stats.is_none() => stats = Some((h, raw.version)),
            ClrEvent::ContentionStop(c) if stop.is_none() => stop = Some(c),
            _ => {}
        }
    }
    // Baseline: first PerHeapHistory has ExtraGen0Commit 3,005,960, Count 4 (gen0..LOH),
    // compact_high_frag, Gen0 SizeBefore 3,154,608, NewAllocation 3,510,080.
    let h = per_heap.expect("PerHeapHistory present");
    assert_eq!(h.extra_gen0_commit, 3_005_960);
    assert_eq!(h.generations.len(), 4);
    assert_eq!(h.generations[0].size_before, 3_154_608);
    assert_eq!(h.generations[0].size_after, 24);
    assert_eq!(h.generations[0].new_allocation, 3_510_080);
    assert_eq!(h.generations[0].pinned_surv, 4_936);
    assert_eq!(h.generations[0].non_pinned_surv, 170_568);
    assert_eq!(
        h.compact_mechanisms,
        0x8000_0000 | (1 << 1),
        "compact_high_frag"
    );
    // Baseline: FinalYoungestDesired 0x358F40, 1 heap, gen 0, AllocSmall, mechanisms
    // Compaction|Promotion|CardBundles.
    let (g, gv) = global.expect("GlobalHeapHistory present");
    assert_eq!(g.final_youngest_desired, 0x358F40);
    assert_eq!((g.num_heaps, g.condemned_generation), (1, 0));
    assert_eq!(g.reason.name(), "AllocSmall");
    assert_eq!(g.global_mechanisms, (1 << 1) | (1 << 2) | (1 << 4));
    assert_eq!(
        g.mechanisms().names(),
        ["Compaction", "Promotion", "CardBundles"]
    );
    assert!(gv >= 2, "GlobalHeapHistory version {gv}");
    let (st, sv) = stats.expect("HeapStats present");
    assert_eq!(st.total_heap_size(), 0x3BEA8, "HeapStats v{sv}");
    assert_eq!(
        (
            st.pinned_object_count,
            st.sink_block_count,
            st.gc_handle_count
        ),
        (2, 14, 55)
    );
    let c = stop.expect("ContentionStop present");
    assert!(
        (c.duration_ns.unwrap() - 137_400_255.241_591).abs() < 1e-3,
        "{c:?}"
    );
}

#[test]
fn speedscope_rundown_traces_decode_without_error() {
    for (name, pointer_size_note) in [
        (
            "perfview__speedscope__mixed_managed_external_samples.nettrace",
            "x64",
        ),
        ("perfview__speedscope__only_managed_samples.nettrace", "x64"),
        (
            "perfview__speedscope__HeartRateMonitor.10068.nettrace.zip",
            "ARM32",
        ),
        (
            "perfview__speedscope__VoiceMemo.23092.nettrace.zip",
            "ARM32",
        ),
    ] {
        let s = decode_trace(name);
        let rundown_methods = count(&s, "MethodDcEndVerbose");
        assert!(
            rundown_methods > 100,
            "{name} ({pointer_size_note}): {:?}",
            s.counts
        );
        assert!(count(&s, "ModuleDcEnd") > 0, "{name}: {:?}", s.counts);
        assert!(count(&s, "ThreadSample") > 0, "{name}: {:?}", s.counts);
        assert_eq!(
            (count(&s, "DcEndInit"), count(&s, "DcEndComplete")),
            (1, 1),
            "{name}: {:?}",
            s.counts
        );
        assert!(
            s.not_exact.is_empty(),
            "{name}: layouts shorter than real payloads: {:?}",
            s.not_exact
        );
        assert!(
            s.method_names.iter().any(|n| n.starts_with("System.")),
            "{name}: no System.* method among {} rundown methods",
            s.method_names.len()
        );
        assert!(
            s.module_paths
                .iter()
                .any(|p| p.ends_with("System.Private.CoreLib.dll")),
            "{name}: {:?}",
            s.module_paths
        );
        eprintln!("{name}: {:?}", s.counts);
    }
}

#[test]
fn arraytypes_eventsource_fields_match_oracle() {
    let bytes = load("perfview__eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace");
    let mut reader = NetTraceReader::new(&bytes[..]).unwrap();
    let mut found = 0;
    let mut runtime_events = 0;
    while let Some(e) = reader.next_event().unwrap() {
        let raw = e.raw_event();
        if is_runtime_provider(raw.provider) {
            decode(&raw).unwrap_or_else(|err| panic!("{}/{}: {err}", raw.provider, raw.event_id));
            runtime_events += 1;
            continue;
        }
        let m = e.metadata();
        if m.provider != "TestEventSource0" || m.name != "TestEvent1" {
            continue;
        }
        let schema: &EventSchema = m.schema.as_ref().expect("TestEvent1 has a schema");
        let fields = decode_fields(schema, e.payload()).expect("TestEvent1 decodes");
        let arg0: Vec<u64> = match &fields[0].1 {
            Value::Array(v) => v.iter().map(|x| x.as_u64().unwrap()).collect(),
            other => panic!("arg0 {other:?}"),
        };
        assert_eq!(
            arg0,
            [
                2032854139, 1608221689, 1470019200, 199494339, 1238846140, 1366609043
            ]
        );
        let arg1: Vec<i64> = match &fields[1].1 {
            Value::Array(v) => v.iter().map(|x| x.as_i64().unwrap()).collect(),
            other => panic!("arg1 {other:?}"),
        };
        assert_eq!(arg1, [26494, 17115, -7229, 18850, 27931]);
        assert_eq!(fields[2].1.as_i64(), Some(2033417279));
        found += 1;
    }
    assert_eq!(found, 1, "TestEvent1 occurrences");
    assert!(runtime_events > 0);
}

#[test]
fn mutated_real_payloads_never_panic() {
    let bytes = load("perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace");
    let mut reader = NetTraceReader::new(&bytes[..]).unwrap();
    let mut per_kind: BTreeMap<(String, u16), usize> = BTreeMap::new();
    let mut seed = 0x1234_5678_9ABC_DEF1u64;
    let mut tried = 0;
    while let Some(e) = reader.next_event().unwrap() {
        let raw = e.raw_event();
        if !is_runtime_provider(raw.provider) {
            continue;
        }
        let n = per_kind
            .entry((raw.provider.to_string(), raw.event_id))
            .or_default();
        if *n >= 20 {
            continue;
        }
        *n += 1;
        for i in 0..raw.payload.len() {
            let mut m = raw.payload.to_vec();
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            m[i] ^= (seed as u8) | 1;
            let mut ev = raw;
            ev.payload = &m;
            let _ = decode(&ev);
            ev.payload = &m[..i];
            let _ = decode(&ev);
            tried += 1;
        }
    }
    assert!(tried > 1000, "{tried}");
}
