//! What `clrprobe top` watches: a CPU sampler over the .NET targets, a perf map and an
//! EventPipe session (allocations, exceptions, contention) in each, turned once a second into a
//! [`Snapshot`] of rates over the last second. Everything switched on is switched off in
//! [`Watch::finish`] (and on drop).
use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use clrprobe_pipeline::{EventReport, Kinds};

use crate::{
    discover,
    record::{
        FrameResolver, PerfMapGuard, alive,
        clr_session::RuntimeSession,
        recipe,
    },
    sampler::{self, Sampler, SamplerChoice, SamplerError},
};

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("process {0} is not running")]
    NoProcess(u32),
    #[error("process {0} is not a .NET process (no libcoreclr.so mapped)")]
    NotDotnet(u32),
    #[error(transparent)]
    Sampler(#[from] SamplerError),
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

pub struct Watch {
    sampler: Box<dyn Sampler>,
    resolver: FrameResolver,
    sessions: Vec<RuntimeSession>,
    guards: Vec<PerfMapGuard>,
    pids: Vec<u32>,
    attached: HashSet<u32>,
    all: bool,
    jit_seen: HashMap<u32, usize>,
    prev: HashMap<u32, EventReport>,
    cpu_total: HashMap<String, f64>,
    exc_total: HashMap<String, f64>,
    alloc_total: HashMap<String, f64>,
    started: Instant,
    last: Instant,
    warnings: Vec<String>,
    /// Set-ups running on their threads (a target that never answers holds no one up).
    in_flight: HashSet<u32>,
    tx: std::sync::mpsc::Sender<SetUp>,
    rx: std::sync::mpsc::Receiver<SetUp>,
}

/// What a set-up thread switched on in one target.
struct SetUp {
    pid: u32,
    /// None: no set-up (its runtime never finished starting, or another clrprobe kept
    /// setting it up; the reason is in `session`'s place as a warning).
    guard: Option<PerfMapGuard>,
    session: Result<RuntimeSession, String>,
}

impl Watch {
    /// Starts watching `pid`, or every .NET process (`None`).
    pub fn start(pid: Option<u32>, freq: u64) -> Result<Self, WatchError> {
        let pids = match pid {
            Some(p) if !alive(p) => return Err(WatchError::NoProcess(p)),
            Some(p) if discover::libcoreclr_path(p).is_none() => return Err(WatchError::NotDotnet(p)),
            Some(p) => vec![p],
            None => discover::dotnet_pids(),
        };
        let (sampler, why) = sampler::start(SamplerChoice::Auto, &pids, freq)?;
        let (tx, rx) = std::sync::mpsc::channel();
        let mut w = Watch {
            in_flight: HashSet::new(),
            tx,
            rx,
            sampler,
            resolver: FrameResolver::new(),
            sessions: Vec::new(),
            guards: Vec::new(),
            pids: Vec::new(),
            attached: HashSet::new(),
            all: pid.is_none(),
            jit_seen: HashMap::new(),
            prev: HashMap::new(),
            cpu_total: HashMap::new(),
            exc_total: HashMap::new(),
            alloc_total: HashMap::new(),
            started: Instant::now(),
            last: Instant::now(),
            warnings: why.into_iter().collect(),
        };
        for p in pids {
            w.attach(p);
        }
        Ok(w)
    }

    fn attach(&mut self, pid: u32) {
        if !self.attached.insert(pid) {
            return;
        }
        self.pids.push(pid);
        self.resolver.add_process(pid);
        if let Err(e) = self.sampler.add_pids(&[pid]) {
            self.warnings.push(format!("sampling {pid}: {e}"));
        }
        // Perf map and EventPipe over IPC on a thread, as `record` does: the view (and `q`)
        // never waits for a runtime that does not answer.
        let tx = self.tx.clone();
        let spawned = std::thread::Builder::new().name(format!("attach-{pid}")).spawn(move || {
            let plan = recipe::Plan { perf_map: true, launched: false };
            let never = std::sync::atomic::AtomicBool::new(false);
            // No rundown: the view needs no names after it quits.
            let set_up = recipe::set_up(pid, plan, recipe::Wait::Started(&never), |names| {
                RuntimeSession::start(pid, &recipe::session(Kinds::ALL, names, false), Kinds::ALL)
                    .map_err(|e| format!("no EventPipe session for {pid}: {e}"))
            });
            let s = match set_up {
                Ok(s) => SetUp { pid, guard: s.guard, session: s.session },
                Err(e) => SetUp { pid, guard: None, session: Err(e.to_string()) },
            };
            // If the view has quit meanwhile, dropping these switches them off again.
            let _ = tx.send(s);
        });
        match spawned {
            Ok(_) => {
                self.in_flight.insert(pid);
            }
            Err(e) => self.warnings.push(format!("no set-up for {pid}: {e}")),
        }
    }

    /// Picks up finished set-ups.
    fn collect(&mut self) {
        while let Ok(s) = self.rx.try_recv() {
            self.in_flight.remove(&s.pid);
            self.guards.extend(s.guard);
            match s.session {
                Ok(session) => self.sessions.push(session),
                Err(e) => self.warnings.push(e),
            }
            self.resolver.refresh(s.pid);
        }
    }

    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// Are all watched processes gone (never with `--all`)?
    pub fn all_exited(&self) -> bool {
        !self.all && self.pids.iter().all(|&p| !alive(p))
    }

    /// Reads what happened since the last tick.
    pub fn tick(&mut self, rows: usize) -> Snapshot {
        self.collect();
        if self.all {
            for p in discover::dotnet_pids() {
                self.attach(p);
            }
        }
        let secs = self.last.elapsed().as_secs_f64().max(1e-3);
        self.last = Instant::now();
        for &pid in &self.pids {
            self.resolver.refresh(pid);
        }
        // JIT code named by the runtime's method events since the last tick.
        for s in &self.sessions {
            let live = s.live.lock().unwrap_or_else(|e| e.into_inner());
            let seen = self.jit_seen.entry(s.pid()).or_insert(0);
            if live.jit_methods.len() > *seen {
                self.resolver.add_jit_methods(s.pid(), &live.jit_methods[*seen..]);
                *seen = live.jit_methods.len();
            }
        }
        let mut snap = Snapshot { pids: self.pids.clone(), ..Default::default() };
        let mut cpu_now: HashMap<String, f64> = HashMap::new();
        let mut samples = 0;
        match self.sampler.drain() {
            Ok(batch) => {
                for s in batch {
                    self.resolver.ensure_process(s.pid);
                    let frames = self.resolver.stack(s.pid, &s.kernel, &s.user);
                    let leaf = frames.last().map(|f| f.name.to_string()).unwrap_or_else(|| "[unknown]".into());
                    *cpu_now.entry(leaf).or_insert(0.0) += s.count as f64;
                    samples += s.count;
                }
            }
            Err(e) => snap.warnings.push(format!("reading samples: {e}")),
        }
        for (k, v) in &cpu_now {
            *self.cpu_total.entry(k.clone()).or_insert(0.0) += v;
        }
        snap.samples_per_sec = samples as f64 / secs;
        snap.cpu = rows_of(&cpu_now, &self.cpu_total, secs, rows);

        let mut alloc_now: HashMap<String, f64> = HashMap::new();
        let mut exc_now: HashMap<String, f64> = HashMap::new();
        for s in &self.sessions {
            let report = s.live.lock().unwrap_or_else(|e| e.into_inner()).profiles.report();
            let prev = self.prev.remove(&s.pid()).unwrap_or_default();
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
            self.prev.insert(s.pid(), report);
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

    /// Stops the sessions and switches the perf maps off again.
    pub fn finish(mut self) -> Vec<String> {
        // Set-ups in flight get a moment, so what they switch on is switched off here.
        let until = Instant::now() + Duration::from_millis(300);
        while !self.in_flight.is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
            self.collect();
        }
        // Bounded, all targets at once (a stopped target is given up on).
        let restores = crate::record::restore_all(std::mem::take(&mut self.guards));
        let deadline = Instant::now() + crate::record::clr_session::STOP_DEADLINE;
        let mut warnings: Vec<String> = crate::record::clr_session::finish_all(std::mem::take(&mut self.sessions), deadline)
            .into_iter()
            .filter_map(|(_, o)| o.error.map(|e| e.to_string()))
            .collect();
        warnings.extend(restores.wait(Instant::now() + Duration::from_millis(300)));
        warnings
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
