//! Checks the keyword and event-id constants against the manifests in shared/specs.

use std::collections::HashSet;
use std::path::PathBuf;

use clr_events::{ids, keywords, providers};

fn specs_dir() -> PathBuf {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/specs"
    ));
    assert!(
        dir.is_dir(),
        "reference specs not found at {} (expected shared/ beside the checkout)",
        dir.display()
    );
    dir
}

fn read(name: &str) -> String {
    let path = specs_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn attr<'a>(element: &'a str, name: &str) -> Option<&'a str> {
    let key = format!("{name}=\"");
    let start = element.find(&key)? + key.len();
    let len = element[start..].find('"')?;
    Some(&element[start..start + len])
}

/// (event value, symbol) of every `<event .../>` element in `text`.
fn events(text: &str) -> HashSet<(u16, String)> {
    let mut out = HashSet::new();
    for chunk in text.split("<event ").skip(1) {
        let element = &chunk[..chunk.find("/>").unwrap_or(chunk.len())];
        if let (Some(v), Some(sym)) = (attr(element, "value"), attr(element, "symbol"))
            && let Ok(v) = v.parse()
        {
            out.insert((v, sym.to_string()));
        }
    }
    out
}

/// The part of the 2016 manifest that belongs to one provider.
fn provider_section<'a>(man: &'a str, provider: &str) -> &'a str {
    let start = man
        .find(&format!("<provider name=\"{provider}\""))
        .unwrap_or_else(|| panic!("provider {provider} not in manifest"));
    let rest = &man[start + 10..];
    let end = rest
        .find("<provider ")
        .map(|e| start + 10 + e)
        .unwrap_or(man.len());
    &man[start..end]
}

#[test]
fn runtime_keywords_match_manifest() {
    let excerpts = read("ClrEtwAll.runtime-excerpts.man");
    let rundown_start = excerpts
        .find("<keywords provider=\"Microsoft-Windows-DotNETRuntimeRundown\">")
        .unwrap();
    let runtime_part = &excerpts[..rundown_start];
    let rundown_part = &excerpts[rundown_start..];
    for (name, mask) in keywords::runtime::ALL {
        let want = format!("<keyword name=\"{name}\" mask=\"{mask:#x}\"/>");
        assert!(
            runtime_part.contains(&want),
            "runtime keyword not in manifest: {want}"
        );
    }
    for (name, mask) in keywords::rundown::ALL {
        let want = format!("<keyword name=\"{name}\" mask=\"{mask:#x}\"/>");
        assert!(
            rundown_part.contains(&want),
            "rundown keyword not in manifest: {want}"
        );
    }
    // Every runtime keyword in the manifest is covered.
    let declared = runtime_part.matches("<keyword name=").count();
    assert_eq!(
        declared,
        keywords::runtime::ALL.len(),
        "runtime keyword count differs from manifest"
    );
    // Spot checks named in the brief.
    assert_eq!(keywords::runtime::GC, 0x1);
    assert_eq!(keywords::runtime::LOADER, 0x8);
    assert_eq!(keywords::runtime::STACK, 0x4000_0000);
    assert_eq!(keywords::runtime::TYPE_DIAGNOSTIC, 0x80_0000_0000);
}

#[test]
fn event_ids_match_manifest() {
    let man = read("ClrEtwAll.2016.man");
    let excerpts = read("ClrEtwAll.runtime-excerpts.man");
    let mut runtime = events(provider_section(&man, providers::RUNTIME));
    runtime.extend(events(&excerpts));
    let rundown = events(provider_section(&man, providers::RUNDOWN));

    use ids::runtime as r;
    let runtime_checks: &[(u16, &str)] = &[
        (r::GC_START, "GCStart_V2"),
        (r::GC_END, "GCEnd_V1"),
        (r::GC_RESTART_EE_END, "GCRestartEEEnd_V1"),
        (r::GC_HEAP_STATS, "GCHeapStats_V2"),
        (r::GC_RESTART_EE_BEGIN, "GCRestartEEBegin_V1"),
        (r::GC_SUSPEND_EE_END, "GCSuspendEEEnd_V1"),
        (r::GC_SUSPEND_EE_BEGIN, "GCSuspendEEBegin_V1"),
        (r::GC_ALLOCATION_TICK, "GCAllocationTick_V4"),
        (
            r::GC_SAMPLED_OBJECT_ALLOCATION_HIGH,
            "GCSampledObjectAllocationHigh",
        ),
        (
            r::GC_SAMPLED_OBJECT_ALLOCATION_LOW,
            "GCSampledObjectAllocationLow",
        ),
        (r::GC_TRIGGERED, "GCTriggered"),
        (r::EXCEPTION_THROWN, "ExceptionThrown_V1"),
        (r::CONTENTION_START, "ContentionStart_V2"),
        (r::THREAD_CREATED, "ThreadCreated"),
        (r::CONTENTION_LOCK_CREATED, "ContentionLockCreated"),
        (r::CONTENTION_STOP, "ContentionStop_V1"),
        (r::METHOD_LOAD, "MethodLoad_V2"),
        (r::METHOD_UNLOAD, "MethodUnload_V2"),
        (r::METHOD_LOAD_VERBOSE, "MethodLoadVerbose_V2"),
        (r::METHOD_UNLOAD_VERBOSE, "MethodUnloadVerbose_V2"),
        (r::MODULE_LOAD, "ModuleLoad_V2"),
        (r::MODULE_UNLOAD, "ModuleUnload_V2"),
        (r::EXCEPTION_CATCH_START, "ExceptionCatchStart"),
        (r::EXCEPTION_CATCH_STOP, "ExceptionCatchStop"),
        (r::EXCEPTION_FINALLY_START, "ExceptionFinallyStart"),
        (r::EXCEPTION_FINALLY_STOP, "ExceptionFinallyStop"),
        (r::EXCEPTION_FILTER_START, "ExceptionFilterStart"),
        (r::EXCEPTION_FILTER_STOP, "ExceptionFilterStop"),
        (r::EXCEPTION_THROWN_STOP, "ExceptionThrownStop"),
        (r::ALLOCATION_SAMPLED, "AllocationSampled"),
    ];
    for (id, symbol) in runtime_checks {
        assert!(
            runtime.contains(&(*id, symbol.to_string())),
            "runtime event {id} is not {symbol} in the manifests"
        );
    }

    use ids::rundown as d;
    let rundown_checks: &[(u16, &str)] = &[
        (d::METHOD_DC_START, "MethodDCStart_V2"),
        (d::METHOD_DC_END, "MethodDCEnd_V2"),
        (d::METHOD_DC_START_VERBOSE, "MethodDCStartVerbose_V2"),
        (d::METHOD_DC_END_VERBOSE, "MethodDCEndVerbose_V2"),
        (d::DC_START_COMPLETE, "DCStartComplete_V1"),
        (d::DC_END_COMPLETE, "DCEndComplete_V1"),
        (d::DC_START_INIT, "DCStartInit_V1"),
        (d::DC_END_INIT, "DCEndInit_V1"),
        (d::MODULE_DC_START, "ModuleDCStart_V2"),
        (d::MODULE_DC_END, "ModuleDCEnd_V2"),
        (d::THREAD_DC, "ThreadDC"),
    ];
    for (id, symbol) in rundown_checks {
        assert!(
            rundown.contains(&(*id, symbol.to_string())),
            "rundown event {id} is not {symbol} in the manifest"
        );
    }

    // GCPerHeapHistory_V3 (204) and GCGlobalHeapHistory_V2..V4 (205) are newer than the 2016
    // manifest and not in the excerpts; the excerpts' task comment lists their opcodes, which
    // the runtime manifest uses as their event values too.
    assert!(excerpts.contains("GCPerHeapHistory 204, GCGlobalHeapHistory 205"));
    assert_eq!(
        (r::GC_PER_HEAP_HISTORY, r::GC_GLOBAL_HEAP_HISTORY),
        (204, 205)
    );
}
