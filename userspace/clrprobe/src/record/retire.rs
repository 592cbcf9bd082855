//! Exited processes of a long host-wide recording (`--all`), folded into the profile while it
//! runs. Once a process has exited, its EventPipe session has ended and its addresses are
//! named (see [`FrameResolver::retire_exited`]), its samples — CPU and off-CPU aggregates,
//! timed samples, EventPipe event samples — go into the profile being built, and everything
//! clrprobe held for it goes: symbolizer, named addresses, mappings, labels, thread names,
//! unwinding state and tables of files nobody maps any more, off-CPU stack copies.
//!
//! Frames of folded processes lose their address and mapping (both differ in every process):
//! the same code run by a thousand short-lived processes is one frame and one stack in the
//! profile, told apart by the `pid` label. Exited processes that were not targets (the host's
//! compilers, shells…) keep only their thread name as label, so they add up by name. What
//! stays per exited target is its samples (one per distinct stack and thread, one per timed
//! sample), its event report and its line in the summary.
use std::collections::{HashMap, HashSet};

use clrprobe_profile::{Frame, FrameKind, Period, Profile, ProfileBuilder, ProfileError, SampleType, kinds};

use super::{
    AggKey, FrameResolver, RecordSummary, clr_session::SessionOutcome, fold_files::FoldFiles, gc, targets::Targets, timeline,
};
use crate::sampler::BpfSampler;

/// Processes waiting to be folded, and what folding them left for the end.
#[derive(Default)]
pub(super) struct Retired {
    /// Exited, their names resolved, waiting for their session to end.
    pending: HashSet<u32>,
    /// User-thread CPU samples inside the GC pauses of folded processes.
    pub user_gc_samples: HashMap<u32, u64>,
    /// Processes folded so far.
    pub folded: u64,
    /// Event reports in the summary completed when their process was folded (the first ones).
    pub completed_reports: usize,
    /// Recorded processes folded so far whose pid the host profile keeps (see [`HostLabels`]).
    pids_kept: usize,
}

/// How the host profile keeps the samples of a folded recorded process whose own files were
/// written at fold time (they keep every label): without the thread id (its samples add up per
/// stack and thread name), and after the first [`PIDS_KEPT`] such processes without the pid
/// either (they add up per process name): memory stays flat over a long run of short-lived
/// processes, as it does for the host's other processes ([`timeline::ProcessLabels::by_name_only`]).
pub(super) struct HostLabels<'a> {
    keep_pid: &'a HashSet<u32>,
}

/// Folded recorded processes whose pid stays in the host profile.
pub const PIDS_KEPT: usize = 200;

impl HostLabels<'_> {
    /// A frame as the host profile keeps it: code without a name (JIT stubs, unnamed
    /// addresses, named by their address and so distinct in every process) becomes its module,
    /// as for the host's other processes; the process's own files keep the address.
    fn reframe(&self, f: &Frame) -> Option<Frame> {
        (f.is_unnamed() && f.kind != FrameKind::Kernel)
            .then(|| Frame::new(if f.module.is_empty() { "[unknown]".to_string() } else { f.module.to_string() }, f.module.to_string(), f.kind))
    }

    fn relabel(&self, mut l: clrprobe_profile::LabelSet) -> clrprobe_profile::LabelSet {
        l.tid = None;
        if l.pid.is_some_and(|p| !self.keep_pid.contains(&p)) {
            l.pid = None;
        }
        l
    }
}

/// The profile's clock and period, for the per-process files of folded processes.
pub(super) struct Clock {
    pub period: Option<Period>,
    /// Unix ns of the profile start.
    pub start_unix_ns: u64,
    /// Recorded so far.
    pub elapsed_ns: u64,
    /// CPU sample period.
    pub period_ns: u64,
}

/// The recording's state a fold reads and empties.
pub(super) struct Live<'a> {
    pub builder: &'a mut ProfileBuilder,
    pub types: &'a [SampleType],
    pub cpu: &'a mut HashMap<AggKey, u64>,
    pub offcpu: &'a mut HashMap<AggKey, u64>,
    pub timed: &'a mut gc::TimedSamples,
    pub resolver: &'a mut FrameResolver,
    pub processes: &'a mut timeline::ProcessLabels,
    pub thread_names: &'a mut HashMap<(u32, u64), String>,
    pub summary: &'a mut RecordSummary,
    pub finished: &'a mut Vec<(u32, SessionOutcome)>,
    pub jit_counts: &'a mut HashMap<u32, usize>,
    pub start_mono_ns: i64,
    pub thread_roots: bool,
    pub proc_cpu: &'a mut gc::ProcCpu,
    pub clock: Clock,
    /// Writes the per-process files of the recorded processes folded (None: no such files).
    pub files: Option<&'a mut FoldFiles>,
}

impl Retired {
    /// Folds the processes the resolver has just retired, and those whose session has ended
    /// since; forgets them everywhere.
    pub fn fold(
        &mut self,
        ready: Vec<u32>,
        live: &mut Live<'_>,
        targets: &mut Targets,
        bpf: Option<&mut BpfSampler>,
    ) -> Result<(), ProfileError> {
        self.pending.extend(ready);
        let now: HashSet<u32> = self.pending.iter().copied().filter(|&p| targets.settled(p)).collect();
        if now.is_empty() {
            return Ok(());
        }
        self.pending.retain(|p| !now.contains(p));
        // Processes that were not targets (host-wide): by thread name only.
        let recorded: HashSet<u32> = now.iter().copied().filter(|p| targets.pids.contains(p) || targets.retired.contains(p)).collect();
        live.processes.by_name_only(now.iter().copied().filter(|p| !recorded.contains(p)));
        // Files written at fold time keep every label: the host profile needs fewer.
        let keep_pid: HashSet<u32> = if live.files.is_some() {
            let mut r: Vec<u32> = recorded.iter().copied().collect();
            r.sort_unstable();
            r.truncate(PIDS_KEPT.saturating_sub(self.pids_kept));
            self.pids_kept += r.len();
            r.into_iter().collect()
        } else {
            recorded.clone()
        };
        let host = live.files.is_some().then_some(HostLabels { keep_pid: &keep_pid });
        let tids = fold_into(&now, &recorded, live, &mut self.user_gc_samples, host.as_ref())?;
        self.completed_reports = live.summary.events.len();
        live.resolver.forget(&now);
        live.processes.forget(&now);
        live.thread_names.retain(|k, _| !now.contains(&k.0));
        live.jit_counts.retain(|p, _| !now.contains(p));
        targets.forget(&now);
        if let Some(b) = bpf {
            b.forget_processes(&now, &tids);
        }
        self.folded += now.len() as u64;
        Ok(())
    }
}

/// Adds the samples of `pids` to the profile as totals, and hands those of the `recorded`
/// ones, at their times, to the per-process file writer; returns their threads.
fn fold_into(
    pids: &HashSet<u32>,
    recorded: &HashSet<u32>,
    s: &mut Live<'_>,
    user_gc: &mut HashMap<u32, u64>,
    host: Option<&HostLabels<'_>>,
) -> Result<HashSet<u32>, ProfileError> {
    let mut tids = HashSet::new();
    // Built apart (timed), then added to the profile as totals: what stays per folded
    // process is one sample per distinct stack and thread.
    let mut folded = ProfileBuilder::new(s.types.to_vec());
    // Processes that were not recorded keep code by module (see `Unplaced::coarse`).
    let coarse: HashSet<u32> = pids.difference(recorded).copied().collect();
    let mut names = Unplaced(&mut *s.resolver, &coarse);
    // EventPipe: event samples and the report (its GC pauses place the CPU samples below).
    let mut mine = Vec::new();
    let mut i = 0;
    while i < s.finished.len() {
        if pids.contains(&s.finished[i].0) {
            mine.push(s.finished.swap_remove(i));
        } else {
            i += 1;
        }
    }
    let first_report = s.summary.events.len();
    for (pid, outcome) in mine {
        let profiles = super::absorb_outcome(pid, outcome, s.summary, names.0, s.thread_names, s.jit_counts, None);
        profiles.write_into_at(&mut folded, &mut names, Some(s.start_mono_ns))?;
    }
    let windows = gc::GcWindows::from_reports(&s.summary.events[first_report..]);
    let width = s.types.len();
    let column = |k: &str| s.types.iter().position(|t| t.kind == k);
    let (cpu_col, off_col) = (column(kinds::CPU), column(kinds::OFF_CPU));

    // Timed samples (from the aggregates too, which count them).
    let timed_cpu = s.timed.take_pids(pids);
    let timed_off = s.timed.offcpu.take_pids(pids);
    for (agg, timed) in [(&mut *s.cpu, &timed_cpu), (&mut *s.offcpu, &timed_off)] {
        for (key, _, v) in timed {
            if let Some(n) = agg.get_mut(key) {
                *n = n.saturating_sub(*v);
            }
        }
    }
    if let Some(col) = cpu_col {
        let samples = timed_cpu.iter().map(|(key, t, n)| {
            let in_gc = windows.contains(key.0, key.1, *t);
            if in_gc && !gc::is_gc_thread(&key.2) {
                *user_gc.entry(key.0).or_insert(0) += *n;
            }
            timeline::TimedInput { key, time_mono_ns: *t, value: *n as i64, column: col, in_gc }
        });
        timeline::add_timed(&mut folded, width, samples, &mut names, s.processes, s.start_mono_ns)?;
    }
    if let Some(col) = off_col {
        let samples = timed_off
            .iter()
            .map(|(key, t, ns)| timeline::TimedInput { key, time_mono_ns: *t, value: *ns as i64, column: col, in_gc: false });
        timeline::add_timed(&mut folded, width, samples, &mut names, s.processes, s.start_mono_ns)?;
    }
    tids.extend(timed_cpu.iter().chain(&timed_off).map(|e| e.0.1));

    // What is left aggregated.
    for (agg, col) in [(&mut *s.cpu, cpu_col), (&mut *s.offcpu, off_col)] {
        let taken: Vec<(AggKey, u64)> = agg.extract_if(|k, _| pids.contains(&k.0)).filter(|(_, n)| *n > 0).collect();
        tids.extend(taken.iter().map(|(k, _)| k.1));
        let Some(col) = col else { continue };
        let is_offcpu = Some(col) == off_col;
        super::add_aggregates(&mut folded, width, col, is_offcpu, taken.iter().map(|(k, n)| (k, *n, false)), &mut names, s.processes, s.thread_roots)?;
    }

    // Their reports are complete now (the /proc CPU times of their threads are not kept).
    let user_gc_ns: HashMap<u32, u64> = pids.iter().filter_map(|p| user_gc.remove(p).map(|n| (*p, n * s.clock.period_ns))).collect();
    let reports = &mut s.summary.events[first_report..];
    gc::complete_reports(reports, &[], s.proc_cpu, &user_gc_ns, s.clock.elapsed_ns);
    s.proc_cpu.forget(pids);
    if let Some(p) = &s.clock.period {
        folded.set_period(p.clone());
    }
    folded.set_start_time_ns(s.clock.start_unix_ns);
    folded.set_duration_ns(s.clock.elapsed_ns);
    let folded = folded.build();
    add_totals(s.builder, &folded, host)?;
    if let Some(files) = s.files.as_deref_mut()
        && !recorded.is_empty()
    {
        let reports = &s.summary.events[first_report..];
        let with_reports = gc::add_markers(super::attach_reports(folded, reports).map_err(record_to_profile)?, reports, s.start_mono_ns)?;
        for (pid, p) in super::split_by_process(&with_reports, Some(recorded))? {
            files.send(pid, p);
        }
    }
    // Beyond the first processes, what their files hold is not kept twice: their event
    // reports (a soak of an hour kept 1,400, ~2 KB each, and the host's events.json and
    // summary listed each) and their session's provider list.
    if let Some(h) = host {
        let before = s.summary.events.len();
        let mut i = first_report;
        while i < s.summary.events.len() {
            if h.keep_pid.contains(&s.summary.events[i].0) {
                i += 1;
            } else {
                s.summary.events.swap_remove(i);
            }
        }
        s.summary.reports_in_files += (before - s.summary.events.len()) as u64;
        s.summary.eventpipe_providers.retain(|(p, _)| h.keep_pid.contains(p) || !pids.contains(p));
    }
    Ok(tids)
}

fn record_to_profile(e: super::RecordError) -> ProfileError {
    match e {
        super::RecordError::Profile(e) => e,
        other => ProfileError::Encode(other.to_string()),
    }
}

/// Adds the samples of `p` to `b` without their times (summed per stack and labels, the
/// labels as `host` keeps them).
fn add_totals(b: &mut ProfileBuilder, p: &Profile, host: Option<&HostLabels<'_>>) -> Result<(), ProfileError> {
    // (id in `b`, coarsened: consecutive ones are one frame).
    let frames = p
        .frames()
        .iter()
        .map(|f| match host.and_then(|h| h.reframe(f)) {
            Some(coarse) => b.intern_frame(coarse).map(|id| (id, true)),
            None => b.intern_frame(f.clone()).map(|id| (id, false)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let labels = p
        .label_sets()
        .iter()
        .map(|l| b.intern_labels(match host {
            Some(h) => h.relabel(l.clone()),
            None => l.clone(),
        }))
        .collect::<Result<Vec<_>, _>>()?;
    crate::pipeline::fold::add_restacked(b, p, &frames, &labels)
}

/// The resolver's frames without address and mapping: equal across processes. Processes in
/// the set (exited, not recorded: the host's compilers, shells…) keep their code by module
/// (`module+offset` and unnamed addresses would add frames without bound over a long run of
/// a build host), consecutive frames of one module as one.
pub(super) struct Unplaced<'a>(pub &'a mut FrameResolver, pub &'a HashSet<u32>);

impl Unplaced<'_> {
    fn strip(&self, pid: u32, mut frames: Vec<Frame>) -> Vec<Frame> {
        for f in &mut frames {
            f.address = 0;
            f.mapping = None;
        }
        if self.1.contains(&pid) { by_module(frames) } else { frames }
    }
}

/// Code frames named `module+offset` or not named at all become their module (`[unknown]`
/// without one); consecutive ones of the same module, one frame.
fn by_module(frames: Vec<Frame>) -> Vec<Frame> {
    let mut out: Vec<Frame> = Vec::with_capacity(frames.len());
    for mut f in frames {
        if f.kind != FrameKind::Kernel && (f.is_unnamed() || f.name.starts_with(&format!("{}+0x", f.module))) {
            f = Frame::new(if f.module.is_empty() { "[unknown]".to_string() } else { f.module.to_string() }, f.module.to_string(), f.kind);
            if out.last().is_some_and(|l| l.name == f.name && l.kind == f.kind) {
                continue;
            }
        }
        out.push(f);
    }
    out
}


impl super::StackSource for Unplaced<'_> {
    fn stack(&mut self, pid: u32, kernel: &[u64], user: &[u64]) -> Vec<Frame> {
        let frames = self.0.stack(pid, kernel, user);
        self.strip(pid, frames)
    }
}

impl clrprobe_pipeline::FrameSource for Unplaced<'_> {
    fn frames(&mut self, pid: u32, stack: &[u64]) -> Vec<Frame> {
        let frames = self.0.stack(pid, &[], stack);
        self.strip(pid, frames)
    }
}

#[cfg(test)]
mod tests {
    use clrprobe_profile::{Frame, FrameKind, LabelSet};

    #[test]
    fn host_keeps_folded_processes_by_stack_and_thread_name() {
        let keep: std::collections::HashSet<u32> = [7].into();
        let h = super::HostLabels { keep_pid: &keep };
        let l = |pid| LabelSet { thread_name: Some("Worker".into()), process_name: Some("app".into()), ..LabelSet::thread(pid, 99) }.with_string("exception", "E");
        let kept = h.relabel(l(7));
        assert_eq!((kept.pid, kept.tid, kept.thread_name.as_deref()), (Some(7), None, Some("Worker")));
        let beyond = h.relabel(l(8));
        assert_eq!((beyond.pid, beyond.tid, beyond.process_name.as_deref()), (None, None, Some("app")));
        assert_eq!(beyond.strings.len(), 1, "event labels stay");
        // Two processes beyond the first ones: one label set.
        assert_eq!(h.relabel(l(9)), beyond);
    }

    #[test]
    fn host_keeps_unnamed_code_of_folded_processes_by_module() {
        let keep: std::collections::HashSet<u32> = [7].into();
        let h = super::HostLabels { keep_pid: &keep };
        let unnamed = Frame::new("0x7f0000001234", "memfd:doublemapper", FrameKind::Jit).with_attr("unnamed", "1");
        let coarse = h.reframe(&unnamed).expect("coarsened");
        assert_eq!((coarse.name.as_ref(), coarse.is_unnamed()), ("memfd:doublemapper", false));
        assert!(h.reframe(&Frame::new("Program::Main", "app.dll", FrameKind::Jit)).is_none());
        // Two processes' unnamed addresses: one frame in the host profile.
        let other = Frame::new("0x7f0000009999", "memfd:doublemapper", FrameKind::Jit).with_attr("unnamed", "1");
        assert_eq!(h.reframe(&other), Some(coarse));
    }

    #[test]
    fn unrecorded_code_is_kept_by_module() {
        let f = |name: &str, module: &str, kind| Frame::new(name.to_string(), module.to_string(), kind);
        let frames = vec![
            f("main", "rustc", FrameKind::Native),
            f("librustc_driver.so+0x1234", "librustc_driver.so", FrameKind::Native),
            f("librustc_driver.so+0x99", "librustc_driver.so", FrameKind::Native),
            f("0x7f0000001234", "", FrameKind::Unknown).with_attr("unnamed", "1"),
            f("do_syscall_64", "[kernel]", FrameKind::Kernel),
        ];
        let names: Vec<String> = super::by_module(frames).iter().map(|f| f.name.to_string()).collect();
        assert_eq!(names, ["main", "librustc_driver.so", "[unknown]", "do_syscall_64"]);
    }
}
