//! Collects aya-log records from the BPF programs, and forwards them to the process logger.
use std::sync::{Arc, Mutex};

/// A `log::Log` that keeps every BPF record as text (for reports and tests) and forwards it.
#[derive(Clone, Default)]
pub struct LogCollector {
    lines: Arc<Mutex<Vec<String>>>,
}

impl LogCollector {
    /// Every record received so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl log::Log for LogCollector {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        if let Ok(mut l) = self.lines.lock() {
            l.push(format!("{}", record.args()));
        }
        log::logger().log(record);
    }

    fn flush(&self) {}
}
