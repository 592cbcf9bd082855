//! The aggregator thread: absorbs every record, owns the symbolizer, answers the sinks'
//! queries (metrics text, gzipped pprof of a kind and window, the terminal view's window)
//! between records.
use std::{
    collections::{HashMap, HashSet},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use clrprobe_pipeline::stream::{Aggregator, AggregatorConfig, CombinedOptions, Namer, ProfileKind, Record};
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
    /// A CPU profile request began at `from_ns` (host monotonic): keep the samples from then
    /// until its [`Query::Profile`] or, if none comes (the client went away), `until_ns`.
    HoldCpu { from_ns: u64, until_ns: u64 },
    /// The sources' clock as the aggregator last saw it.
    Now(oneshot::Sender<u64>),
    /// A recording ends at this time (host monotonic ns): later samples are left out.
    EndAt(u64),
    /// A recording's named processes: the code their samples pass through is named as the
    /// samples come, before their set-up announces them (it waits up to 2 s per IPC
    /// exchange; their samples were named at the end, all at once, past a Ctrl-C's bound).
    Expect(Vec<u32>),
    /// A recording's progress: CPU samples of the followed processes, data lost, the share
    /// of their sampled managed frames named so far (0..=1).
    Progress(oneshot::Sender<(u64, u64, f64)>),
    /// A recording's end: every kind's profile of all the time kept and the event reports,
    /// after every record sent so far is absorbed.
    Final { start_unix_ns: u64, duration_ns: u64, reply: oneshot::Sender<Result<Final, String>> },
    /// A recording's end (`record`): the combined profile of every kind and the completed
    /// event reports, after every record sent so far is absorbed; symbolizing stops at
    /// `symbolize_by` (Ctrl-C: the recording ends within its bound).
    Combined { opts: CombinedOptions, symbolize_by: Option<Instant>, reply: oneshot::Sender<Result<Combined, String>> },
    /// A recording's end (`record --http` / `--providers`): each session's requests named
    /// and placed among the timed samples (after [`Query::Combined`]).
    /// Naming stops at `symbolize_by` (a recording ended by Ctrl-C).
    Http {
        parts: Vec<crate::record::http::NetPart>,
        clock: crate::record::http::Clock,
        symbolize_by: Option<Instant>,
        reply: oneshot::Sender<Vec<crate::http::HttpReport>>,
    },
    /// The kernel's symbols as the aggregator loaded them (`--save-raw` keeps those of the
    /// kernel frames seen).
    Kernel(oneshot::Sender<Option<std::sync::Arc<clrprobe_symbolizer::KernelSymbolizer>>>),
    /// A recording (`record --all`): exited processes are folded from now on (see
    /// [`crate::pipeline::fold`]); [`Query::Combined`] hands the folding back.
    Fold(Box<super::fold::Folding>),
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

/// What a recording kept, in `record`'s form.
pub struct Combined {
    pub profile: clrprobe_profile::Profile,
    /// Each followed process's event report, GC window and GC CPU filled in.
    pub reports: Vec<(u32, clrprobe_pipeline::EventReport)>,
    pub health: clrprobe_pipeline::stream::Health,
    /// Followed processes: pid, name, events read, events the runtime dropped, JIT methods.
    pub processes: Vec<(u32, String, u64, u64, u64)>,
    /// Address lookups left unnamed when symbolizing ran out of its time.
    pub out_of_time: u64,
    /// Records the sources sent that were not absorbed in time (a recording ended by Ctrl-C).
    pub left_out: u64,
    /// `record --all`: the processes folded while recording (their totals are in `profile`).
    pub folded: Option<super::fold::Folded>,
}

/// Names for one profile: the followed .NET processes' from the long-lived resolver, every
/// other process's from a resolver made for this profile and dropped after it, so the images
/// of whatever else runs on the host (compilers with huge symbol tables…) are not kept.
struct Names<'r> {
    dotnet: &'r mut FrameResolver,
    followed: HashSet<u32>,
    native: Option<FrameResolver>,
    /// When the per-profile resolver stops symbolizing (a recording ended by Ctrl-C).
    deadline: Option<Instant>,
    /// Other processes' native frames as `module+offset` only (`record --all`: the symbol
    /// tables of every binary on the host were most of its memory at the end).
    light: bool,
}

impl Namer for Names<'_> {
    fn stack(&mut self, pid: u32, kernel: &[u64], user: &[u64]) -> Vec<Frame> {
        if self.followed.contains(&pid) {
            return self.dotnet.stack(pid, kernel, user);
        }
        let dotnet = &*self.dotnet;
        let r = self.native.get_or_insert_with(|| {
            let mut r = FrameResolver::new();
            r.set_deadline(self.deadline);
            r.light_for_others(self.light);
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
    fn container(&mut self, pid: u32) -> Option<String> {
        // The id shortened to 12 as `docker ps` shows it.
        crate::discover::in_container(pid).then(|| {
            let id = super::sources::container_id(pid);
            if id.is_empty() { "yes".into() } else { id[..12.min(id.len())].to_string() }
        })
    }
    fn wait_kind(&mut self, frames: &[Frame]) -> Option<&'static str> {
        Some(crate::unwind::wait::kind(frames.iter().filter(|f| f.kind == clrprobe_profile::FrameKind::Kernel).map(|f| f.name.as_ref())))
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
/// A recording's passes over /proc/kallsyms naming the kernel frames noted meanwhile: at most
/// this often (the kernel formats every line of the file for each pass: with off-CPU stacks new
/// kernel addresses came every second, and a pass per tick was 37 % of clrprobe's CPU when
/// recording three busy processes; every 10 s, with the kernel symbol starts no longer held,
/// a pass was still a tenth of it). The end names the rest within its deadline.
const KERNEL_PASS_EVERY: Duration = Duration::from_secs(30);
/// How often the followed processes' maps and perf maps are read again (reading
/// /proc/PID/maps was a tenth of the aggregator's work at every one-second tick).
const REFRESH: Duration = Duration::from_secs(5);
/// … and a recording's perf maps (short-lived processes: their perf maps go when they exit);
/// its maps are read again every `REFRESH` as the agent's (a .NET process's maps change at
/// every second as its GC commits memory: reading and parsing them each second was a tenth of
/// a recording aggregator's CPU), and whenever an address falls outside them.
const RECORDING_REFRESH: Duration = Duration::from_secs(1);
/// The aggregator naps this long (a query ends the nap) when no record or query is waiting.
/// Blocking on the records' channel instead made every record of a mostly idle aggregator a
/// futex wake-up and two context switches (a fifth of the agent's CPU with three busy .NET processes); the channel
/// holds far more than the sources send in this time.
const IDLE_POLL: Duration = Duration::from_millis(20);
/// A recording's end absorbs the records still waiting up to this long past its symbolizing
/// deadline, without naming their code; records still waiting then are counted as left out.
const ABSORB_AFTER_SYMBOLIZING: Duration = Duration::from_millis(200);
/// How often `record --all` looks for exited processes that were not followed …
const NATIVES_CHECK: Duration = Duration::from_secs(2);
/// … and how long after they were first seen exited they are folded.
const NATIVES_SETTLE: Duration = Duration::from_secs(2);
/// How long a recording's end without a deadline waits for the folded processes' files.
const FOLD_FILES_WAIT: Duration = Duration::from_secs(10);
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
    noted: HashMap<u32, rustc_hash::FxHashSet<u64>>,
    last_renote: Instant,
    /// When the last pass over /proc/kallsyms began (None: none yet).
    last_kernel_pass: Option<Instant>,
    last_refresh: Instant,
    /// When the followed processes' maps were last read at a tick.
    last_maps_refresh: Instant,
    /// A pass naming noted kernel frames runs (a recording's).
    prefetching: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Records left waiting when a recording's end ran out of its time.
    left_out: u64,
    /// A recording's named processes not announced yet (see [`Query::Expect`]).
    expected: HashSet<u32>,
    /// `record --all`: exited processes are folded (see [`Query::Fold`]).
    folding: Option<Box<super::fold::Folding>>,
    /// `record --all`: the profile names other processes' native code lightly.
    host_wide: bool,
    /// `record --all`: processes not followed, named lightly as their samples come (their
    /// names are gone once they exit) and folded by thread name once exited.
    natives: FrameResolver,
    /// … those seen exited, since when.
    natives_gone: HashMap<u32, Instant>,
    last_natives_check: Instant,
    /// When the sizes of what is held were last logged (see [`CENSUS_EVERY`]).
    last_census: Instant,
}

/// Starts the aggregator thread; it ends when every record sender and every query sender is
/// gone (queries are answered after the sources have ended: a recording's final profiles).
pub fn spawn(cfg: AggregatorConfig, records: Receiver<Record>, queries: Receiver<Query>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("aggregator".into()).spawn(move || {
        let recording = cfg.keep_times;
        let mut s = State::new(cfg);
        if recording {
            // The kernel's symbols read meanwhile, not after Ctrl-C (as record does).
            s.resolver.preload_kernel();
        }
        let mut sinks = true;
        let mut sources = true;
        // A recording whose queries have all been answered: what is left to come is dropped.
        let mut discard = false;
        loop {
            let mut busy = false;
            let batch_start = Instant::now();
            let mut absorbed = 0usize;
            for i in 0..BATCH {
                // A query waiting (a recording's end above all) is answered before the rest
                // of a batch.
                if i % 64 == 63 && !queries.is_empty() {
                    break;
                }
                let got = records.try_recv();
                if let Ok(r) = &got {
                    super::sources::received(r);
                }
                match got {
                    Ok(_) if discard => busy = true,
                    // Runtime events, most records by far, are timed by the batch (two clock
                    // reads per record were 3 % of a busy recording's CPU).
                    Ok(r @ (Record::Clr(_) | Record::ClrBatch(_))) => {
                        s.absorb(r);
                        absorbed += 1;
                        busy = true;
                    }
                    Ok(r) => {
                        let (t, what) = (Instant::now(), record_kind(&r));
                        s.absorb(r);
                        if t.elapsed() > Duration::from_millis(100) {
                            log::info!("aggregator: a {what} record took {:?}", t.elapsed());
                        }
                        absorbed += 1;
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
            if absorbed > 0 && batch_start.elapsed() > Duration::from_millis(500) {
                log::info!("aggregator: a batch of {absorbed} records took {:?}", batch_start.elapsed());
            }
            while sinks {
                match queries.try_recv() {
                    Ok(q) => {
                        if matches!(q, Query::Final { .. } | Query::Combined { .. }) {
                            // Every record sent before the question is in the answer; after a
                            // Ctrl-C only those absorbed by the symbolizing deadline (the
                            // recording ends within its bound), the rest counted.
                            let by = match &q {
                                Query::Combined { symbolize_by, .. } => *symbolize_by,
                                _ => None,
                            };
                            // Past the symbolizing deadline what arrives is absorbed without
                            // being named (cheap): every sample the sources sent is kept.
                            s.resolver.set_deadline(by);
                            s.kernel_pass_deadline(by);
                            let (t, n, left) = absorb_until(&mut s, &records, by.map(|b| b + ABSORB_AFTER_SYMBOLIZING));
                            s.left_out = left;
                            log::info!("stop: {n} records absorbed in {:?} before the answer, {left} left", t.elapsed());
                        }
                        s.answer(q);
                        busy = true;
                    }
                    Err(TryRecvError::Empty) => break,
                    // The sinks are gone: drain the sources to their end.
                    Err(TryRecvError::Disconnected) => {
                        sinks = false;
                        if recording {
                            // A recording has its profile: its state (samples, symbolizers)
                            // goes now, not when the sources end (after a Ctrl-C they may
                            // still be stopping sessions while the outputs are written).
                            drop(std::mem::replace(&mut s, State::new(AggregatorConfig::default())));
                            release_free_memory();
                            discard = true;
                        }
                    }
                }
            }
            if !sources && !sinks {
                return;
            }
            if !busy {
                idle(&queries, sinks);
            }
        }
    })
}

/// Waits [`IDLE_POLL`] for records to gather, or less when a query comes (it is answered at
/// once: a scrape, `top`'s refresh or a recording's end does not wait out the nap). Queries are
/// few, so waking for them costs nothing the batching saves.
fn idle(queries: &Receiver<Query>, sinks: bool) {
    if !sinks {
        // The query channel is gone: it would be ready at once, for ever.
        std::thread::sleep(IDLE_POLL);
        return;
    }
    let mut sel = crossbeam_channel::Select::new();
    sel.recv(queries);
    // Ready (a query or the sinks gone) or timed out: the loop looks at the channel either way.
    let _ = sel.ready_timeout(IDLE_POLL);
}

/// Absorbs the records waiting, until `by` if given (checked every 256 records): when it
/// began, how many it absorbed, how many were left waiting.
fn absorb_until(s: &mut State, records: &Receiver<Record>, by: Option<Instant>) -> (Instant, u64, u64) {
    let (t, mut n) = (Instant::now(), 0u64);
    loop {
        if n % 256 == 0 && by.is_some_and(|by| Instant::now() >= by) {
            return (t, n, records.len() as u64);
        }
        match records.try_recv() {
            Ok(r) => {
                super::sources::received(&r);
                s.absorb(r);
                n += 1;
            }
            Err(_) => return (t, n, 0),
        }
    }
}

fn record_kind(r: &Record) -> &'static str {
    match r {
        Record::Cpu(_) => "cpu",
        Record::OffCpu(_) => "offcpu",
        Record::Clr(_) | Record::ClrBatch(_) => "clr",
        Record::Started(_) => "started",
        Record::Exited { .. } => "exited",
        Record::Tick { .. } => "tick",
        _ => "other",
    }
}

impl State {
    fn new(cfg: AggregatorConfig) -> Self {
        State {
            agg: Aggregator::new(cfg),
            resolver: FrameResolver::new(),
            last_seen: HashMap::new(),
            last_forget: Instant::now(),
            noted: HashMap::new(),
            last_renote: Instant::now(),
            last_kernel_pass: None,
            last_refresh: Instant::now(),
            last_maps_refresh: Instant::now(),
            prefetching: Default::default(),
            left_out: 0,
            expected: HashSet::new(),
            folding: None,
            host_wide: false,
            natives: FrameResolver::new(),
            natives_gone: HashMap::new(),
            last_natives_check: Instant::now(),
            last_census: Instant::now(),
        }
    }

    fn absorb(&mut self, r: Record) {
        if crate::record::save_raw::active() {
            // `record --save-raw` on the pipeline: what the sources sent, in this order.
            crate::record::save_raw::record(&r);
        }
        match &r {
            // The .NET processes' code is named as it arrives (JIT code moves, processes end);
            // other processes' when a profile asks for it, which keeps host-wide sampling cheap.
            Record::Cpu(c) | Record::OffCpu(c) if self.agg.follows(c.pid) || self.expected.contains(&c.pid) => {
                self.note(c.pid, &c.user);
                if self.agg.config().keep_times {
                    // A recording names kernel frames as they come (a pass over kallsyms at
                    // its end took a second of a Ctrl-C's bound).
                    self.resolver.note_kernel(&c.kernel);
                }
                self.last_seen.insert(c.pid, Instant::now());
            }
            // `record --all`: other processes' code named (`module+offset`) while they run.
            Record::Cpu(c) if self.host_wide && c.pid != 0 => {
                self.natives.ensure_process(c.pid);
                self.natives.note_addresses(c.pid, &c.user, 0);
                self.natives.note_kernel(&c.kernel);
            }
            Record::Started(i) => {
                self.expected.remove(&i.pid);
                self.resolver.add_process(i.pid);
                self.resolver.refresh(i.pid);
                self.last_seen.insert(i.pid, Instant::now());
            }
            // A recording's process that exits: its code as it was (the perf map the
            // symbolizer holds open is read once more).
            Record::Exited { pid, .. } if self.agg.config().keep_times => {
                self.resolver.refresh(*pid);
            }
            Record::Tick { .. } if self.last_refresh.elapsed() >= if self.agg.config().keep_times { RECORDING_REFRESH } else { REFRESH } => {
                self.last_refresh = Instant::now();
                // (The agent's ticks come every REFRESH: its maps at each.)
                let maps = !self.agg.config().keep_times || self.last_maps_refresh.elapsed() >= REFRESH;
                if maps {
                    self.last_maps_refresh = Instant::now();
                }
                let live: Vec<u32> = self.agg.processes().filter(|p| !p.2).map(|p| p.0.pid).collect();
                for pid in live {
                    if maps {
                        self.resolver.refresh(pid);
                    } else {
                        self.resolver.refresh_perf_map(pid);
                    }
                    self.last_seen.insert(pid, Instant::now());
                }
                if self.last_renote.elapsed() >= RENOTE_AFTER {
                    self.last_renote = Instant::now();
                    self.noted.clear();
                }
                self.forget_gone();
                if !self.agg.config().keep_times {
                    // A long-running agent: the memory freed since (records absorbed, a burst
                    // of them queued while the aggregator lagged, forgotten processes) handed
                    // back, as a recording does after each drain. The reader threads allocate
                    // the records and this thread frees them: freed chunks scattered between
                    // live ones otherwise stay resident until a profile request trims.
                    release_free_memory();
                }
                if self.last_census.elapsed() >= CENSUS_EVERY && log::log_enabled!(log::Level::Info) {
                    self.last_census = Instant::now();
                    self.census();
                }
            }
            _ => {}
        }
        if self.agg.config().keep_times
            && matches!(r, Record::Tick { .. })
            && self.last_kernel_pass.is_none_or(|t| t.elapsed() >= KERNEL_PASS_EVERY)
            && !self.prefetching.swap(true, std::sync::atomic::Ordering::AcqRel)
            && let Ok(k) = self.resolver.image_cache().kernel()
        {
            // The kernel frames noted since the last tick named in one pass, on a thread of
            // its own (a pass can take a second on a loaded host: queries are not held).
            let busy = std::sync::Arc::clone(&self.prefetching);
            self.last_kernel_pass = Some(Instant::now());
            let spawned = std::thread::Builder::new().name("kallsyms-names".into()).spawn(move || {
                let _ = k.prefetch([]);
                busy.store(false, std::sync::atomic::Ordering::Release);
            });
            if spawned.is_err() {
                self.prefetching.store(false, std::sync::atomic::Ordering::Release);
            }
        }
        let tick = matches!(r, Record::Tick { .. });
        let spent = match r {
            Record::ClrBatch(v) => {
                self.agg.absorb_clr_batch(&v);
                Some(v)
            }
            r => {
                self.agg.absorb(r);
                None
            }
        };
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
        if let Some(v) = spent {
            // Its vector and payload buffer back to the readers (not freed on this thread).
            super::sources::recycle(v);
        }
        if tick && self.folding.is_some() {
            self.fold_settled();
            if self.last_natives_check.elapsed() >= NATIVES_CHECK {
                self.last_natives_check = Instant::now();
                self.fold_natives();
            }
        }
    }

    /// Folds the processes not followed that exited at least [`NATIVES_SETTLE`] ago (their
    /// last samples have arrived), by thread name; forgets what naming them held.
    fn fold_natives(&mut self) {
        let now = Instant::now();
        let followed: HashSet<u32> = self.agg.processes().map(|p| p.0.pid).collect();
        for pid in self.natives.pids() {
            if followed.contains(&pid) || alive(pid) {
                self.natives_gone.remove(&pid);
            } else {
                self.natives_gone.entry(pid).or_insert(now);
            }
        }
        let settled: HashSet<u32> = self.natives_gone.iter().filter(|(_, t)| t.elapsed() >= NATIVES_SETTLE).map(|(p, _)| *p).collect();
        if settled.is_empty() {
            return;
        }
        let t0 = Instant::now();
        let samples = self.agg.take_unfollowed(&settled);
        if let Some(f) = self.folding.as_mut()
            && let Err(e) = f.fold_unfollowed(&samples, &mut self.natives)
        {
            log::warn!("folding exited processes: {e}");
        }
        self.natives.forget(&settled);
        self.natives_gone.retain(|p, _| !settled.contains(p));
        log::info!("fold: {} exited processes not followed folded ({} stacks) in {:?}", settled.len(), samples.len(), t0.elapsed());
    }

    /// Folds the followed processes whose exit has settled (`record --all`), then forgets
    /// what naming them needed.
    fn fold_settled(&mut self) {
        let pids = self.agg.settled_exits();
        let Some(f) = self.folding.as_mut() else { return };
        for pid in pids {
            // `--http`: its requests named and placed among its samples before they go.
            match f.net_of(pid) {
                super::fold::NetOfFold::Wait => continue,
                super::fold::NetOfFold::Ready(part, clock) => {
                    let reports = crate::record::http::finish(vec![part], &mut self.resolver, &PipelineTimes(&self.agg), clock);
                    f.add_http(reports);
                }
                super::fold::NetOfFold::None => {}
            }
            let t0 = Instant::now();
            let opts = f.options(self.agg.now_ns());
            let window = opts.duration_ns;
            let mut names = Names { followed: [pid].into(), dotnet: &mut self.resolver, native: None, deadline: None, light: false };
            match self.agg.take_process(pid, &opts, window, &mut names) {
                Ok(Some(t)) => {
                    if let Err(e) = f.fold(t) {
                        log::warn!("folding the exited process {pid}: {e}");
                    }
                }
                Ok(None) => {}
                Err(e) => log::warn!("folding the exited process {pid}: {e}"),
            }
            self.resolver.forget(&[pid].into());
            self.noted.remove(&pid);
            self.last_seen.remove(&pid);
            log::info!("fold: {pid} folded in {:?}", t0.elapsed());
        }
    }

    /// A recording's end: kernel names are read from /proc/kallsyms until `by` (a pass cut
    /// short leaves the frames it did not reach unnamed).
    fn kernel_pass_deadline(&self, by: Option<Instant>) {
        if let Some(k) = self.resolver.image_cache().kernel_if_loaded() {
            k.set_pass_deadline(by);
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

    /// Logs the sizes of what the aggregator and the symbolizer hold, and malloc's view of
    /// the heap (a long-running agent's memory: what grows).
    fn census(&self) {
        let noted: usize = self.noted.values().map(|n| n.len()).sum();
        log::info!("census: malloc {}; noted {noted}; resolver {}; {}", malloc_census(), self.resolver.census(), self.agg.census());
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
            Query::HoldCpu { from_ns, until_ns } => self.agg.hold_cpu(from_ns, until_ns),
            Query::Now(reply) => {
                let _ = reply.send(self.agg.now_ns());
            }
            Query::EndAt(ns) => self.agg.end_samples_at(ns),
            Query::Fold(f) => {
                self.folding = Some(f);
                self.host_wide = true;
                self.natives.light_for_others(true);
                if let Ok(k) = self.resolver.image_cache().kernel() {
                    self.natives.image_cache().share_kernel(k);
                }
            }
            Query::Expect(pids) => {
                for pid in pids {
                    if !self.agg.follows(pid) && self.expected.insert(pid) {
                        self.resolver.add_process(pid);
                        self.resolver.refresh(pid);
                    }
                }
            }
            Query::Progress(reply) => {
                let samples = self.agg.processes().map(|p| p.1.cpu_samples).sum();
                let _ = reply.send((samples, self.agg.health.lost.values().sum(), self.resolver.named_share()));
            }
            Query::Final { start_unix_ns, duration_ns, reply } => {
                // The followed processes' code as it is now (the last perf-map lines).
                let live: Vec<u32> = self.agg.processes().filter(|p| !p.2).map(|p| p.0.pid).collect();
                for pid in live {
                    self.resolver.refresh(pid);
                }
                let followed: HashSet<u32> = self.agg.processes().map(|p| p.0.pid).collect();
                let mut names = Names { followed, dotnet: &mut self.resolver, native: None, deadline: None, light: false };
                let profiles = crate::pipeline::sinks::files::profiles(&self.agg, &mut names).map_err(|e| e.to_string());
                let events = crate::pipeline::sinks::files::events(&self.agg, start_unix_ns, duration_ns, true);
                let _ = reply.send(profiles.map(|profiles| Final { profiles, events, health: self.agg.health.clone() }));
            }
            Query::Combined { opts, symbolize_by, reply } => {
                let t0 = Instant::now();
                let live: Vec<u32> = self.agg.processes().filter(|p| !p.2).map(|p| p.0.pid).collect();
                for pid in live {
                    if symbolize_by.is_some_and(|by| Instant::now() >= by) {
                        break;
                    }
                    self.resolver.refresh(pid);
                }
                log::info!("stop: maps read again in {:?}", t0.elapsed());
                self.agg.name_event_threads();
                self.resolver.out_of_time = 0;
                self.resolver.set_deadline(symbolize_by);
                // Named processes never announced (a set-up still under way) are named by the
                // long-lived resolver too, which has named their samples as they came.
                let followed: HashSet<u32> = self.agg.processes().map(|p| p.0.pid).chain(self.expected.iter().copied()).collect();
                // Host-wide, other processes' code as it was named while they ran.
                let native = self.host_wide.then(|| {
                    let mut r = std::mem::take(&mut self.natives);
                    r.set_deadline(symbolize_by);
                    r
                });
                let mut names = Names { followed, dotnet: &mut self.resolver, native, deadline: symbolize_by, light: self.host_wide };
                let profile = self.agg.combined_profile(&opts, &mut names).map_err(|e| e.to_string());
                log::info!("stop: combined profile built in {:?}", t0.elapsed());
                // The folded processes' totals beside it; their files in flight get until the
                // symbolizing deadline (after a Ctrl-C: within its bound).
                let files_by = symbolize_by.unwrap_or_else(|| Instant::now() + FOLD_FILES_WAIT);
                let (profile, folded) = match (profile, self.folding.take()) {
                    (Ok(p), Some(f)) => match f.finish(p, files_by) {
                        Ok((p, folded)) => (Ok(p), Some(folded)),
                        Err(e) => (Err(e.to_string()), None),
                    },
                    (p, _) => (p, None),
                };
                let out_of_time = names.native.as_ref().map_or(0, |r| r.out_of_time) + self.resolver.out_of_time;
                self.resolver.set_deadline(None);
                self.kernel_pass_deadline(None);
                let reports = self.agg.completed_event_reports(opts.duration_ns);
                let processes = self.agg.processes().map(|(i, c, _)| (i.pid, i.name.clone(), c.events, c.dropped_events, c.jit_methods)).collect();
                let health = self.agg.health.clone();
                let _ = reply.send(profile.map(|profile| Combined { profile, reports, health, processes, out_of_time, left_out: self.left_out, folded }));
            }
            Query::Http { parts, clock, symbolize_by, reply } => {
                self.resolver.set_deadline(symbolize_by);
                let times = PipelineTimes(&self.agg);
                let reports = crate::record::http::finish(parts, &mut self.resolver, &times, clock);
                self.resolver.set_deadline(None);
                let _ = reply.send(reports);
            }
            Query::Kernel(reply) => {
                let _ = reply.send(self.resolver.image_cache().kernel().ok());
            }
            Query::Top { after_ns, reply } => {
                let followed: HashSet<u32> = self.agg.processes().map(|p| p.0.pid).collect();
                let mut names = Names { followed, dotnet: &mut self.resolver, native: None, deadline: None, light: false };
                let _ = reply.send(crate::pipeline::sinks::terminal::window(&self.agg, &mut names, after_ns));
            }
            Query::Profile { kind, pid, since_ns, reply } => {
                let followed: HashSet<u32> = self.agg.processes().map(|p| p.0.pid).collect();
                let bytes = self
                    .agg
                    .profile(kind, pid, since_ns, &mut Names { followed, dotnet: &mut self.resolver, native: None, deadline: None, light: false })
                    .and_then(|p| {
                        let mut out = Vec::new();
                        clrprobe_profile::pprof::to_writer(&p, &mut out)?;
                        Ok(out)
                    })
                    .map_err(|e| e.to_string());
                let _ = reply.send(bytes);
                if kind == ProfileKind::Cpu {
                    self.agg.release_cpu(since_ns);
                }
                release_free_memory();
            }
        }
    }
}

/// How often a long-running aggregator logs the sizes of what it holds (at `RUST_LOG=info`).
const CENSUS_EVERY: Duration = Duration::from_secs(60);

/// malloc's totals: bytes in use, free but held, in mmapped chunks, and the releasable top.
fn malloc_census() -> String {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallinfo2 only reads the allocator's statistics.
        let m = unsafe { libc::mallinfo2() };
        format!("in use {} KB, free {} KB, mmapped {} KB, arena {} KB, top {} KB", m.uordblks >> 10, m.fordblks >> 10, m.hblkhd >> 10, m.arena >> 10, m.keepcost >> 10)
    }
    #[cfg(not(target_env = "gnu"))]
    String::new()
}

/// The aggregator's timed samples, for the slowest HTTP requests' threads.
struct PipelineTimes<'a>(&'a Aggregator);

impl crate::record::http::StackTimes for PipelineTimes<'_> {
    fn cpu(&self) -> Box<dyn Iterator<Item = crate::record::http::TimedStack<'_>> + '_> {
        Box::new(self.0.timed_cpu().map(|(k, t, n)| (k.0, k.1, &k.3[..], &k.4[..], t, n)))
    }
    fn offcpu(&self) -> Box<dyn Iterator<Item = crate::record::http::TimedStack<'_>> + '_> {
        Box::new(self.0.timed_offcpu().map(|(k, t, n)| (k.0, k.1, &k.3[..], &k.4[..], t, n)))
    }
}

/// Hands the memory freed after a profile (the per-request symbolizer's images) back to the
/// OS: glibc keeps a thread's freed arena memory otherwise, and an agent's RSS would keep the
/// peak of every request.
fn release_free_memory() {
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_end_absorbs_until_its_deadline_and_counts_the_rest() {
        let mut s = State::new(AggregatorConfig::default());
        let (tx, rx) = crossbeam_channel::unbounded();
        for t in 0..1000 {
            tx.send(Record::Tick { time_ns: t }).unwrap();
        }
        // Past its deadline: nothing more absorbed, every waiting record counted.
        let (_, n, left) = absorb_until(&mut s, &rx, Some(Instant::now() - Duration::from_millis(1)));
        assert_eq!((n, left), (0, 1000));
        // In time (or without a deadline): all of them.
        let (_, n, left) = absorb_until(&mut s, &rx, Some(Instant::now() + Duration::from_secs(60)));
        assert_eq!((n, left), (1000, 0));
        tx.send(Record::Tick { time_ns: 1000 }).unwrap();
        assert_eq!(absorb_until(&mut s, &rx, None).1, 1);
    }
}
