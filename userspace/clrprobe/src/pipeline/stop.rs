//! The end of a recording on the pipeline, bounded: once the recording
//! has ended, every thread of clrprobe runs at the stop's priority (see
//! [`crate::record::stop_priority`]: the aggregator building the profile competed with the
//! targets for the CPU, and on a loaded host the end after Ctrl-C took 1.9-2.0 s).

/// Raises every thread of clrprobe to the stop's priority (the aggregator, the symbolizer's
/// threads, the host source stopping the sessions, the writers started later inherit it).
pub fn raise_priority() {
    if let Some(nice) = crate::record::stop_priority::stop_nice() {
        let raised = crate::record::stop_priority::raise(nice);
        log::info!("stop: {raised} threads raised to nice {nice} (CPU used so far {:.2} s)", crate::record::stop_priority::cpu_s());
    }
}
