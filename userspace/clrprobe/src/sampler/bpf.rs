//! The BPF sampler: a perf_event program per CPU aggregating (pid, tid, stacks) → count in a
//! kernel hash map, drained periodically (read and delete each key).
use std::{collections::HashMap, sync::Arc};

use aya::maps::{MapData, StackTraceMap};
use clrprobe_common::{names, ustack};

use super::{RawSample, Sampler, SamplerError, SamplerKind, SamplerStats};
use crate::bpf::{BpfError, Loaded};

/// Stack ids kept resolved at most (of the kernel map's 32,768): the most a table of 2,048
/// buckets holds (7/8 of them), cleared when full. A full table never doubles (at 8,192 ids
/// a table of 8,192 buckets doubled to 16,384, 409 KB). It was 7,168 (8,192 buckets): in the
/// agent (three busy processes, heaptrack) the table and the stacks it read (many shared with
/// the aggregator's keys) grew from 0.28 MB at 100 s to 0.6–0.7 MB at minutes 3–9. At
/// 1,792 the agent's cache fills in 25–60 s and is read again from the map for 1.6–5 % of its
/// lookups (1,792 reads per 35–110 k lookups, about 45 reads a second).
const STACK_CACHE: usize = 1_792;

pub struct BpfSampler {
    bpf: Loaded,
    /// Stack ids are stable while the map is not cleared: resolve each once.
    stacks: HashMap<i32, Arc<[u64]>>,
    empty: Arc<[u64]>,
    /// The kernel stack of preempted off-CPU intervals ([`crate::unwind::wait::PREEMPTED_ADDRESS`]).
    preempted: Arc<[u64]>,
    /// Samples lost between reading a key and deleting it are not counted here: the window
    /// is a few microseconds per key per drain.
    drained: u64,
    /// Stack-id lookups and map reads (cache misses) since the cache was last cleared.
    stack_lookups: u64,
    stack_reads: u64,
    /// Kernel BPF run-time statistics switched on while this fd is open (`CLRPROBE_BPF_STATS=1`).
    _stats_fd: Option<std::os::fd::OwnedFd>,
    /// User stack copies (None: frame pointers only, `CLRPROBE_UNWIND=fp`).
    copies: Option<StackCopies>,
    /// Processes whose copies are unwound (None: all). Host-wide, only the targets: reading
    /// the unwind tables of every binary on the host (compilers' 100+ MB libraries) cost
    /// hundreds of MB; the others keep their frame-pointer stacks.
    unwind_pids: Option<std::collections::HashSet<u32>>,
}

/// What unwinding the BPF programs' user stack copies needs.
struct StackCopies {
    /// The ring, emptied by its own thread as records arrive.
    ring: crate::bpf::RingReader,
    unwinder: crate::unwind::Unwinder,
    /// CPU samples read from the ring while draining off-CPU records.
    pending_cpu: Vec<RawSample>,
    /// Off-CPU stacks by (tid, generation): `SampleKey::generation` of the intervals using them.
    offcpu: HashMap<(u32, u32), Arc<[u64]>>,
}

/// Whether off-CPU stacks may be copied later (`attach_sched_switch`): the ring keeps its
/// full size. A caller that records CPU samples only clears it before starting the sampler.
static OFFCPU_COPIES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Says whether this process will record off-CPU stacks (sizes the stack-copy ring).
pub fn set_offcpu_copies(wanted: bool) {
    OFFCPU_COPIES.store(wanted, std::sync::atomic::Ordering::Relaxed);
}

/// Unwinding mode from `CLRPROBE_UNWIND`: `fp` keeps the frame-pointer walk only.
fn copy_flags() -> u64 {
    match std::env::var("CLRPROBE_UNWIND").as_deref() {
        Ok("fp") => 0,
        _ => ustack::COPY_CPU | ustack::COPY_OFFCPU,
    }
}

impl BpfSampler {
    pub fn start(pids: &[u32], freq: u64) -> Result<Self, SamplerError> {
        Self::start_with(pids, Some(freq))
    }

    /// Loads the BPF object for `pids`; samples CPU at `freq` Hz when given (without it, only
    /// the other programs — sched_switch, uprobes — are attached later).
    pub fn start_with(pids: &[u32], freq: Option<u64>) -> Result<Self, SamplerError> {
        Self::start_opts(pids, freq, copy_flags())
    }

    /// As [`BpfSampler::start_with`], with frame-pointer stacks only (no user stack copies,
    /// whatever `CLRPROBE_UNWIND` says): the always-on agent's default.
    pub fn start_fp_only(pids: &[u32], freq: u64) -> Result<Self, SamplerError> {
        Self::start_opts(pids, Some(freq), 0)
    }

    fn start_opts(pids: &[u32], freq: Option<u64>, flags: u64) -> Result<Self, SamplerError> {
        // Off-CPU copies can come at any switch rate: a 4 MiB ring read at least every 50 ms. CPU
        // copies get a ring sized to the rate, and no copies at all the smallest one (BPF for
        // sched_switch times or uprobes only, as `record --exceptions`: the 16 MB ring was
        // 32 MB of clrprobe's resident set, mapped and never written).
        let offcpu = flags != 0 && OFFCPU_COPIES.load(std::sync::atomic::Ordering::Relaxed);
        let mut bpf = match freq {
            _ if flags == 0 => Loaded::load_with_ring(crate::bpf::MIN_RING_BYTES)?,
            // Host-wide (pid 0), every process's copies come through the ring: twice the room.
            Some(f) if !offcpu => Loaded::load_with_ring(crate::bpf::cpu_ring_bytes(f).saturating_mul(if pids.contains(&0) { 2 } else { 1 }).min(16 << 20))?,
            None if !offcpu => Loaded::load_with_ring(crate::bpf::MIN_RING_BYTES)?,
            _ => Loaded::load_with_ring(crate::bpf::OFFCPU_RING_BYTES)?,
        };
        bpf.add_targets(pids)?;
        let _stats_fd = if std::env::var("CLRPROBE_BPF_STATS").is_ok_and(|v| v == "1") {
            aya::sys::enable_stats(aya::sys::Stats::RunTime).ok()
        } else {
            None
        };
        let copies = if flags != 0 {
            bpf.set_ustack_flags(flags)?;
            let ring = bpf.take_ustack_ring()?;
            let ring = crate::bpf::RingReader::spawn(ring, crate::bpf::copy_queue_records(freq))
                .map_err(BpfError::RingReader)?;
            Some(StackCopies {
                ring,
                unwinder: crate::unwind::Unwinder::new(),
                pending_cpu: Vec::new(),
                offcpu: HashMap::new(),
            })
        } else {
            None
        };
        if let Some(freq) = freq {
            bpf.attach_sampler(freq)?;
        }
        Ok(Self { bpf, stacks: HashMap::new(), empty: Arc::from(Vec::new()), preempted: Arc::from([crate::unwind::wait::PREEMPTED_ADDRESS]), drained: 0, stack_lookups: 0, stack_reads: 0, _stats_fd, copies, unwind_pids: None })
    }

    /// What the userspace unwinder did so far (None without stack copies).
    /// With `CLRPROBE_BPF_STATS=1` also without copies (the programs' run time).
    pub fn unwind_summary(&self) -> Option<crate::unwind::UnwindSummary> {
        let base = match self.copies.as_ref() {
            Some(c) => c.unwinder.summary(),
            None if self._stats_fd.is_some() => Default::default(),
            None => return None,
        };
        Some(crate::unwind::UnwindSummary { bpf: self.bpf.copy_stats().unwrap_or_default(), ..base })
    }

    /// Empties the ring of stack copies now (between drains, so it does not overflow).
    pub fn poll_copies(&mut self) -> Result<(), BpfError> {
        self.read_copies()?;
        if let Some(c) = self.copies.as_mut() {
            c.unwinder.tick();
        }
        Ok(())
    }

    /// Reads the copied stacks waiting in the ring and unwinds them: CPU samples go to
    /// `pending_cpu`, off-CPU stacks to `offcpu`.
    fn read_copies(&mut self) -> Result<(), BpfError> {
        let Some(c) = self.copies.as_mut() else { return Ok(()) };
        let records = c.ring.drain();
        for r in records {
            let h = r.hdr;
            let fp = self.stack(h.user_stack_id)?;
            let kernel = if h.kind == ustack::KIND_CPU { self.stack(h.kernel_stack_id)? } else { self.empty.clone() };
            let unwound = self.unwind_pids.as_ref().is_none_or(|p| p.contains(&h.pid));
            let Some(c) = self.copies.as_mut() else { break };
            let user: Arc<[u64]> = if unwound {
                Arc::from(c.unwinder.unwind(h.pid, h.ip, h.sp, h.bp, &r.data, &fp).0)
            } else if h.kind == ustack::KIND_CPU {
                fp
            } else {
                // Off-CPU: the interval keeps its frame-pointer stack.
                continue;
            };
            if h.kind == ustack::KIND_CPU {
                self.drained += 1;
                c.pending_cpu.push(RawSample {
                    pid: h.pid,
                    tid: h.tid,
                    comm: String::from_utf8_lossy(comm_bytes(&h.comm)).into_owned(),
                    kernel,
                    user,
                    time_ns: h.time_ns,
                    count: 1,
                });
            } else {
                c.offcpu.insert((h.tid, h.generation), user);
            }
        }
        Ok(())
    }

    /// Unwinds stack copies of these processes only (and of those added later with
    /// [`BpfSampler::unwind_pid`]); the others keep their frame-pointer stacks.
    pub fn unwind_only(&mut self, pids: &[u32]) {
        self.unwind_pids = Some(pids.iter().copied().collect());
    }

    /// Unwinds the stack copies of `pid` too (see [`BpfSampler::unwind_only`]).
    pub fn unwind_pid(&mut self, pid: u32) {
        if let Some(p) = self.unwind_pids.as_mut() {
            p.insert(pid);
        }
    }

    /// Forgets exited processes: their unwinding state (maps, modules, perf map, /proc/PID/mem),
    /// the unwind tables nobody maps any more, and the off-CPU stack copies of their threads.
    pub fn forget_processes(&mut self, pids: &std::collections::HashSet<u32>, tids: &std::collections::HashSet<u32>) {
        if let Some(c) = self.copies.as_mut() {
            for &pid in pids {
                c.unwinder.remove_process(pid);
            }
            c.unwinder.drop_unused_files();
            c.offcpu.retain(|(tid, _), _| !tids.contains(tid));
        }
        if let Some(p) = self.unwind_pids.as_mut() {
            p.retain(|pid| !pids.contains(pid));
        }
    }

    /// The loaded BPF object (to attach more programs to it).
    pub fn loaded(&mut self) -> &mut Loaded {
        &mut self.bpf
    }

    fn stack(&mut self, id: i32) -> Result<Arc<[u64]>, BpfError> {
        if id < 0 {
            return Ok(self.empty.clone());
        }
        self.stack_lookups += 1;
        if let Some(s) = self.stacks.get(&id) {
            return Ok(s.clone());
        }
        // Bounded: a host-wide recording sees up to MAX_STACKS ids; a dropped one is read again.
        if self.stacks.len() >= STACK_CACHE {
            log::debug!("stack-id cache full ({} ids): cleared; {} lookups, {} map reads since the last clear", self.stacks.len(), self.stack_lookups, self.stack_reads);
            self.stacks.clear();
            (self.stack_lookups, self.stack_reads) = (0, 0);
        }
        self.stack_reads += 1;
        let name = names::STACKS;
        let map = self.bpf.ebpf.map(name).ok_or(BpfError::NoMap { name })?;
        let traces: StackTraceMap<&MapData> =
            StackTraceMap::try_from(map).map_err(|source| BpfError::Map { name, source })?;
        let frames: Arc<[u64]> = match traces.get(&(id as u32), 0) {
            Ok(t) => t.frames().iter().map(|f| f.ip).take_while(|&ip| ip != 0).collect(),
            Err(_) => self.empty.clone(),
        };
        self.stacks.insert(id, frames.clone());
        Ok(frames)
    }
}

impl BpfSampler {
    /// Off-CPU time recorded since the last call: `count` is nanoseconds.
    pub fn drain_offcpu(&mut self) -> Result<Vec<RawSample>, SamplerError> {
        // Counts first, then the ring: a count's copy was sent before the count was added.
        let entries = self.bpf.drain_offcpu()?;
        self.read_copies()?;
        let mut out = Vec::with_capacity(entries.len());
        for (k, ns) in entries {
            // With a copy, `generation` names it (see clrprobe-ebpf sched.rs).
            let copied = (k.generation != 0)
                .then(|| self.copies.as_ref().and_then(|c| c.offcpu.get(&(k.tid, k.generation)).cloned()))
                .flatten();
            if let Some(c) = self.copies.as_mut() {
                match (k.generation != 0, copied.is_some()) {
                    (true, true) => c.unwinder.stats.offcpu_copied += 1,
                    (true, false) => c.unwinder.stats.offcpu_copy_missing += 1,
                    _ => c.unwinder.stats.offcpu_without_copy += 1,
                }
            }
            let (kernel, user) = if k.kernel_stack_id == clrprobe_common::switch_config::PREEMPTED_STACK_ID {
                // Runnable, not waiting: no stacks were walked (see clrprobe-ebpf sched.rs).
                (self.preempted.clone(), self.empty.clone())
            } else {
                let user = match copied {
                    Some(u) => u,
                    None => self.stack(k.user_stack_id)?,
                };
                (leaf_as_return_address(self.stack(k.kernel_stack_id)?), user)
            };
            out.push(RawSample {
                pid: k.pid,
                tid: k.tid,
                comm: String::from_utf8_lossy(k.comm_bytes()).into_owned(),
                kernel,
                user,
                time_ns: k.time << 10,
                count: ns,
            });
        }
        // Later intervals of a thread use the latest generation of each of its two places
        // (`ustack::offcpu_slot`: one by odd numbers, one by even); the one before stays too,
        // for an interval counted just after the counts were read.
        if let Some(c) = self.copies.as_mut() {
            let mut latest: HashMap<(u32, u32), [u32; 2]> = HashMap::new();
            for &(tid, g) in c.offcpu.keys() {
                let e = latest.entry((tid, ustack::offcpu_slot(g))).or_insert([0, 0]);
                if g > e[0] {
                    *e = [g, e[0]];
                } else if g > e[1] {
                    e[1] = g;
                }
            }
            c.offcpu.retain(|&(tid, g), _| latest.get(&(tid, ustack::offcpu_slot(g))).is_some_and(|e| g >= e[1]));
        }
        Ok(out)
    }
}

/// An off-CPU kernel stack, taken in the sched_switch hook with the hook's own frames skipped:
/// its leaf is a return address (into `__schedule`), not an interrupted instruction, and is
/// named as one (minus one, like every frame above it; the call can be the function's last
/// instruction).
fn leaf_as_return_address(kernel: Arc<[u64]>) -> Arc<[u64]> {
    match kernel.first() {
        Some(&leaf) if leaf != 0 => {
            let mut v = kernel.to_vec();
            v[0] = leaf - 1;
            v.into()
        }
        _ => kernel,
    }
}

fn comm_bytes(c: &[u8; 16]) -> &[u8] {
    let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
    &c[..end]
}

impl Sampler for BpfSampler {
    fn kind(&self) -> SamplerKind {
        SamplerKind::Bpf
    }

    fn drain(&mut self) -> Result<Vec<RawSample>, SamplerError> {
        self.bpf.poll_logs();
        let name = names::SAMPLE_COUNTS;
        let entries = self.bpf.drain_counts(name)?;
        self.read_copies()?;
        let mut samples = self.copies.as_mut().map(|c| std::mem::take(&mut c.pending_cpu)).unwrap_or_default();
        for (k, count) in entries {
            self.drained += count;
            samples.push(RawSample {
                pid: k.pid,
                tid: k.tid,
                comm: String::from_utf8_lossy(k.comm_bytes()).into_owned(),
                kernel: self.stack(k.kernel_stack_id)?,
                user: self.stack(k.user_stack_id)?,
                time_ns: k.time << 10,
                count,
            });
        }
        Ok(samples)
    }

    fn stats(&self) -> SamplerStats {
        let s = self.bpf.stats().unwrap_or_default();
        SamplerStats {
            samples: s.samples,
            lost_samples: s.dropped_map_full,
            lost_user_stacks: s.user_stack_errors,
            lost_kernel_stacks: s.kernel_stack_errors,
        }
    }

    fn add_pids(&mut self, pids: &[u32]) -> Result<(), SamplerError> {
        Ok(self.bpf.add_targets(pids)?)
    }

    fn as_bpf(&mut self) -> Option<&mut BpfSampler> {
        Some(self)
    }

    fn unwind_summary(&self) -> Option<crate::unwind::UnwindSummary> {
        BpfSampler::unwind_summary(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stack_cache_fills_its_table_without_doubling_it() {
        let mut m: HashMap<i32, Arc<[u64]>> = HashMap::new();
        for id in 0..STACK_CACHE as i32 {
            m.insert(id, Arc::from(Vec::new()));
        }
        let full = m.capacity();
        assert_eq!(full, STACK_CACHE, "the table grew past the cache's bound");
        // One more id would double it.
        m.insert(-1, Arc::from(Vec::new()));
        assert!(m.capacity() > full);
    }
}
