//! `record --all` on the pipeline: each followed (.NET) process is folded once it has exited
//! and its last records have arrived (see [`Aggregator::take_process`]). Its `PREFIX.PID.*`
//! files are written then, on a background thread, with every sample at its time and its
//! event report; the host profile keeps only its totals, and the aggregator nothing more of it.
//!
//! In the host profile a folded process's frames lose their address and mapping (both differ
//! in every process: the same code run by a thousand short-lived processes is one frame), code
//! without a name becomes its module, and its samples lose their thread id. The first
//! [`PIDS_KEPT`] folded processes keep their `pid` label and their event report in the summary;
//! later ones add up by process name, their reports in their own files only.
//!
//! Processes that are not followed (not .NET) are named lightly as their samples come
//! (`module+offset`) and, once exited, folded by thread name only, code by module.
use std::collections::{HashMap, HashSet};

use clrprobe_pipeline::{
    EventReport,
    stream::{CombinedOptions, Taken},
};
use clrprobe_profile::{Frame, FrameId, FrameKind, LabelSet, LabelSetId, Profile, ProfileBuilder, ProfileError, SampleType, StackId, remap::Remap};

use crate::{
    http::HttpReport,
    output::Written,
    record::{
        fold_files::FoldFiles,
        http::{Clock, NetPart},
    },
};

/// Folded processes whose pid (and event report) the host profile and the summary keep.
pub const PIDS_KEPT: usize = 200;

/// The folding state of a recording, held by the aggregator.
pub struct Folding {
    /// The recording's clock and columns (the duration is set at each fold).
    opts: CombinedOptions,
    /// Writes the folded processes' files (None: not written).
    files: Option<FoldFiles>,
    /// Totals of the folded processes, in the recording's columns.
    host: ProfileBuilder,
    /// Anything folded into `host`.
    any: bool,
    kept: HashSet<u32>,
    /// Thread names of folded processes that are not followed (beyond, [`OTHER_THREADS`]).
    thread_names: HashSet<String>,
    folded: Folded,
    /// `--http`/`--providers`: the sessions' collector outcomes, named at each fold.
    net: Option<FoldNet>,
}

/// `--http`/`--providers` while folding: each session's outcome arrives when its stream ends
/// (before the exit is announced); a process is folded with its requests, named and placed
/// among its samples then (they go with it).
struct FoldNet {
    parts: crossbeam_channel::Receiver<NetPart>,
    clock: Clock,
    /// Outcomes arrived, by pid, not folded yet.
    pending: HashMap<u32, NetPart>,
    /// Settled processes whose outcome has not arrived: since when they wait.
    waiting: HashMap<u32, std::time::Instant>,
}

/// How long a settled process waits for its session's outcome before it is folded without
/// (a process whose session never opened has none; one that arrives later is reported at the
/// end, without its samples).
const NET_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// What a process to fold has of `--http`/`--providers`.
pub enum NetOfFold {
    /// Nothing asked, or its outcome waited for long enough.
    None,
    /// Not arrived yet: fold it later.
    Wait,
    /// Its outcome, and the recording's clock to place it on.
    Ready(NetPart, Clock),
}

/// What folding kept for the summary.
#[derive(Default)]
pub struct Folded {
    /// Every folded process: pid, name, events read, events dropped, JIT methods.
    pub processes: Vec<(u32, String, u64, u64, u64)>,
    /// The event reports of the first [`PIDS_KEPT`] folded processes.
    pub reports: Vec<(u32, EventReport)>,
    /// Reports only in their process's files.
    pub reports_in_files: u64,
    /// Exited processes that were not followed, folded by thread name.
    pub others: u64,
    /// Folded processes whose pid the host profile keeps.
    pub kept: HashSet<u32>,
    /// The files written (every failure, the first ones written), the pids whose files were
    /// handed to the writer, and how many more files were written.
    pub written: Vec<Written>,
    pub file_pids: Vec<u32>,
    pub more_files: usize,
    /// `--http`/`--providers`: the folded processes' reports.
    pub http: Vec<HttpReport>,
    /// Session outcomes that arrived but whose processes were not folded (still running at
    /// the end, or folded before they arrived): reported at the end.
    pub net_pending: Vec<NetPart>,
}

impl Folding {
    /// `prefix`: where the per-process files go (`PREFIX.PID.*`; None: not written).
    /// `types`: the recording's columns (as [`Aggregator::combined_profile`] makes them).
    pub fn new(opts: CombinedOptions, types: Vec<SampleType>, prefix: Option<std::path::PathBuf>) -> Self {
        Self {
            opts,
            files: prefix.map(FoldFiles::start),
            host: ProfileBuilder::new(types),
            any: false,
            kept: HashSet::new(),
            thread_names: HashSet::new(),
            folded: Folded::default(),
            net: None,
        }
    }

    /// `--http`/`--providers`: the sessions' outcomes arrive on `parts` (a receiver shared with
    /// the end of the recording, which reports what is left), placed on `clock`.
    pub fn with_net(mut self, parts: crossbeam_channel::Receiver<NetPart>, clock: Clock) -> Self {
        self.net = Some(FoldNet { parts, clock, pending: HashMap::new(), waiting: HashMap::new() });
        self
    }

    /// What folding `pid` (settled) has of `--http`/`--providers` now.
    pub fn net_of(&mut self, pid: u32) -> NetOfFold {
        let Some(n) = self.net.as_mut() else { return NetOfFold::None };
        for part in n.parts.try_iter() {
            n.pending.insert(part.pid, part);
        }
        if let Some(part) = n.pending.remove(&pid) {
            n.waiting.remove(&pid);
            return NetOfFold::Ready(part, n.clock);
        }
        let since = *n.waiting.entry(pid).or_insert_with(std::time::Instant::now);
        if since.elapsed() < NET_WAIT {
            return NetOfFold::Wait;
        }
        log::info!("fold: {pid} folded without its session's requests (not arrived in {NET_WAIT:?})");
        n.waiting.remove(&pid);
        NetOfFold::None
    }

    /// `--http`/`--providers`: the reports of a process being folded.
    pub fn add_http(&mut self, reports: Vec<HttpReport>) {
        self.folded.http.extend(reports);
    }

    /// Folds the CPU samples of exited processes that were not followed: by thread name only
    /// (the first [`THREAD_NAMES_KEPT`] names), code by module, named by `names`.
    pub fn fold_unfollowed(&mut self, samples: &[(clrprobe_pipeline::stream::StackKey, u64)], names: &mut crate::record::FrameResolver) -> Result<(), ProfileError> {
        let mut pids: Vec<u32> = samples.iter().map(|s| s.0.0).collect();
        pids.dedup();
        self.folded.others += pids.len() as u64;
        let Some(col) = self.host.sample_types().iter().position(|t| t.kind == clrprobe_profile::kinds::CPU) else { return Ok(()) };
        let width = self.host.sample_types().len();
        let mut values = vec![0i64; width];
        for (k, n) in samples {
            let frames = by_module(names.stack(k.0, &k.3, &k.4));
            let mut ids = Vec::with_capacity(frames.len());
            for f in frames {
                ids.push(self.host.intern_frame(f)?);
            }
            let stack = self.host.intern_stack(&ids)?;
            let name: &str = &k.2;
            let kept = self.thread_names.contains(name) || (self.thread_names.len() < THREAD_NAMES_KEPT && self.thread_names.insert(name.to_string()));
            let labels = self.host.intern_labels(LabelSet { thread_name: Some(if kept { name } else { OTHER_THREADS }.into()), ..LabelSet::default() })?;
            values[col] = *n as i64;
            self.host.add_sample(stack, &values, labels)?;
            self.any = true;
        }
        Ok(())
    }

    /// The options of a fold at `now_ns` (host monotonic).
    pub fn options(&self, now_ns: u64) -> CombinedOptions {
        CombinedOptions { duration_ns: now_ns.saturating_sub(self.opts.start_mono_ns), ..self.opts.clone() }
    }

    /// Folds a process taken out of the aggregator.
    pub fn fold(&mut self, t: Taken) -> Result<(), ProfileError> {
        let pid = t.info.pid;
        // Without files of their own, every folded process keeps its pid.
        let keep = self.files.is_none() || self.kept.len() < PIDS_KEPT;
        if keep {
            self.kept.insert(pid);
        }
        if t.profile.sample_types() != self.host.sample_types() {
            return Err(ProfileError::Encode(format!("the columns of {pid}'s profile differ from the recording's")));
        }
        add_totals(&mut self.host, &t.profile, keep)?;
        self.any = true;
        self.folded.processes.push((pid, t.info.name.clone(), t.events, t.dropped_events, t.jit_methods));
        let reports = [(pid, t.report)];
        if let Some(files) = self.files.as_mut() {
            let with = crate::record::attach_reports(t.profile, &reports);
            let with = crate::record::gc::add_markers(with, &reports, self.opts.start_mono_ns.min(i64::MAX as u64) as i64)
                .map_err(|e| ProfileError::Encode(e.to_string()))?;
            files.send(pid, with);
        }
        let [report] = reports;
        if keep {
            self.folded.reports.push(report);
        } else {
            self.folded.reports_in_files += 1;
        }
        Ok(())
    }

    /// The recording's profile with the folded processes' totals (`p`: the processes still
    /// followed and every other process), and what folding kept; the files in flight are
    /// awaited until `files_by`.
    pub fn finish(mut self, p: Profile, files_by: std::time::Instant) -> Result<(Profile, Folded), ProfileError> {
        if let Some(f) = self.files.take() {
            (self.folded.written, self.folded.file_pids, self.folded.more_files) = f.finish(files_by);
        }
        self.folded.kept = std::mem::take(&mut self.kept);
        if let Some(n) = self.net.take() {
            let mut left: Vec<NetPart> = n.pending.into_values().chain(n.parts.try_iter()).collect();
            left.sort_by_key(|p| p.pid);
            self.folded.net_pending = left;
        }
        if !self.any {
            return Ok((p, self.folded));
        }
        let mut b = self.host;
        if b.sample_types() != p.sample_types() {
            return Err(ProfileError::Encode("the folded processes' columns differ from the recording's".into()));
        }
        if let Some(period) = p.period() {
            b.set_period(period.clone());
        }
        b.set_start_time_ns(p.start_time_ns());
        b.set_duration_ns(p.duration_ns());
        let mut remap = Remap::new();
        for s in p.samples() {
            let stack = remap.stack(&mut b, &p, s.stack)?;
            let labels = remap.labels(&mut b, &p, s.labels)?;
            match s.timestamp_ns {
                Some(t) => b.add_timed_sample(stack, s.values, labels, t)?,
                None => b.add_sample(stack, s.values, labels)?,
            }
        }
        for m in p.markers() {
            b.add_marker(m.clone());
        }
        for c in p.comments() {
            b.add_comment(c.clone());
        }
        Ok((b.build(), self.folded))
    }
}

/// Thread names of folded processes that were not followed kept apart; later ones add up as
/// [`OTHER_THREADS`] (test harnesses name a thread per test).
const THREAD_NAMES_KEPT: usize = 1024;
const OTHER_THREADS: &str = "[other threads]";

/// Frames of a process that was not followed, as the host profile keeps them: without address
/// and mapping, code named `module+offset` or not at all as its module, consecutive frames of
/// one module as one.
fn by_module(frames: Vec<Frame>) -> Vec<Frame> {
    let mut out: Vec<Frame> = Vec::with_capacity(frames.len());
    for mut f in frames {
        if f.kind != FrameKind::Kernel && (f.is_unnamed() || f.name.starts_with(&format!("{}+0x", f.module))) {
            f = Frame::new(if f.module.is_empty() { "[unknown]".to_string() } else { f.module.to_string() }, f.module.to_string(), f.kind);
            if out.last().is_some_and(|l| l.name == f.name && l.kind == f.kind) {
                continue;
            }
        }
        f.address = 0;
        f.mapping = None;
        out.push(f);
    }
    out
}

/// A folded process's frame as the host profile keeps it: without address and mapping, code
/// without a name as its module (true: coarsened).
fn host_frame(f: &Frame) -> (Frame, bool) {
    if f.is_unnamed() && f.kind != FrameKind::Kernel {
        let module = if f.module.is_empty() { "[unknown]".to_string() } else { f.module.to_string() };
        return (Frame::new(module, f.module.to_string(), f.kind), true);
    }
    let mut g = f.clone();
    g.address = 0;
    g.mapping = None;
    (g, false)
}

/// A folded process's labels as the host profile keeps them: without the thread id, and
/// without the pid unless `keep_pid`.
fn host_labels(mut l: LabelSet, keep_pid: bool) -> LabelSet {
    l.tid = None;
    if !keep_pid {
        l.pid = None;
    }
    l
}

/// Adds the samples of `p` to `b` without their times (summed per stack and labels).
fn add_totals(b: &mut ProfileBuilder, p: &Profile, keep_pid: bool) -> Result<(), ProfileError> {
    let frames = p
        .frames()
        .iter()
        .map(|f| {
            let (g, coarse) = host_frame(f);
            b.intern_frame(g).map(|id| (id, coarse))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let labels = p.label_sets().iter().map(|l| b.intern_labels(host_labels(l.clone(), keep_pid))).collect::<Result<Vec<_>, _>>()?;
    add_restacked(b, p, &frames, &labels)
}

/// Adds every sample of `p` to `b` with its frames and labels mapped to `b`'s ids (`frames[i]`:
/// the id of `p`'s frame i and whether it was coarsened to its module — consecutive coarsened
/// frames of one module become one frame), stacks interned once each.
fn add_restacked(b: &mut ProfileBuilder, p: &Profile, frames: &[(FrameId, bool)], labels: &[LabelSetId]) -> Result<(), ProfileError> {
    let mut stacks: HashMap<StackId, StackId> = HashMap::new();
    let mut ids = Vec::new();
    for s in p.samples() {
        let stack = match stacks.get(&s.stack) {
            Some(&id) => id,
            None => {
                ids.clear();
                for f in p.stack(s.stack).unwrap_or(&[]) {
                    let (id, coarse) = frames[f.index()];
                    // Consecutive coarsened frames of one module: one frame.
                    if !(coarse && ids.last() == Some(&id)) {
                        ids.push(id);
                    }
                }
                let id = b.intern_stack(&ids)?;
                stacks.insert(s.stack, id);
                id
            }
        };
        b.add_sample(stack, s.values, labels[s.labels.index()])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clrprobe_profile::{Frame, FrameKind, LabelSet};

    #[test]
    fn folded_frames_lose_their_address_and_unnamed_code_becomes_its_module() {
        let mut named = Frame::new("Cpu::Spin", "app.dll", FrameKind::Jit);
        named.address = 0x7f00_0000_1234;
        let (g, coarse) = super::host_frame(&named);
        assert!(!coarse && g.address == 0 && g.mapping.is_none() && &*g.name == "Cpu::Spin");
        let unnamed = Frame::new("0x7f0000001234", "memfd:doublemapper", FrameKind::Jit).with_attr("unnamed", "1");
        let other = Frame::new("0x7f0000009999", "memfd:doublemapper", FrameKind::Jit).with_attr("unnamed", "1");
        let (a, coarse) = super::host_frame(&unnamed);
        assert!(coarse && &*a.name == "memfd:doublemapper" && !a.is_unnamed());
        assert_eq!(a, super::host_frame(&other).0, "two processes' unnamed addresses: one frame");
    }

    #[test]
    fn code_of_processes_not_followed_is_kept_by_module() {
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

    #[test]
    fn folded_labels_lose_the_thread_and_beyond_the_first_processes_the_pid() {
        let l = LabelSet { thread_name: Some("Worker".into()), process_name: Some("app".into()), ..LabelSet::thread(7, 99) };
        let kept = super::host_labels(l.clone(), true);
        assert_eq!((kept.pid, kept.tid, kept.thread_name.as_deref()), (Some(7), None, Some("Worker")));
        let beyond = super::host_labels(l, false);
        assert_eq!((beyond.pid, beyond.tid, beyond.process_name.as_deref()), (None, None, Some("app")));
    }
}
