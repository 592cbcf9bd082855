//! Keyword masks of the runtime providers (checked against the manifests by
//! `tests/manifest_constants.rs`).

/// Microsoft-Windows-DotNETRuntime keywords.
pub mod runtime {
    pub const GC: u64 = 0x1;
    pub const GC_HANDLE: u64 = 0x2;
    pub const ASSEMBLY_LOADER: u64 = 0x4;
    pub const LOADER: u64 = 0x8;
    pub const JIT: u64 = 0x10;
    pub const NGEN: u64 = 0x20;
    pub const START_ENUMERATION: u64 = 0x40;
    pub const END_ENUMERATION: u64 = 0x80;
    pub const SECURITY: u64 = 0x400;
    pub const APP_DOMAIN_RESOURCE_MANAGEMENT: u64 = 0x800;
    pub const JIT_TRACING: u64 = 0x1000;
    pub const INTEROP: u64 = 0x2000;
    pub const CONTENTION: u64 = 0x4000;
    pub const EXCEPTION: u64 = 0x8000;
    pub const THREADING: u64 = 0x10000;
    pub const JITTED_METHOD_IL_TO_NATIVE_MAP: u64 = 0x20000;
    pub const OVERRIDE_AND_SUPPRESS_NGEN_EVENTS: u64 = 0x40000;
    pub const TYPE: u64 = 0x80000;
    pub const GC_HEAP_DUMP: u64 = 0x100000;
    pub const GC_SAMPLED_OBJECT_ALLOCATION_HIGH: u64 = 0x200000;
    pub const GC_HEAP_SURVIVAL_AND_MOVEMENT: u64 = 0x400000;
    pub const GC_HEAP_COLLECT: u64 = 0x800000;
    pub const GC_HEAP_AND_TYPE_NAMES: u64 = 0x1000000;
    pub const GC_SAMPLED_OBJECT_ALLOCATION_LOW: u64 = 0x2000000;
    pub const PERF_TRACK: u64 = 0x20000000;
    pub const STACK: u64 = 0x40000000;
    pub const THREAD_TRANSFER: u64 = 0x80000000;
    pub const DEBUGGER: u64 = 0x100000000;
    pub const MONITORING: u64 = 0x200000000;
    pub const CODE_SYMBOLS: u64 = 0x400000000;
    pub const EVENT_SOURCE: u64 = 0x800000000;
    pub const COMPILATION: u64 = 0x1000000000;
    pub const COMPILATION_DIAGNOSTIC: u64 = 0x2000000000;
    pub const METHOD_DIAGNOSTIC: u64 = 0x4000000000;
    pub const TYPE_DIAGNOSTIC: u64 = 0x8000000000;
    pub const JIT_INSTRUMENTATION_DATA: u64 = 0x10000000000;
    pub const PROFILER: u64 = 0x20000000000;
    pub const WAIT_HANDLE: u64 = 0x40000000000;
    /// .NET 10: AllocationSampled (event 303).
    pub const ALLOCATION_SAMPLING: u64 = 0x80000000000;

    /// (manifest keyword name, mask) for every constant above, for checks and for display.
    pub const ALL: &[(&str, u64)] = &[
        ("GCKeyword", GC),
        ("GCHandleKeyword", GC_HANDLE),
        ("AssemblyLoaderKeyword", ASSEMBLY_LOADER),
        ("LoaderKeyword", LOADER),
        ("JitKeyword", JIT),
        ("NGenKeyword", NGEN),
        ("StartEnumerationKeyword", START_ENUMERATION),
        ("EndEnumerationKeyword", END_ENUMERATION),
        ("SecurityKeyword", SECURITY),
        (
            "AppDomainResourceManagementKeyword",
            APP_DOMAIN_RESOURCE_MANAGEMENT,
        ),
        ("JitTracingKeyword", JIT_TRACING),
        ("InteropKeyword", INTEROP),
        ("ContentionKeyword", CONTENTION),
        ("ExceptionKeyword", EXCEPTION),
        ("ThreadingKeyword", THREADING),
        (
            "JittedMethodILToNativeMapKeyword",
            JITTED_METHOD_IL_TO_NATIVE_MAP,
        ),
        (
            "OverrideAndSuppressNGenEventsKeyword",
            OVERRIDE_AND_SUPPRESS_NGEN_EVENTS,
        ),
        ("TypeKeyword", TYPE),
        ("GCHeapDumpKeyword", GC_HEAP_DUMP),
        (
            "GCSampledObjectAllocationHighKeyword",
            GC_SAMPLED_OBJECT_ALLOCATION_HIGH,
        ),
        (
            "GCHeapSurvivalAndMovementKeyword",
            GC_HEAP_SURVIVAL_AND_MOVEMENT,
        ),
        ("GCHeapCollectKeyword", GC_HEAP_COLLECT),
        ("GCHeapAndTypeNamesKeyword", GC_HEAP_AND_TYPE_NAMES),
        (
            "GCSampledObjectAllocationLowKeyword",
            GC_SAMPLED_OBJECT_ALLOCATION_LOW,
        ),
        ("PerfTrackKeyword", PERF_TRACK),
        ("StackKeyword", STACK),
        ("ThreadTransferKeyword", THREAD_TRANSFER),
        ("DebuggerKeyword", DEBUGGER),
        ("MonitoringKeyword", MONITORING),
        ("CodeSymbolsKeyword", CODE_SYMBOLS),
        ("EventSourceKeyword", EVENT_SOURCE),
        ("CompilationKeyword", COMPILATION),
        ("CompilationDiagnosticKeyword", COMPILATION_DIAGNOSTIC),
        ("MethodDiagnosticKeyword", METHOD_DIAGNOSTIC),
        ("TypeDiagnosticKeyword", TYPE_DIAGNOSTIC),
        ("JitInstrumentationDataKeyword", JIT_INSTRUMENTATION_DATA),
        ("ProfilerKeyword", PROFILER),
        ("WaitHandleKeyword", WAIT_HANDLE),
        ("AllocationSamplingKeyword", ALLOCATION_SAMPLING),
    ];
}

/// Microsoft-Windows-DotNETRuntimeRundown keywords.
pub mod rundown {
    pub const GC: u64 = 0x1;
    pub const LOADER: u64 = 0x8;
    pub const JIT: u64 = 0x10;
    pub const NGEN: u64 = 0x20;
    pub const START: u64 = 0x40;
    pub const END: u64 = 0x100;
    pub const APP_DOMAIN_RESOURCE_MANAGEMENT: u64 = 0x800;
    pub const THREADING: u64 = 0x10000;
    pub const JITTED_METHOD_IL_TO_NATIVE_MAP: u64 = 0x20000;
    pub const OVERRIDE_AND_SUPPRESS_NGEN_EVENTS: u64 = 0x40000;
    pub const PERF_TRACK: u64 = 0x20000000;
    pub const STACK: u64 = 0x40000000;
    pub const COMPILATION: u64 = 0x1000000000;

    pub const ALL: &[(&str, u64)] = &[
        ("GCRundownKeyword", GC),
        ("LoaderRundownKeyword", LOADER),
        ("JitRundownKeyword", JIT),
        ("NGenRundownKeyword", NGEN),
        ("StartRundownKeyword", START),
        ("EndRundownKeyword", END),
        (
            "AppDomainResourceManagementRundownKeyword",
            APP_DOMAIN_RESOURCE_MANAGEMENT,
        ),
        ("ThreadingKeyword", THREADING),
        (
            "JittedMethodILToNativeMapRundownKeyword",
            JITTED_METHOD_IL_TO_NATIVE_MAP,
        ),
        (
            "OverrideAndSuppressNGenEventsRundownKeyword",
            OVERRIDE_AND_SUPPRESS_NGEN_EVENTS,
        ),
        ("PerfTrackRundownKeyword", PERF_TRACK),
        ("StackKeyword", STACK),
        ("CompilationKeyword", COMPILATION),
    ];
}

/// Event levels.
pub mod level {
    pub const LOG_ALWAYS: u8 = 0;
    pub const CRITICAL: u8 = 1;
    pub const ERROR: u8 = 2;
    pub const WARNING: u8 = 3;
    pub const INFORMATIONAL: u8 = 4;
    /// Needed for GCAllocationTick.
    pub const VERBOSE: u8 = 5;
}
