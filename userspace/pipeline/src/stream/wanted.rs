//! Which runtime events the aggregator uses. The runtime's keywords bring more (the Exception
//! keyword adds catch/finally/filter events to every throw, the Loader keyword module events,
//! GC at Verbose its join and segment events): a source drops the rest before copying them.
use clr_events::{
    ids::{rundown, runtime},
    providers,
};

/// Does the aggregator use this event (by provider and id)?
pub fn wanted(provider: &str, event_id: u16) -> bool {
    if provider == providers::RUNTIME {
        matches!(
            event_id,
            runtime::GC_START
                | runtime::GC_END
                | runtime::GC_RESTART_EE_END
                | runtime::GC_HEAP_STATS
                | runtime::GC_SUSPEND_EE_BEGIN
                | runtime::GC_ALLOCATION_TICK
                | runtime::GC_PER_HEAP_HISTORY
                | runtime::GC_GLOBAL_HEAP_HISTORY
                | runtime::EXCEPTION_THROWN
                | runtime::CONTENTION_START
                | runtime::CONTENTION_STOP
                | runtime::THREAD_CREATED
                | runtime::METHOD_LOAD_VERBOSE
                | runtime::METHOD_LOAD
                | runtime::ALLOCATION_SAMPLED
        )
    } else if provider == providers::RUNDOWN {
        matches!(event_id, rundown::METHOD_DC_START_VERBOSE | rundown::METHOD_DC_END_VERBOSE | rundown::THREAD_DC)
    } else {
        false
    }
}

/// Is this an allocation event (what an allocation-only session keeps)?
pub fn allocation(provider: &str, event_id: u16) -> bool {
    provider == providers::RUNTIME && allocation_id(event_id)
}

/// Is this id an allocation event's, of the runtime's provider?
pub(crate) fn allocation_id(event_id: u16) -> bool {
    matches!(event_id, runtime::GC_ALLOCATION_TICK | runtime::ALLOCATION_SAMPLED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throws_keep_the_throw_and_drop_catch_and_finally() {
        assert!(wanted(providers::RUNTIME, runtime::EXCEPTION_THROWN));
        for id in [runtime::EXCEPTION_CATCH_START, runtime::EXCEPTION_CATCH_STOP, runtime::EXCEPTION_FINALLY_START, runtime::EXCEPTION_THROWN_STOP] {
            assert!(!wanted(providers::RUNTIME, id), "{id}");
        }
        assert!(wanted(providers::RUNDOWN, rundown::METHOD_DC_END_VERBOSE));
        assert!(!wanted(providers::RUNDOWN, rundown::MODULE_DC_END));
        assert!(!wanted("System.Runtime", runtime::GC_START));
    }
}
