//! What a long recording holds, logged once a minute (`RUST_LOG=info`): entries of each
//! structure that grows with the host's processes, and the allocator's bytes in use, so a
//! soak's memory growth is attributed by measurement (`cargo xtask soak`).
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use super::AggKey;

/// How often the census is logged.
const EVERY: Duration = Duration::from_secs(30);

pub(super) struct Census {
    next: Instant,
}

impl Default for Census {
    fn default() -> Self {
        Self { next: Instant::now() + EVERY }
    }
}

/// (entries, entries of the targets, frames held) of an aggregate.
fn agg(m: &HashMap<AggKey, u64>, targets: &[u32]) -> (usize, usize, usize) {
    let mine = m.keys().filter(|k| targets.contains(&k.0)).count();
    let frames = m.keys().map(|k| k.3.len() + k.4.len()).sum();
    (m.len(), mine, frames)
}

/// Heap bytes in use and held by the allocator (glibc's mallinfo2).
fn heap() -> (usize, usize) {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let m = unsafe { libc::mallinfo2() };
    (m.uordblks + m.hblkhd, m.arena + m.hblkhd)
}

/// The parts counted.
pub(super) struct Parts<'a> {
    pub cpu: &'a HashMap<AggKey, u64>,
    pub offcpu: &'a HashMap<AggKey, u64>,
    pub timed: &'a super::gc::TimedSamples,
    pub builder: &'a clrprobe_profile::ProfileBuilder,
    pub resolver: &'a super::FrameResolver,
    pub thread_names: usize,
    pub summary: &'a super::RecordSummary,
    pub targets: &'a [u32],
}

impl Census {
    /// Logs the census when due.
    pub fn log(&mut self, p: &Parts<'_>) {
        if Instant::now() < self.next || !log::log_enabled!(log::Level::Info) {
            return;
        }
        self.next = Instant::now() + EVERY;
        let (cpu, cpu_t, cpu_f) = agg(p.cpu, p.targets);
        let (off, off_t, off_f) = agg(p.offcpu, p.targets);
        let (frames, stacks, labels, samples) = p.builder.counts();
        let fs = p.builder.frames();
        let unnamed_frames = fs.iter().filter(|f| f.is_unnamed()).count();
        let kernel = fs.iter().filter(|f| f.kind == clrprobe_profile::FrameKind::Kernel).count();
        let with_attrs = fs.iter().filter(|f| !f.attrs.is_empty()).count();
        let (procs, named, unnamed) = p.resolver.held();
        let (in_use, held) = heap();
        log::info!(
            "census: heap {} KiB in use of {} KiB; cpu agg {cpu} ({cpu_t} of targets, {cpu_f} frames), offcpu agg {off} ({off_t} of targets, {off_f} frames), timed {} + offcpu {}; builder frames {frames} ({unnamed_frames} unnamed, {kernel} kernel, {with_attrs} with attributes) stacks {stacks} labels {labels} samples {samples} strings {}; resolver processes {procs} named {named} unnamed {unnamed} modules {}; thread names {}; summary events {} eventpipe {} warnings {}",
            in_use >> 10,
            held >> 10,
            p.timed.held(),
            p.timed.offcpu.held(),
            p.builder.string_count(),
            p.resolver.image_cache().module_count(),
            p.thread_names,
            p.summary.events.len(),
            p.summary.eventpipe.len(),
            p.summary.warnings.len(),
        );
    }
}
