//! The perf_event fallback sampler, for machines where BPF cannot load: one cpu-clock event
//! per thread of each target (as `perf record -p` does) with kernel+user callchains in a
//! ring buffer, aggregated here. Each sample keeps its time (CLOCK_MONOTONIC, as the BPF
//! sampler's) for the timeline formats. New threads are picked up at each drain.
//!
//! Each sample also carries the user registers (IP, SP, BP) and the top of the user stack
//! (`PERF_SAMPLE_REGS_USER` + `PERF_SAMPLE_STACK_USER`), unwound by the same userspace
//! unwinder as the BPF sampler's copies (DWARF CFI in ELF files, prologues in JIT code), so
//! stacks go through code without frame pointers too. `CLRPROBE_UNWIND=fp` keeps the
//! kernel's frame-pointer callchain only.
//!
//! A reader thread empties the rings every [`READ_EVERY`] (and unwinds the copies then, while
//! the processes are as they were), so nothing is lost while the caller's drains symbolize.
use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use perf_event_open::{
    config::{CallChain as ChainOpts, Clock, Cpu, Opts, Proc, RegsMask, SampleOn, Size},
    count::Counter,
    event::sw::Software,
    sample::{
        Sampler as RingSampler,
        record::{Record, sample::CallChain},
    },
};

use super::{RawSample, Sampler, SamplerError, SamplerKind, SamplerStats};

/// Ring buffer of 2^8 = 256 pages (1 MiB) per thread: a second of 999 Hz samples with deep
/// callchains (~400 B each) fits between two drains.
const RING_PAGES_EXP: u8 = 8;
/// With stack copies: 2^10 pages (4 MiB) per thread: about a second of 999 Hz samples with
/// 4 KiB copies, 200 ms at 4999 Hz, against a reader that comes every 10 ms.
const RING_PAGES_EXP_COPIES: u8 = 10;
/// How often the reader thread empties the rings.
const READ_EVERY: Duration = Duration::from_millis(10);
/// How often the unwinder reads new methods' prologues ([`crate::unwind::Unwinder::tick`]).
const TICK_EVERY: Duration = Duration::from_millis(100);
const MAX_FRAMES: u16 = 127;
/// Bytes of user stack copied per sample (above them, the frame-pointer callchain goes on).
const STACK_BYTES: u32 = 4096;
/// x86-64 perf register numbers: BP 6, SP 7, IP 8 (the sample lists them in this order).
const REGS_BP_SP_IP: u64 = (1 << 6) | (1 << 7) | (1 << 8);

struct ThreadEvent {
    pid: u32,
    counter: Counter,
    ring: RingSampler,
}

pub struct PerfSampler {
    /// What the reader thread and the drains share.
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
    interned: HashMap<Vec<u64>, Arc<[u64]>>,
}

/// The events, and the samples read from them between drains.
struct State {
    freq: u64,
    pids: Vec<u32>,
    threads: HashMap<u32, ThreadEvent>,
    /// Threads that could not be opened (exited in between): not retried.
    gone: HashSet<u32>,
    stats: SamplerStats,
    /// Userspace unwinding of the copied stacks (None: frame pointers only).
    unwinder: Option<crate::unwind::Unwinder>,
    /// Samples read from the rings between drains: (pid, tid, kernel, user, time) → count
    /// (samples with their time stay one by one).
    pending: HashMap<PendingKey, u64>,
}

impl PerfSampler {
    pub fn start(pids: &[u32], freq: u64) -> Result<Self, SamplerError> {
        let mut state = State {
            freq,
            pids: Vec::new(),
            threads: HashMap::new(),
            gone: HashSet::new(),
            stats: SamplerStats::default(),
            unwinder: (std::env::var("CLRPROBE_UNWIND").as_deref() != Ok("fp")).then(crate::unwind::Unwinder::new),
            pending: HashMap::new(),
        };
        state.add_pids(pids)?;
        if state.threads.is_empty() {
            return Err(SamplerError::Perf {
                what: format!("pids {pids:?}"),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no thread could be opened"),
            });
        }
        let state = Arc::new(Mutex::new(state));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (state, stop) = (Arc::clone(&state), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("perf-reader".into())
                .spawn(move || read_until_stopped(&state, &stop))
                .map_err(|source| SamplerError::Perf { what: "the ring reader thread".into(), source })?
        };
        Ok(Self { state, stop, reader: Some(reader), interned: HashMap::new() })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic in the reader leaves the samples as they were: keep using them.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the userspace unwinder did (None with frame pointers only).
    pub fn unwind_summary(&self) -> Option<crate::unwind::UnwindSummary> {
        self.state().unwinder.as_ref().map(|u| u.summary())
    }

    fn intern(&mut self, frames: Vec<u64>) -> Arc<[u64]> {
        if let Some(a) = self.interned.get(&frames) {
            return a.clone();
        }
        let a: Arc<[u64]> = Arc::from(frames.clone());
        self.interned.insert(frames, a.clone());
        a
    }
}

/// The reader thread: empties the rings every [`READ_EVERY`] until `stop`.
fn read_until_stopped(state: &Mutex<State>, stop: &AtomicBool) {
    let mut last_tick = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(READ_EVERY);
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        s.read_rings();
        if last_tick.elapsed() >= TICK_EVERY {
            last_tick = Instant::now();
            if let Some(u) = s.unwinder.as_mut() {
                u.tick();
            }
        }
    }
}

impl State {
    fn opts(&self) -> Opts {
        let mut opts = Opts { sample_on: SampleOn::Freq(self.freq), ..Default::default() };
        opts.sample_format.call_chain =
            Some(ChainOpts { exclude_user: false, exclude_kernel: false, defer_user: false, max_stack_frames: MAX_FRAMES });
        if self.unwinder.is_some() {
            opts.sample_format.user_regs = Some(RegsMask(REGS_BP_SP_IP));
            opts.sample_format.user_stack = Some(Size(STACK_BYTES));
        }
        opts.record_id_format.task = true;
        // Sample times on the clock the rest of clrprobe uses (EventPipe, BPF).
        opts.record_id_format.time = true;
        opts.timer = Some(Clock::Monotonic);
        opts.enable = true;
        opts
    }

    /// Reads every thread's ring now, unwinding the copied stacks while the stacks' processes
    /// are as they were (their maps and perf maps).
    fn read_rings(&mut self) {
        let mut lost = 0u64;
        let mut n = 0u64;
        for (&tid, ev) in &self.threads {
            let Some(iter) = ev.ring.iter() else { continue };
            for (_, record) in iter {
                match record {
                    Record::Sample(s) => {
                        let (mut kernel, mut user) = (Vec::new(), Vec::new());
                        for part in s.call_chain.iter().flatten() {
                            match part {
                                CallChain::Kernel(ips) => kernel.extend_from_slice(ips),
                                CallChain::User(ips) => user.extend_from_slice(ips),
                                _ => {}
                            }
                        }
                        if let (Some(u), Some((regs, _)), Some(stack)) = (self.unwinder.as_mut(), &s.user_regs, &s.user_stack)
                            && let [bp, sp, ip] = regs[..]
                            && ip != 0
                        {
                            user = u.unwind_copy(ev.pid, ip, sp, bp, stack, STACK_BYTES as usize, &user).0;
                        }
                        n += 1;
                        let time = s.record_id.time.unwrap_or(0);
                        *self.pending.entry((ev.pid, tid, kernel, user, time)).or_insert(0) += 1;
                    }
                    Record::LostSamples(l) => lost += l.lost_samples,
                    Record::LostRecords(l) => lost += l.lost_records,
                    _ => {}
                }
            }
        }
        self.stats.samples += n;
        self.stats.lost_samples += lost;
    }

    /// Opens an event for every thread of the targets not yet followed.
    fn scan_threads(&mut self) -> Result<(), SamplerError> {
        let opts = self.opts();
        for &pid in &self.pids {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
            for t in tasks.flatten() {
                let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
                if self.threads.contains_key(&tid) || self.gone.contains(&tid) {
                    continue;
                }
                let counter = match Counter::new(Software::CpuClock, (Proc(tid), Cpu::ALL), &opts) {
                    Ok(c) => c,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        self.gone.insert(tid);
                        continue;
                    }
                    Err(source) => return Err(SamplerError::Perf { what: format!("thread {tid} of {pid}"), source }),
                };
                let ring = counter
                    .sampler(if self.unwinder.is_some() { RING_PAGES_EXP_COPIES } else { RING_PAGES_EXP })
                    .map_err(|source| SamplerError::Perf { what: format!("ring buffer of thread {tid}"), source })?;
                self.threads.insert(tid, ThreadEvent { pid, counter, ring });
            }
        }
        Ok(())
    }

    fn add_pids(&mut self, pids: &[u32]) -> Result<(), SamplerError> {
        for &p in pids {
            if !self.pids.contains(&p) {
                self.pids.push(p);
            }
        }
        self.scan_threads()
    }
}

/// Thread name from /proc (the perf path does not carry comm per sample).
fn comm(pid: u32, tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).map(|s| s.trim_end().to_string()).unwrap_or_default()
}

/// (pid, tid, kernel frames, user frames, time).
type PendingKey = (u32, u32, Vec<u64>, Vec<u64>, u64);

impl Sampler for PerfSampler {
    fn kind(&self) -> SamplerKind {
        SamplerKind::PerfEvent
    }

    fn drain(&mut self) -> Result<Vec<RawSample>, SamplerError> {
        let agg = {
            let mut s = self.state();
            s.read_rings();
            let agg = std::mem::take(&mut s.pending);
            // Drop events of threads that exited (their rings were read above), follow new ones.
            s.threads.retain(|tid, ev| std::path::Path::new(&format!("/proc/{}/task/{tid}", ev.pid)).exists());
            s.scan_threads()?;
            agg
        };
        let mut out = Vec::with_capacity(agg.len());
        let mut comms: HashMap<u32, String> = HashMap::new();
        for ((pid, tid, kernel, user, time_ns), count) in agg {
            let kernel = self.intern(kernel);
            let user = self.intern(user);
            let comm = comms.entry(tid).or_insert_with(|| comm(pid, tid)).clone();
            out.push(RawSample { pid, tid, comm, kernel, user, count, time_ns });
        }
        Ok(out)
    }

    fn stats(&self) -> SamplerStats {
        self.state().stats
    }

    fn unwind_summary(&self) -> Option<crate::unwind::UnwindSummary> {
        PerfSampler::unwind_summary(self)
    }

    fn add_pids(&mut self, pids: &[u32]) -> Result<(), SamplerError> {
        self.state().add_pids(pids)
    }
}

impl Drop for PerfSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        for ev in self.state().threads.values() {
            let _ = ev.counter.disable();
        }
    }
}
