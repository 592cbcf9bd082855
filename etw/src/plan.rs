//! What the Windows sessions enable: providers, keywords and levels (platform-neutral so the
//! choices are tested on Linux; `session` applies them).

use clr_events::keywords::{level, rundown, runtime};

/// Microsoft-Windows-DotNETRuntime: GC (AllocationTick at verbose), Loader (module names), Jit
/// (MethodLoadVerbose), NGen (precompiled method names), Contention, Exception, Threading
/// (thread ids of lock owners) and Stack (a ClrStackWalk after each event).
pub const RUNTIME_KEYWORDS: u64 = runtime::GC
    | runtime::LOADER
    | runtime::JIT
    | runtime::NGEN
    | runtime::CONTENTION
    | runtime::EXCEPTION
    | runtime::THREADING
    | runtime::STACK;
pub const RUNTIME_LEVEL: u8 = level::VERBOSE;

/// Rundown at the session start: methods and modules already loaded (DCStart events).
pub const RUNDOWN_START_KEYWORDS: u64 = rundown::LOADER | rundown::JIT | rundown::NGEN | rundown::START | rundown::THREADING;
/// Rundown at the end (DCEnd events), as PerfView does: every method alive at the end,
/// JIT-compiled or precompiled (NGen / ReadyToRun), so addresses sampled earlier get names.
pub const RUNDOWN_END_KEYWORDS: u64 = rundown::LOADER | rundown::JIT | rundown::NGEN | rundown::END | rundown::THREADING;
pub const RUNDOWN_LEVEL: u8 = level::VERBOSE;

/// Session names (a leftover session of a killed run is stopped and restarted).
pub const SESSION_CLR: &str = "clrprobe-clr";
pub const SESSION_KERNEL: &str = "clrprobe-kernel";
pub const SESSION_RUNDOWN_START: &str = "clrprobe-rundown-start";
pub const SESSION_RUNDOWN_END: &str = "clrprobe-rundown-end";

/// `TRACE_INFO_CLASS` values for `TraceSetInformation`.
pub const TRACE_STACK_TRACING_INFO: i32 = 3;
pub const TRACE_SAMPLED_PROFILE_INTERVAL_INFO: i32 = 5;

/// Default profile-timer interval: 1 ms, in the 100 ns units the kernel takes.
pub const DEFAULT_SAMPLE_INTERVAL_100NS: u32 = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_keywords_cover_the_issue_list_and_nothing_costly() {
        for (name, k) in [("GC", 0x1), ("Loader", 0x8), ("Jit", 0x10), ("Exception", 0x8000), ("Contention", 0x4000), ("Stack", 0x4000_0000)] {
            assert_ne!(RUNTIME_KEYWORDS & k, 0, "{name}");
        }
        // No heap dumps / sampled-object allocation (expensive, change GC behaviour).
        assert_eq!(RUNTIME_KEYWORDS & (runtime::GC_HEAP_DUMP | runtime::GC_SAMPLED_OBJECT_ALLOCATION_HIGH), 0);
        assert_eq!(RUNTIME_LEVEL, 5);
    }

    #[test]
    fn rundowns_ask_for_start_and_end_enumeration_of_jit_and_ngen_methods() {
        assert_eq!(RUNDOWN_START_KEYWORDS & (0x10 | 0x20 | 0x40), 0x70);
        assert_eq!(RUNDOWN_END_KEYWORDS & (0x10 | 0x20 | 0x100), 0x130);
        assert_eq!(RUNDOWN_START_KEYWORDS & rundown::END, 0);
        assert_eq!(RUNDOWN_END_KEYWORDS & rundown::START, 0);
    }
}
