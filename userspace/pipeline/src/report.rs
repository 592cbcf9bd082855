//! The text-report view of event profiles.
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::{contention::Waits, exceptions::Exceptions};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExceptionCount {
    pub exception_type: String,
    pub message: String,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct ContentionReport {
    pub waits: u64,
    pub total_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct EventReport {
    /// Most frequent first.
    pub exceptions: Vec<ExceptionCount>,
    /// (type, count) most frequent first.
    pub exceptions_by_type: Vec<(String, u64)>,
    pub contention: ContentionReport,
    /// (type, estimated bytes, estimated objects), largest first.
    pub allocations: Vec<(String, f64, f64)>,
    /// Collections, pauses, GC CPU and the GC timeline (absent in older recordings).
    #[serde(default)]
    pub gc: crate::GcReport,
}

impl EventReport {
    /// `allocations`: (type, estimated bytes, estimated objects) in any order.
    pub(crate) fn build(ex: &Exceptions, waits: &Waits, mut allocations: Vec<(String, f64, f64)>) -> Self {
        let mut exceptions: Vec<ExceptionCount> =
            ex.by_type_message().map(|(t, m, c)| ExceptionCount { exception_type: t.to_owned(), message: m.to_owned(), count: c }).collect();
        // Messages break ties (the counts come from a hash map: equal counts came out in its order).
        exceptions.sort_by(|a, b| b.count.cmp(&a.count).then(a.exception_type.cmp(&b.exception_type)).then(a.message.cmp(&b.message)));
        let mut by_type: HashMap<&str, u64> = HashMap::new();
        for e in &exceptions {
            *by_type.entry(&e.exception_type).or_insert(0) += e.count;
        }
        let mut exceptions_by_type: Vec<(String, u64)> = by_type.into_iter().map(|(t, c)| (t.to_string(), c)).collect();
        exceptions_by_type.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let h = &waits.histogram;
        let ms = |us: u64| us as f64 / 1000.0;
        let contention = if waits.count == 0 {
            ContentionReport::default()
        } else {
            ContentionReport {
                waits: waits.count,
                total_ms: waits.total_ns / 1e6,
                p50_ms: ms(h.value_at_quantile(0.5)),
                p90_ms: ms(h.value_at_quantile(0.9)),
                p99_ms: ms(h.value_at_quantile(0.99)),
                max_ms: ms(h.max()),
            }
        };
        allocations.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        EventReport { exceptions, exceptions_by_type, contention, allocations, gc: Default::default() }
    }
}
