//! The terminal sink (`clrprobe top`): once a second, the leaf frames of the CPU samples of the
//! seconds completed since the last look, and every followed process's event report (the view
//! turns their growth into rates).
use clrprobe_pipeline::{
    EventReport,
    stream::{Aggregator, Namer},
};

/// What the view reads at one refresh.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// Followed processes that have not exited.
    pub pids: Vec<u32>,
    /// CPU samples by leaf frame name, over `seconds`.
    pub cpu_leaves: Vec<(String, u64)>,
    /// Seconds of CPU samples completed since the last look (0: none yet).
    pub seconds: u64,
    /// Where the next look starts (the newest complete second read).
    pub last_start_ns: Option<u64>,
    /// Each followed process's event report so far (cumulative).
    pub reports: Vec<(u32, EventReport)>,
}

/// Reads the window after `after_ns` (the last look's [`Window::last_start_ns`]).
pub fn window(agg: &Aggregator, namer: &mut dyn Namer, after_ns: Option<u64>) -> Window {
    let cpu = agg.complete_cpu(after_ns);
    let mut leaves: std::collections::HashMap<String, u64> = Default::default();
    for (_, kernel, _, _) in &cpu.samples {
        namer.note_kernel(kernel);
    }
    for (pid, kernel, user, n) in &cpu.samples {
        let frames = namer.stack(*pid, kernel, user);
        let leaf = frames.last().map(|f| f.name.to_string()).unwrap_or_else(|| "[unknown]".into());
        *leaves.entry(leaf).or_insert(0) += n;
    }
    let mut cpu_leaves: Vec<(String, u64)> = leaves.into_iter().collect();
    cpu_leaves.sort_unstable();
    Window {
        pids: agg.processes().filter(|p| !p.2).map(|p| p.0.pid).collect(),
        cpu_leaves,
        seconds: cpu.buckets,
        last_start_ns: cpu.last_start_ns,
        reports: agg.event_reports(),
    }
}
