//! What `clrprobe top` watches: the streaming pipeline's host source over the .NET targets (a
//! CPU sampler, a perf map and an EventPipe session each, set up as `record` and the agent set
//! them up) feeding the aggregator, whose terminal sink is read once a second into a
//! [`Snapshot`] of rates over the last second. Everything switched on is switched off in
//! [`Watch::finish`].
use std::{
    collections::HashMap,
    sync::atomic::{AtomicBool, Ordering},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use clrprobe_pipeline::{EventReport, Kinds, stream::AggregatorConfig};
use crossbeam_channel::Sender;

use crate::{
    discover,
    pipeline::{
        aggregate::{self, Query},
        sinks::terminal::Window,
        sources::{self, HostConfig, SourceError},
    },
    record::alive,
    sampler::SamplerChoice,
};

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("process {0} is not running")]
    NoProcess(u32),
    #[error("process {0} is not a .NET process (no libcoreclr.so mapped)")]
    NotDotnet(u32),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("starting the aggregator thread: {0}")]
    Thread(std::io::Error),
}

/// One row: a name, its rate over the last second, and its total since the start.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub name: String,
    pub per_sec: f64,
    pub total: f64,
}

/// The view of one refresh.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub elapsed_s: f64,
    pub pids: Vec<u32>,
    pub samples_per_sec: f64,
    /// Leaf frames by CPU samples (per second, total).
    pub cpu: Vec<Row>,
    /// Allocation by type: bytes per second, total bytes (AllocationTick estimates).
    pub alloc: Vec<Row>,
    pub exceptions: Vec<Row>,
    /// Contention: waits per second, ms waited per second, p99 ms, total waits.
    pub contention_waits_per_sec: f64,
    pub contention_ms_per_sec: f64,
    pub contention_p99_ms: f64,
    pub contention_waits: u64,
    pub warnings: Vec<String>,
}

/// How long quitting waits for the sessions to stop and the perf maps to be switched off.
const FINISH_DEADLINE: Duration = Duration::from_secs(3);
/// How long a refresh waits for the aggregator's answer.
const ANSWER_DEADLINE: Duration = Duration::from_millis(800);

pub struct Watch {
    stop: &'static AtomicBool,
    host: Option<JoinHandle<()>>,
    aggregator: Option<JoinHandle<()>>,
    queries: Option<Sender<Query>>,
    pids: Vec<u32>,
    all: bool,
    /// The last CPU second read (the next refresh reads the ones after it).
    last_start_ns: Option<u64>,
    /// The last CPU rates (kept while no new second is complete).
    cpu_now: HashMap<String, f64>,
    samples_per_sec: f64,
    prev: HashMap<u32, EventReport>,
    cpu_total: HashMap<String, f64>,
    exc_total: HashMap<String, f64>,
    alloc_total: HashMap<String, f64>,
    started: Instant,
    last: Instant,
    warnings: Vec<String>,
    /// The sources' warnings.
    warn_rx: crossbeam_channel::Receiver<String>,
}

/// Warnings kept for the view (the last is shown; all are printed after quitting).
const MAX_WARNINGS: usize = 100;

impl Watch {
    /// Starts watching `pid`, or every .NET process (`None`). `stop` ends the sources (set it
    /// to quit; [`Watch::finish`] does).
    pub fn start(pid: Option<u32>, freq: u64, stop: &'static AtomicBool) -> Result<Self, WatchError> {
        let pids = match pid {
            Some(p) if !alive(p) => return Err(WatchError::NoProcess(p)),
            Some(p) if discover::libcoreclr_path(p).is_none() => return Err(WatchError::NotDotnet(p)),
            Some(p) => vec![p],
            None => Vec::new(),
        };
        let (warn_tx, warn_rx) = crossbeam_channel::unbounded();
        let host = HostConfig {
            all: pid.is_none(),
            dotnet_only: true,
            pids: pids.clone(),
            freq,
            sampler: SamplerChoice::Auto,
            offcpu: false,
            offcpu_min: Duration::ZERO,
            oncpu: false,
            kinds: Kinds::ALL,
            eventpipe: true,
            perf_map: true,
            // The view needs no names after it quits.
            rundown: false,
            parent: None,
            children: false,
            // Leaf frames only: frame pointers suffice.
            stack_copies: false,
            counters_interval_s: None,
            alloc_slices: None,
            // Shown in the view (a log line would land on the screen).
            warnings: Some(warn_tx),
            recording: None,
        };
        let cfg = AggregatorConfig { freq_hz: freq, buckets: 10, exited_grace_ns: 2_000_000_000, kinds: Kinds::ALL, ..AggregatorConfig::default() };
        let (rec_tx, rec_rx) = crossbeam_channel::bounded(16_384);
        let (q_tx, q_rx) = crossbeam_channel::unbounded();
        let aggregator = aggregate::spawn(cfg, rec_rx, q_rx).map_err(WatchError::Thread)?;
        let (host, fallback, _) = sources::spawn(host, rec_tx, stop)?;
        Ok(Watch {
            stop,
            host: Some(host),
            aggregator: Some(aggregator),
            queries: Some(q_tx),
            pids,
            all: pid.is_none(),
            last_start_ns: None,
            cpu_now: HashMap::new(),
            samples_per_sec: 0.0,
            prev: HashMap::new(),
            cpu_total: HashMap::new(),
            exc_total: HashMap::new(),
            alloc_total: HashMap::new(),
            started: Instant::now(),
            last: Instant::now(),
            warnings: fallback.into_iter().collect(),
            warn_rx,
        })
    }

    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// Are all watched processes gone (never with `--all`)?
    pub fn all_exited(&self) -> bool {
        !self.all && self.pids.iter().all(|&p| !alive(p))
    }

    /// Asks the aggregator for the window after the last one read.
    fn window(&self) -> Option<Window> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.queries.as_ref()?.send(Query::Top { after_ns: self.last_start_ns, reply }).ok()?;
        crate::pipeline::reply::wait(rx, Instant::now() + ANSWER_DEADLINE)
    }

    /// Takes the sources' new warnings (bounded).
    fn take_warnings(&mut self) {
        for w in self.warn_rx.try_iter() {
            if self.warnings.len() < MAX_WARNINGS && !self.warnings.contains(&w) {
                self.warnings.push(w);
            }
        }
    }

    /// Reads what happened since the last tick.
    pub fn tick(&mut self, rows: usize) -> Snapshot {
        self.take_warnings();
        let secs = self.last.elapsed().as_secs_f64().max(1e-3);
        self.last = Instant::now();
        let mut snap = Snapshot { pids: self.pids.clone(), ..Default::default() };
        let Some(w) = self.window() else {
            snap.warnings.push("the aggregator did not answer in time".into());
            snap.elapsed_s = self.started.elapsed().as_secs_f64();
            return snap;
        };
        if self.all {
            self.pids = w.pids.clone();
            snap.pids = w.pids.clone();
        }
        // CPU: the seconds completed since the last refresh (their samples have all arrived);
        // none new: the last rates stay.
        if w.seconds > 0 {
            let n = w.seconds as f64;
            self.cpu_now = w.cpu_leaves.iter().map(|(k, v)| (k.clone(), *v as f64)).collect();
            for (k, v) in &self.cpu_now {
                *self.cpu_total.entry(k.clone()).or_insert(0.0) += v;
            }
            self.cpu_now.values_mut().for_each(|v| *v /= n);
            self.samples_per_sec = self.cpu_now.values().sum();
        }
        self.last_start_ns = w.last_start_ns;
        snap.samples_per_sec = self.samples_per_sec;
        snap.cpu = rows_of(&self.cpu_now, &self.cpu_total, 1.0, rows);

        let mut alloc_now: HashMap<String, f64> = HashMap::new();
        let mut exc_now: HashMap<String, f64> = HashMap::new();
        for (pid, report) in w.reports {
            let prev = self.prev.remove(&pid).unwrap_or_default();
            for (ty, bytes, _) in &report.allocations {
                let before = prev.allocations.iter().find(|a| &a.0 == ty).map(|a| a.1).unwrap_or(0.0);
                *alloc_now.entry(ty.clone()).or_insert(0.0) += (bytes - before).max(0.0);
            }
            for (ty, n) in &report.exceptions_by_type {
                let before = prev.exceptions_by_type.iter().find(|e| &e.0 == ty).map(|e| e.1).unwrap_or(0);
                *exc_now.entry(ty.clone()).or_insert(0.0) += n.saturating_sub(before) as f64;
            }
            let c = &report.contention;
            snap.contention_waits_per_sec += c.waits.saturating_sub(prev.contention.waits) as f64 / secs;
            snap.contention_ms_per_sec += (c.total_ms - prev.contention.total_ms).max(0.0) / secs;
            snap.contention_p99_ms = snap.contention_p99_ms.max(c.p99_ms);
            snap.contention_waits += c.waits;
            self.prev.insert(pid, report);
        }
        for (k, v) in &alloc_now {
            *self.alloc_total.entry(k.clone()).or_insert(0.0) += v;
        }
        for (k, v) in &exc_now {
            *self.exc_total.entry(k.clone()).or_insert(0.0) += v;
        }
        snap.alloc = rows_of(&alloc_now, &self.alloc_total, secs, rows);
        snap.exceptions = rows_of(&exc_now, &self.exc_total, secs, rows);
        snap.elapsed_s = self.started.elapsed().as_secs_f64();
        snap.warnings.extend(self.warnings.iter().cloned());
        snap
    }

    /// Stops the sources: their sessions end and the perf maps are switched off (bounded:
    /// a target that never answers is given up on).
    pub fn finish(mut self) -> Vec<String> {
        self.stop_all()
    }

    fn stop_all(&mut self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + FINISH_DEADLINE;
        self.queries = None;
        for (t, what) in [(self.host.take(), "the sessions"), (self.aggregator.take(), "the aggregator")] {
            let Some(t) = t else { continue };
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if t.is_finished() {
                let _ = t.join();
            } else {
                self.warnings.push(format!("{what} did not stop in time: a perf map left on is switched off by the guardian or the next clrprobe"));
            }
        }
        self.take_warnings();
        std::mem::take(&mut self.warnings)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if self.host.is_some() {
            self.stop_all();
        }
    }
}

/// Rows by the last second's value (then total), largest first.
fn rows_of(now: &HashMap<String, f64>, total: &HashMap<String, f64>, secs: f64, n: usize) -> Vec<Row> {
    let mut rows: Vec<Row> = total
        .iter()
        .map(|(k, t)| Row {
            name: k.clone(),
            per_sec: now.get(k).copied().unwrap_or(0.0) / secs,
            total: *t,
        })
        .collect();
    rows.sort_by(|a, b| b.per_sec.total_cmp(&a.per_sec).then(b.total.total_cmp(&a.total)).then(a.name.cmp(&b.name)));
    rows.truncate(n);
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_rank_by_the_last_second_then_the_total() {
        let now: HashMap<String, f64> = [("a".to_string(), 2.0), ("b".to_string(), 6.0)].into();
        let total: HashMap<String, f64> = [("a".to_string(), 10.0), ("b".to_string(), 6.0), ("c".to_string(), 50.0)].into();
        let r = rows_of(&now, &total, 2.0, 2);
        assert_eq!(r, vec![
            Row { name: "b".into(), per_sec: 3.0, total: 6.0 },
            Row { name: "a".into(), per_sec: 1.0, total: 10.0 },
        ]);
    }
}
