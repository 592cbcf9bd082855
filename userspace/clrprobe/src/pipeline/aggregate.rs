//! The aggregator thread: absorbs every record, owns the symbolizer, answers the sinks'
//! queries (metrics text, gzipped pprof of a kind and window, the terminal view's window)
//! between records.
use std::{
    collections::{HashMap, HashSet},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use clrprobe_pipeline::stream::{Aggregator, AggregatorConfig, Namer, ProfileKind, Record};
use clrprobe_profile::Frame;
use crossbeam_channel::{Receiver, TryRecvError};
use tokio::sync::oneshot;

use crate::record::{FrameResolver, JitMethod, alive};

/// What a sink asks of the aggregator.
pub enum Query {
    /// Prometheus text of the followed processes and the aggregator's health.
    Metrics(oneshot::Sender<String>),
    /// A profile as gzipped pprof bytes: CPU samples taken at or after `since_ns` (host
    /// monotonic), the cumulative kinds whole.
    Profile { kind: ProfileKind, pid: Option<u32>, since_ns: u64, reply: oneshot::Sender<Result<Vec<u8>, String>> },
    /// The sources' clock as the aggregator last saw it.
    Now(oneshot::Sender<u64>),
    /// A recording ends at this time (host monotonic ns): later samples are left out.
    EndAt(u64),
    /// A recording's progress: CPU samples of the followed processes, data lost.
    Progress(oneshot::Sender<(u64, u64)>),
    /// A recording's end: every kind's profile of all the time kept and the event reports,
    /// after every record sent so far is absorbed.
    Final { start_unix_ns: u64, duration_ns: u64, reply: oneshot::Sender<Result<Final, String>> },
    /// The terminal view's refresh: CPU leaves of the seconds completed after `after_ns`,
    /// and every process's event report.
    Top { after_ns: Option<u64>, reply: oneshot::Sender<crate::pipeline::sinks::terminal::Window> },
}

/// What a recording kept, handed over at its end.
pub struct Final {
    /// By the file kind names `record` writes; kinds without samples left out.
    pub profiles: Vec<(&'static str, clrprobe_profile::Profile)>,
    pub events: clrprobe_profile::events::Events,
    pub health: clrprobe_pipeline::stream::Health,
}

/// Names for one profile: the followed .NET processes' from the long-lived resolver, every
/// other process's from a resolver made for this profile and dropped after it, so the images
/// of whatever else runs on the host (compilers with huge symbol tables…) are not kept.
struct Names<'r> {
    dotnet: &'r mut FrameResolver,
    followed: HashSet<u32>,
    native: Option<FrameResolver>,
}

impl Namer for Names<'_> {
    fn stack(&mut self, pid: u32, kernel: &[u64], user: &[u64]) -> Vec<Frame> {
        if self.followed.contains(&pid) {
            return self.dotnet.stack(pid, kernel, user);
        }
        let dotnet = &*self.dotnet;
        let r = self.native.get_or_insert_with(|| {
            let r = FrameResolver::new();
            // The kernel's symbols are the long-lived resolver's (/proc/kallsyms was read and
            // parsed again for every profile request).
            if let Ok(k) = dotnet.image_cache().kernel() {
                r.image_cache().share_kernel(k);
            }
            r
        });
        r.ensure_process(pid);
        r.stack(pid, kernel, user)
    }
    fn note_kernel(&mut self, kernel: &[u64]) {
        // One kernel symbolizer for both resolvers (shared): names of every noted frame are
        // read in one pass of /proc/kallsyms at the first lookup (a pass per new symbol took
        // two fifths of a loaded agent's CPU and made profile requests time out).
        self.dotnet.note_kernel(kernel);
    }
    fn process_name(&mut self, pid: u32) -> String {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim_end().to_string()).unwrap_or_else(|_| pid.to_string())
    }
}

/// Processes not seen for this long (gone, and no longer followed: their exited grace is
/// over, so no profile names their frames with this resolver) are forgotten by it.
const FORGET_AFTER: Duration = Duration::from_secs(10);
/// How often the addresses already handed to the symbolizer are forgotten (so an address
/// unnamed at first — JIT code before its perf-map line — is tried again, and the sets stay
/// bounded).
const RENOTE_AFTER: Duration = Duration::from_secs(30);
/// How often the followed processes' maps and perf maps are read again (reading
/// /proc/PID/maps was a tenth of the aggregator's work at every one-second tick).
const REFRESH: Duration = Duration::from_secs(5);
/// The aggregator sleeps this long when no record or query is waiting. Blocking on the
/// channel instead made every record of a mostly idle aggregator a futex wake-up and two
/// context switches (a fifth of the agent's CPU with three busy .NET processes); the channel
/// holds far more than the sources send in this time.
const IDLE_POLL: Duration = Duration::from_millis(20);
/// Records absorbed before the queries are looked at again.
const BATCH: usize = 4096;

struct State {
    agg: Aggregator,
    resolver: FrameResolver,
    last_seen: HashMap<u32, Instant>,
    last_forget: Instant,
    /// Addresses of the followed processes already handed to the symbolizer, by pid: each
    /// CPU sample and event stack hands over only new ones (resolving an address that has no
    /// name — libcoreclr's stripped internals, GC code — went to the ELF symbolizer thread
    /// again at every sample).
    noted: HashMap<u32, HashSet<u64>>,
    last_renote: Instant,
    last_refresh: Instant,
}

/// Starts the aggregator thread; it ends when every record sender and every query sender is
/// gone (queries are answered after the sources have ended: a recording's final profiles).
pub fn spawn(cfg: AggregatorConfig, records: Receiver<Record>, queries: Receiver<Query>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("aggregator".into()).spawn(move || {
        let mut s = State {
            agg: Aggregator::new(cfg),
            resolver: FrameResolver::new(),
            last_seen: HashMap::new(),
            last_forget: Instant::now(),
            noted: HashMap::new(),
            last_renote: Instant::now(),
            last_refresh: Instant::now(),
        };
        let mut sinks = true;
        let mut sources = true;
        loop {
            let mut busy = false;
            for _ in 0..BATCH {
                match records.try_recv() {
                    Ok(r) => {
                        s.absorb(r);
                        busy = true;
                    }
                    Err(TryRecvError::Empty) => break,
                    // Every source is gone (after its last records).
                    Err(TryRecvError::Disconnected) => {
                        sources = false;
                        break;
                    }
                }
            }
            while sinks {
                match queries.try_recv() {
                    Ok(q) => {
                        if matches!(q, Query::Final { .. }) {
                            // Every record sent before the question is in the answer.
                            while let Ok(r) = records.try_recv() {
                                s.absorb(r);
                            }
                        }
                        s.answer(q);
                        busy = true;
                    }
                    Err(TryRecvError::Empty) => break,
                    // The sinks are gone: drain the sources to their end.
                    Err(TryRecvError::Disconnected) => sinks = false,
                }
            }
            if !sources && !sinks {
                return;
            }
            if !busy {
                std::thread::sleep(IDLE_POLL);
            }
        }
    })
}

impl State {
    fn absorb(&mut self, r: Record) {
        match &r {
            // The .NET processes' code is named as it arrives (JIT code moves, processes end);
            // other processes' when a profile asks for it, which keeps host-wide sampling cheap.
            Record::Cpu(c) | Record::OffCpu(c) if self.agg.follows(c.pid) => {
                self.note(c.pid, &c.user);
                self.last_seen.insert(c.pid, Instant::now());
            }
            Record::Started(i) => {
                self.resolver.add_process(i.pid);
                self.resolver.refresh(i.pid);
                self.last_seen.insert(i.pid, Instant::now());
            }
            Record::Tick { .. } if self.last_refresh.elapsed() >= REFRESH => {
                self.last_refresh = Instant::now();
                let live: Vec<u32> = self.agg.processes().filter(|p| !p.2).map(|p| p.0.pid).collect();
                for pid in live {
                    self.resolver.refresh(pid);
                    self.last_seen.insert(pid, Instant::now());
                }
                if self.last_renote.elapsed() >= RENOTE_AFTER {
                    self.last_renote = Instant::now();
                    self.noted.clear();
                }
                self.forget_gone();
            }
            _ => {}
        }
        self.agg.absorb(r);
        let jit = self.agg.take_jit_methods();
        if !jit.is_empty() {
            let mut by_pid: HashMap<u32, Vec<JitMethod>> = HashMap::new();
            for (pid, start, size, name) in jit {
                by_pid.entry(pid).or_default().push(JitMethod { start, size, name, from_rundown: false });
            }
            for (pid, methods) in by_pid {
                self.resolver.add_jit_methods(pid, &methods);
            }
        }
        for (pid, stack) in self.agg.take_new_stacks() {
            self.note(pid, &stack);
        }
    }

    /// Hands `user` (leaf first) to the symbolizer when it holds an address not handed over
    /// lately (whole: the leaf is looked up as it is, return addresses one byte back).
    fn note(&mut self, pid: u32, user: &[u64]) {
        let noted = self.noted.entry(pid).or_default();
        let mut new = false;
        for &a in user {
            new |= noted.insert(a);
        }
        if new {
            self.resolver.note_addresses(pid, user, 0);
        }
    }

    fn forget_gone(&mut self) {
        if self.last_forget.elapsed() < FORGET_AFTER {
            return;
        }
        self.last_forget = Instant::now();
        let followed: HashSet<u32> = self.agg.processes().map(|p| p.0.pid).collect();
        let gone: HashSet<u32> = self
            .resolver
            .pids()
            .into_iter()
            .filter(|p| !followed.contains(p) && self.last_seen.get(p).is_none_or(|t| t.elapsed() > FORGET_AFTER) && !alive(*p))
            .collect();
        // Exited processes go entirely.
        self.noted.retain(|p, _| followed.contains(p));
        if !gone.is_empty() {
            self.resolver.forget(&gone);
            self.last_seen.retain(|p, _| !gone.contains(p));
        }
    }

    fn answer(&mut self, q: Query) {
        match q {
            Query::Metrics(reply) => {
                let _ = reply.send(self.agg.metrics_text());
            }
            Query::Now(reply) => {
                let _ = reply.send(self.agg.now_ns());
            }
            Query::EndAt(ns) => self.agg.end_samples_at(ns),
            Query::Progress(reply) => {
                let samples = self.agg.processes().map(|p| p.1.cpu_samples).sum();
                let _ = reply.send((samples, self.agg.health.lost.values().sum()));
            }
            Query::Final { start_unix_ns, duration_ns, reply } => {
                // The followed processes' code as it is now (the last perf-map lines).
                let live: Vec<u32> = self.agg.processes().filter(|p| !p.2).map(|p| p.0.pid).collect();
                for pid in live {
                    self.resolver.refresh(pid);
                }
                let followed: HashSet<u32> = self.agg.processes().map(|p| p.0.pid).collect();
                let mut names = Names { followed, dotnet: &mut self.resolver, native: None };
                let profiles = crate::pipeline::sinks::files::profiles(&self.agg, &mut names).map_err(|e| e.to_string());
                let events = crate::pipeline::sinks::files::events(&self.agg, start_unix_ns, duration_ns, true);
                let _ = reply.send(profiles.map(|profiles| Final { profiles, events, health: self.agg.health.clone() }));
            }
            Query::Top { after_ns, reply } => {
                let followed: HashSet<u32> = self.agg.processes().map(|p| p.0.pid).collect();
                let mut names = Names { followed, dotnet: &mut self.resolver, native: None };
                let _ = reply.send(crate::pipeline::sinks::terminal::window(&self.agg, &mut names, after_ns));
            }
            Query::Profile { kind, pid, since_ns, reply } => {
                let followed: HashSet<u32> = self.agg.processes().map(|p| p.0.pid).collect();
                let bytes = self
                    .agg
                    .profile(kind, pid, since_ns, &mut Names { followed, dotnet: &mut self.resolver, native: None })
                    .and_then(|p| {
                        let mut out = Vec::new();
                        clrprobe_profile::pprof::to_writer(&p, &mut out)?;
                        Ok(out)
                    })
                    .map_err(|e| e.to_string());
                let _ = reply.send(bytes);
                release_free_memory();
            }
        }
    }
}

/// Hands the memory freed after a profile (the per-request symbolizer's images) back to the
/// OS: glibc keeps a thread's freed arena memory otherwise, and an agent's RSS would keep the
/// peak of every request.
fn release_free_memory() {
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe { libc::malloc_trim(0) };
}
