//! Event ids of the events this crate decodes (checked against the manifests by
//! `tests/manifest_constants.rs`). An id is only meaningful together with its provider.

/// Microsoft-Windows-DotNETRuntime.
pub mod runtime {
    pub const GC_START: u16 = 1;
    pub const GC_END: u16 = 2;
    pub const GC_RESTART_EE_END: u16 = 3;
    pub const GC_HEAP_STATS: u16 = 4;
    pub const GC_RESTART_EE_BEGIN: u16 = 7;
    pub const GC_SUSPEND_EE_END: u16 = 8;
    pub const GC_SUSPEND_EE_BEGIN: u16 = 9;
    pub const GC_ALLOCATION_TICK: u16 = 10;
    pub const GC_SAMPLED_OBJECT_ALLOCATION_HIGH: u16 = 20;
    pub const GC_SAMPLED_OBJECT_ALLOCATION_LOW: u16 = 32;
    pub const GC_TRIGGERED: u16 = 35;
    pub const EXCEPTION_THROWN: u16 = 80;
    pub const CONTENTION_START: u16 = 81;
    pub const THREAD_CREATED: u16 = 85;
    pub const CONTENTION_LOCK_CREATED: u16 = 90;
    pub const CONTENTION_STOP: u16 = 91;
    pub const METHOD_LOAD: u16 = 141;
    pub const METHOD_UNLOAD: u16 = 142;
    pub const METHOD_LOAD_VERBOSE: u16 = 143;
    pub const METHOD_UNLOAD_VERBOSE: u16 = 144;
    pub const MODULE_LOAD: u16 = 152;
    pub const MODULE_UNLOAD: u16 = 153;
    pub const GC_PER_HEAP_HISTORY: u16 = 204;
    pub const GC_GLOBAL_HEAP_HISTORY: u16 = 205;
    pub const EXCEPTION_CATCH_START: u16 = 250;
    pub const EXCEPTION_CATCH_STOP: u16 = 251;
    pub const EXCEPTION_FINALLY_START: u16 = 252;
    pub const EXCEPTION_FINALLY_STOP: u16 = 253;
    pub const EXCEPTION_FILTER_START: u16 = 254;
    pub const EXCEPTION_FILTER_STOP: u16 = 255;
    pub const EXCEPTION_THROWN_STOP: u16 = 256;
    /// .NET 10.
    pub const ALLOCATION_SAMPLED: u16 = 303;
}

/// Microsoft-Windows-DotNETRuntimeRundown.
pub mod rundown {
    pub const METHOD_DC_START: u16 = 141;
    pub const METHOD_DC_END: u16 = 142;
    pub const METHOD_DC_START_VERBOSE: u16 = 143;
    pub const METHOD_DC_END_VERBOSE: u16 = 144;
    pub const DC_START_COMPLETE: u16 = 145;
    pub const DC_END_COMPLETE: u16 = 146;
    pub const DC_START_INIT: u16 = 147;
    pub const DC_END_INIT: u16 = 148;
    pub const MODULE_DC_START: u16 = 153;
    pub const MODULE_DC_END: u16 = 154;
    pub const THREAD_DC: u16 = 159;
}

/// Microsoft-DotNETCore-SampleProfiler.
pub mod sample_profiler {
    pub const THREAD_SAMPLE: u16 = 0;
    pub const THREAD_STACK_WALK: u16 = 1;
}
