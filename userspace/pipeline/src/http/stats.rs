//! Summaries of requests: per host and path, and OpenTelemetry's
//! `http.client.request.duration` histogram.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::request::HttpRequest;

/// Latency of the requests to one host and path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostPathStats {
    /// `scheme://host:port`.
    pub host: String,
    pub path: String,
    pub count: u64,
    /// Failures and statuses ≥ 400.
    pub errors: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Start time of the slowest request (source clock, ns).
    pub slowest_start_ns: u64,
}

/// Nearest-rank percentile (`q` in 0..=100) of sorted values; 0 for none.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// One row per (scheme://host:port, path), slowest p99 first.
pub fn host_path_stats(requests: &[HttpRequest]) -> Vec<HostPathStats> {
    let mut groups: BTreeMap<(String, String), Vec<&HttpRequest>> = BTreeMap::new();
    for r in requests {
        groups
            .entry((
                format!("{}://{}:{}", r.scheme, r.host, r.port),
                r.path.clone(),
            ))
            .or_default()
            .push(r);
    }
    let mut out: Vec<HostPathStats> = groups
        .into_iter()
        .map(|((host, path), rs)| {
            let mut ms: Vec<f64> = rs.iter().map(|r| r.duration_ms()).collect();
            ms.sort_by(f64::total_cmp);
            let slowest = rs
                .iter()
                .max_by_key(|r| r.duration_ns)
                .expect("a group has a request");
            HostPathStats {
                host,
                path,
                count: rs.len() as u64,
                errors: rs.iter().filter(|r| r.is_error()).count() as u64,
                p50_ms: percentile(&ms, 50.0),
                p90_ms: percentile(&ms, 90.0),
                p99_ms: percentile(&ms, 99.0),
                max_ms: ms.last().copied().unwrap_or(0.0),
                slowest_start_ns: slowest.start_ns,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.p99_ms
            .total_cmp(&a.p99_ms)
            .then_with(|| a.path.cmp(&b.path))
    });
    out
}

/// The bucket boundaries (seconds) OpenTelemetry's HTTP semantic conventions advise for
/// `http.client.request.duration`.
pub const OTEL_DURATION_BOUNDS_S: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// One data point of the `http.client.request.duration` histogram (unit `s`): an explicit-bucket
/// histogram per attribute set. `http.request.method` is not in the events and is left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OtelHistogram {
    /// `server.address`, `server.port`, `url.scheme`, `network.protocol.version`,
    /// `http.response.status_code` (when a response came), `error.type` (the status code of a
    /// ≥ 400 answer, or `failed`).
    pub attributes: Vec<(String, String)>,
    pub bounds: Vec<f64>,
    /// `bounds.len() + 1` counts; bucket i holds durations in (bounds[i-1], bounds[i]].
    pub bucket_counts: Vec<u64>,
    pub count: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
}

/// The histogram points of the completed requests, one per attribute set.
pub fn otel_duration_histograms(requests: &[HttpRequest]) -> Vec<OtelHistogram> {
    let mut points: BTreeMap<Vec<(String, String)>, OtelHistogram> = BTreeMap::new();
    for r in requests.iter().filter(|r| r.complete) {
        let mut attributes = vec![
            ("server.address".to_string(), r.host.clone()),
            ("server.port".to_string(), r.port.to_string()),
            ("url.scheme".to_string(), r.scheme.clone()),
            (
                "network.protocol.version".to_string(),
                otel_version(&r.version),
            ),
        ];
        if let Some(s) = r.status {
            attributes.push(("http.response.status_code".into(), s.to_string()));
        }
        if r.error.is_some() || r.status.is_none() {
            attributes.push(("error.type".into(), "failed".into()));
        } else if let Some(s) = r.status.filter(|s| *s >= 400) {
            attributes.push(("error.type".into(), s.to_string()));
        }
        let p = points
            .entry(attributes.clone())
            .or_insert_with(|| OtelHistogram {
                attributes,
                bounds: OTEL_DURATION_BOUNDS_S.to_vec(),
                bucket_counts: vec![0; OTEL_DURATION_BOUNDS_S.len() + 1],
                count: 0,
                sum: 0.0,
                min: f64::INFINITY,
                max: 0.0,
            });
        let s = r.duration_ns as f64 / 1e9;
        let i = OTEL_DURATION_BOUNDS_S.partition_point(|b| *b < s);
        p.bucket_counts[i] += 1;
        p.count += 1;
        p.sum += s;
        p.min = p.min.min(s);
        p.max = p.max.max(s);
    }
    points.into_values().collect()
}

/// OTel writes `1.1`, `2`, `3`.
fn otel_version(v: &str) -> String {
    v.strip_suffix(".0").unwrap_or(v).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Phases;

    fn req(path: &str, ms: u64, status: Option<i32>) -> HttpRequest {
        HttpRequest {
            scheme: "http".into(),
            host: "h".into(),
            port: 80,
            path: path.into(),
            has_query: false,
            version: "1.1".into(),
            status,
            error: None,
            start_ns: ms,
            end_ns: ms + ms * 1_000_000,
            duration_ns: ms * 1_000_000,
            phases: Phases::default(),
            unaccounted_ns: 0,
            complete: true,
            connection_id: None,
            setups: vec![],
            queued_ns: None,
            redirects: 0,
            start_tid: 1,
            threads: vec![1],
            stack: vec![],
            activity_id: String::new(),
        }
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(
            (
                percentile(&v, 50.0),
                percentile(&v, 90.0),
                percentile(&v, 99.0),
                percentile(&v, 100.0)
            ),
            (50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn groups_by_host_and_path_slowest_first() {
        let rs = vec![
            req("/a", 1, Some(200)),
            req("/b", 300, Some(200)),
            req("/a", 3, Some(404)),
            req("/b", 200, Some(200)),
        ];
        let s = host_path_stats(&rs);
        assert_eq!(s.len(), 2);
        assert_eq!(
            (
                s[0].path.as_str(),
                s[0].count,
                s[0].errors,
                s[0].max_ms,
                s[0].p50_ms
            ),
            ("/b", 2, 0, 300.0, 200.0)
        );
        assert_eq!(
            (
                s[1].path.as_str(),
                s[1].count,
                s[1].errors,
                s[1].host.as_str()
            ),
            ("/a", 2, 1, "http://h:80")
        );
    }

    #[test]
    fn otel_buckets_and_attributes() {
        let rs = vec![
            req("/a", 5, Some(200)),
            req("/a", 6, Some(200)),
            req("/a", 2_000, Some(200)),
            req("/x", 1, Some(503)),
        ];
        let h = otel_duration_histograms(&rs);
        assert_eq!(h.len(), 2);
        let ok = h
            .iter()
            .find(|p| {
                p.attributes
                    .iter()
                    .any(|(k, v)| k == "http.response.status_code" && v == "200")
            })
            .unwrap();
        // 5 ms falls in (0, 0.005], 6 ms in (0.005, 0.01], 2 s in (1, 2.5].
        assert_eq!(
            (
                ok.bucket_counts[0],
                ok.bucket_counts[1],
                ok.bucket_counts[10],
                ok.count
            ),
            (1, 1, 1, 3)
        );
        assert!((ok.sum - 2.011).abs() < 1e-9);
        assert!(
            ok.attributes
                .contains(&("network.protocol.version".into(), "1.1".into()))
        );
        let err = h
            .iter()
            .find(|p| p.attributes.contains(&("error.type".into(), "503".into())))
            .unwrap();
        assert_eq!(err.count, 1);
    }
}
