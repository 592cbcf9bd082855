//! A summary of any EventSource's events: counts per event, and per numeric field the sum and
//! percentiles; per string field the most frequent values.
use std::collections::BTreeMap;

use clr_events::Value;
use serde::{Deserialize, Serialize};

use super::stats::percentile;

/// Numeric values kept per field for percentiles; past this every other value is dropped in turn
/// (a deterministic thinning that keeps the distribution's shape for steady streams).
const MAX_VALUES: usize = 1 << 16;
/// Distinct string values counted per field.
const MAX_DISTINCT: usize = 1_000;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FieldStats {
    /// Numeric values seen.
    pub count: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    /// String fields: (value, count), most frequent first (at most 5).
    pub top_values: Vec<(String, u64)>,
    #[serde(skip)]
    values: Vec<f64>,
    #[serde(skip)]
    stride: u64,
    #[serde(skip)]
    strings: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventStats {
    pub provider: String,
    pub event: String,
    pub count: u64,
    /// Per field, in the order first seen.
    pub fields: Vec<(String, FieldStats)>,
}

/// Counts and field summaries of the events of chosen providers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventSourceStats {
    /// (provider, event) → stats.
    pub events: Vec<EventStats>,
    #[serde(skip)]
    index: BTreeMap<(String, String), usize>,
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::F32(x) => Some(f64::from(*x)),
        Value::F64(x) => Some(*x),
        Value::Bool(_) | Value::Char(_) | Value::Null | Value::String(_) | Value::Guid(_) => None,
        Value::DateTime(_) | Value::Decimal(_) | Value::Struct(_) | Value::Array(_) => None,
        v => v
            .as_i64()
            .map(|i| i as f64)
            .or_else(|| v.as_u64().map(|u| u as f64)),
    }
}

impl FieldStats {
    fn add(&mut self, v: &Value) {
        if let Some(x) = number(v) {
            if self.count == 0 {
                self.min = x;
                self.max = x;
                self.stride = 1;
            }
            self.count += 1;
            self.sum += x;
            self.min = self.min.min(x);
            self.max = self.max.max(x);
            if self.count.is_multiple_of(self.stride.max(1)) {
                if self.values.len() >= MAX_VALUES {
                    let mut i = 0;
                    self.values.retain(|_| {
                        i += 1;
                        i % 2 == 0
                    });
                    self.stride = self.stride.max(1) * 2;
                }
                self.values.push(x);
            }
        } else if let Value::String(s) = v {
            if let Some(n) = self.strings.get_mut(s) {
                *n += 1;
            } else if self.strings.len() < MAX_DISTINCT {
                self.strings.insert(s.clone(), 1);
            }
        }
    }

    fn finish(&mut self) {
        let mut v = std::mem::take(&mut self.values);
        v.sort_by(f64::total_cmp);
        (self.p50, self.p90, self.p99) = (
            percentile(&v, 50.0),
            percentile(&v, 90.0),
            percentile(&v, 99.0),
        );
        let mut top: Vec<(String, u64)> = std::mem::take(&mut self.strings).into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        top.truncate(5);
        self.top_values = top;
    }
}

impl EventSourceStats {
    pub fn add(&mut self, provider: &str, event: &str, fields: &[(String, Value)]) {
        let key = (provider.to_string(), event.to_string());
        let i = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                self.events.push(EventStats {
                    provider: key.0.clone(),
                    event: key.1.clone(),
                    ..EventStats::default()
                });
                self.index.insert(key, self.events.len() - 1);
                self.events.len() - 1
            }
        };
        let e = &mut self.events[i];
        e.count += 1;
        for (name, v) in fields {
            let f = match e.fields.iter().position(|(n, _)| n == name) {
                Some(j) => &mut e.fields[j].1,
                None => {
                    e.fields.push((name.clone(), FieldStats::default()));
                    &mut e.fields.last_mut().expect("just pushed").1
                }
            };
            f.add(v);
        }
    }

    /// Percentiles and top values computed; events sorted by provider, then count.
    pub fn finish(mut self) -> Self {
        for e in &mut self.events {
            for (_, f) in &mut e.fields {
                f.finish();
            }
            e.fields
                .retain(|(_, f)| f.count > 0 || !f.top_values.is_empty());
        }
        self.events.sort_by(|a, b| {
            a.provider
                .cmp(&b.provider)
                .then(b.count.cmp(&a.count))
                .then_with(|| a.event.cmp(&b.event))
        });
        self.index.clear();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sums_percentiles_and_top_strings() {
        let mut s = EventSourceStats::default();
        for i in 0..20 {
            s.add(
                "Clrprobe-Telemetry",
                "Work",
                &[
                    ("name".into(), Value::String(format!("item-{}", i % 3))),
                    ("count".into(), Value::I32(i)),
                    ("ratio".into(), Value::F64(f64::from(i) / 4.0)),
                ],
            );
        }
        s.add("Clrprobe-Telemetry", "Other", &[]);
        let s = s.finish();
        assert_eq!(s.events.len(), 2);
        let w = &s.events[0];
        assert_eq!((w.event.as_str(), w.count), ("Work", 20));
        let count = &w.fields.iter().find(|(n, _)| n == "count").unwrap().1;
        assert_eq!(
            (
                count.count,
                count.sum,
                count.min,
                count.max,
                count.p50,
                count.p99
            ),
            (20, 190.0, 0.0, 19.0, 9.0, 19.0)
        );
        let ratio = &w.fields.iter().find(|(n, _)| n == "ratio").unwrap().1;
        assert_eq!(ratio.sum, 47.5);
        let name = &w.fields.iter().find(|(n, _)| n == "name").unwrap().1;
        assert_eq!(name.top_values[0], ("item-0".to_string(), 7));
    }

    #[test]
    fn thinning_keeps_a_bounded_spread_sample() {
        let mut f = FieldStats::default();
        for i in 0..(MAX_VALUES as i64 * 3) {
            f.add(&Value::I64(i));
        }
        assert!(f.values.len() <= MAX_VALUES);
        f.finish();
        let n = (MAX_VALUES * 3) as f64;
        assert!((f.p50 / n - 0.5).abs() < 0.01, "p50 {}", f.p50);
        assert_eq!(f.count, MAX_VALUES as u64 * 3);
    }
}
