//! The GC timeline: one record per collection, built from the runtime's GC events in stream
//! order (GCSuspendEEBegin, GCStart, GCPerHeapHistory, GCGlobalHeapHistory, GCEnd,
//! GCHeapStats, GCRestartEEEnd), and the execution-engine pauses (suspend → restart).
//!
//! Matching: history events belong to the innermost collection that has started and not
//! ended (a foreground GC inside a background GC is innermost); GCHeapStats, which the runtime
//! fires after GCEnd, belongs to the collection that ended last. A pause belongs to the first
//! collection that started inside it, else to the collection in progress (a background GC's
//! own short suspensions).
use clr_events::{
    ClrEvent,
    gc::{GcHeapStats, GcStart},
    gc_enums::SuspendReason,
    gc_history::{GcGlobalHeapHistory, GcPerHeapHistory},
};
use serde::{Deserialize, Serialize};

/// One garbage collection.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct GcRecord {
    /// GCStart's Count: the runtime's collection index.
    pub index: u32,
    /// GCStart's Depth: the condemned generation.
    pub generation: u32,
    /// GCStart's reason (`AllocSmall`, `Induced`, `AllocLarge`, ...).
    pub reason: String,
    /// `NonConcurrentGC` (blocking), `BackgroundGC` or `ForegroundGC`.
    pub gc_type: String,
    /// OS thread that fired GCStart (for workstation GC, the allocating thread).
    pub tid: u64,
    /// GCStart / GCEnd time on the source clock (ns).
    pub start_ns: u64,
    pub end_ns: Option<u64>,
    /// Suspend → restart intervals that belong to this collection (ns, source clock).
    pub pauses: Vec<(u64, u64)>,
    /// Sum of `pauses`.
    pub pause_ns: u64,
    /// Thread that suspended the runtime for it (GCSuspendEEBegin's thread).
    pub suspend_tid: Option<u64>,
    /// Sum over heaps of GCPerHeapHistory's generation sizes before / after.
    pub heap_before: Option<u64>,
    pub heap_after: Option<u64>,
    /// GCHeapStats: total heap size after, bytes promoted.
    pub heap_stats_size: Option<u64>,
    pub promoted_bytes: Option<u64>,
    /// Condemned-generation story from GCPerHeapHistory (CondemnReasons0), max over heaps:
    /// the generation first chosen, the final one per heap, the one whose budget was exceeded.
    pub initial_generation: Option<u8>,
    pub final_generation: Option<u8>,
    pub budget_generation: Option<u8>,
    /// CondemnReasons1 conditions (names), union over heaps.
    pub conditions: Vec<String>,
    pub heaps: u32,
    /// GCGlobalHeapHistory.
    pub global_condemned_generation: Option<u32>,
    pub pause_mode: Option<String>,
    pub memory_pressure: Option<u32>,
}

impl GcRecord {
    /// The collection's "why", one line (gcstats-like).
    pub fn why(&self) -> String {
        let mut s = format!("{} gen{}", self.reason, self.generation);
        if let (Some(i), Some(f)) = (self.initial_generation, self.final_generation) {
            s.push_str(&format!("; condemned initially gen{i}, finally gen{f}"));
        }
        if let Some(b) = self.budget_generation {
            s.push_str(&format!("; gen{b} budget exceeded"));
        }
        if !self.conditions.is_empty() {
            s.push_str(&format!("; {}", self.conditions.join(",")));
        }
        s
    }
}

/// Builds the timeline.
#[derive(Debug, Default)]
pub struct GcTimeline {
    pub records: Vec<GcRecord>,
    /// Every suspend → restart interval with the suspending thread: (start, end, tid).
    pub pauses: Vec<(u64, u64, u64)>,
    open: Vec<usize>,
    last_ended: Option<usize>,
    suspend: Option<(u64, u64, usize)>,
}

/// GCGlobalHeapHistory's PauseMode (the runtime's `gc_pause_mode`).
pub fn pause_mode_name(v: u32) -> String {
    match v {
        0 => "Batch".into(),
        1 => "Interactive".into(),
        2 => "LowLatency".into(),
        3 => "SustainedLowLatency".into(),
        4 => "NoGCRegion".into(),
        v => format!("Unknown({v})"),
    }
}

impl GcTimeline {
    pub fn on_event(&mut self, event: &ClrEvent<'_>, tid: u64, time_ns: u64) {
        match event {
            ClrEvent::GcSuspendEeBegin(s) if matches!(s.reason, SuspendReason::ForGc | SuspendReason::ForGcPrep) => {
                self.suspend = Some((time_ns, tid, self.records.len()));
            }
            ClrEvent::GcStart(s) => self.start(s, tid, time_ns),
            ClrEvent::GcPerHeapHistory(h) => {
                if let Some(r) = self.target() {
                    per_heap(r, h);
                }
            }
            ClrEvent::GcGlobalHeapHistory(g) => {
                if let Some(r) = self.target() {
                    global(r, g);
                }
            }
            ClrEvent::GcEnd(e) => {
                let pos = self.open.iter().rposition(|&i| self.records[i].index == e.count).or(self.open.len().checked_sub(1));
                if let Some(p) = pos {
                    let i = self.open.remove(p);
                    self.records[i].end_ns = Some(time_ns);
                    self.last_ended = Some(i);
                }
            }
            ClrEvent::GcHeapStats(h) => {
                if let Some(i) = self.last_ended {
                    heap_stats(&mut self.records[i], h);
                }
            }
            // The thread that suspended the runtime restarts it; restarts of other threads'
            // suspensions (SuspendOther: debugger, tiering, ...) are not GC pauses.
            ClrEvent::GcRestartEeEnd { .. } if self.suspend.is_some_and(|s| s.1 == tid) => {
                if let Some((start, stid, first_new)) = self.suspend.take() {
                    let end = time_ns.max(start);
                    self.pauses.push((start, end, stid));
                    let owner = if first_new < self.records.len() { Some(first_new) } else { self.open.last().copied().or(self.last_ended) };
                    if let Some(i) = owner {
                        let r = &mut self.records[i];
                        r.pauses.push((start, end));
                        r.pause_ns += end - start;
                        r.suspend_tid.get_or_insert(stid);
                    }
                }
            }
            _ => {}
        }
    }

    fn start(&mut self, s: &GcStart, tid: u64, time_ns: u64) {
        self.records.push(GcRecord {
            index: s.count,
            generation: s.depth.unwrap_or(0),
            reason: s.reason.to_string(),
            gc_type: s.gc_type.map(|t| t.to_string()).unwrap_or_else(|| "NonConcurrentGC".into()),
            tid,
            start_ns: time_ns,
            ..GcRecord::default()
        });
        self.open.push(self.records.len() - 1);
    }

    fn target(&mut self) -> Option<&mut GcRecord> {
        let i = self.open.last().copied().or(self.last_ended)?;
        self.records.get_mut(i)
    }

    /// Drops the finished collections and pauses (a long-running reader keeps memory bounded
    /// after reading them): only between collections, keeping the last ended one for the
    /// GCHeapStats that follows its GCEnd. True when something was dropped.
    pub fn forget_finished(&mut self) -> bool {
        if !self.open.is_empty() || self.suspend.is_some() || (self.records.len() <= 1 && self.pauses.is_empty()) {
            return false;
        }
        let last = self.last_ended.and_then(|i| self.records.get(i).cloned());
        self.records.clear();
        self.records.extend(last);
        self.last_ended = (!self.records.is_empty()).then_some(0);
        self.pauses.clear();
        true
    }

    /// The suspension begun and not yet ended, if any: (start, suspending tid). Samples of
    /// that thread after its start may still turn out to be GC work.
    pub fn open_suspension(&self) -> Option<(u64, u64)> {
        self.suspend.map(|(start, tid, _)| (start, tid))
    }

    /// Pause intervals `(start, end, tid)` of `tid` (ns, source clock): the windows in which
    /// that thread did the work of a blocking collection (workstation GC).
    pub fn pauses_of(&self, tid: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.pauses.iter().filter(move |p| p.2 == tid).map(|p| (p.0, p.1))
    }
}

fn per_heap(r: &mut GcRecord, h: &GcPerHeapHistory) {
    r.heaps += 1;
    let before: u64 = h.generations.iter().map(|g| g.size_before).sum();
    let after: u64 = h.generations.iter().map(|g| g.size_after).sum();
    *r.heap_before.get_or_insert(0) += before;
    *r.heap_after.get_or_insert(0) += after;
    let c = h.condemn_reasons;
    let max = |o: &mut Option<u8>, v: u8| *o = Some(o.map_or(v, |x| x.max(v)));
    max(&mut r.initial_generation, c.initial_generation());
    max(&mut r.final_generation, c.final_generation_per_heap());
    max(&mut r.budget_generation, c.alloc_budget_generation());
    for cond in c.conditions() {
        let n = cond.name().to_string();
        if !r.conditions.contains(&n) {
            r.conditions.push(n);
        }
    }
}

fn global(r: &mut GcRecord, g: &GcGlobalHeapHistory) {
    r.global_condemned_generation = Some(g.condemned_generation);
    r.pause_mode = g.pause_mode.map(pause_mode_name);
    r.memory_pressure = g.memory_pressure;
}

fn heap_stats(r: &mut GcRecord, h: &GcHeapStats) {
    r.heap_stats_size = Some(h.total_heap_size());
    r.promoted_bytes = Some(h.total_promoted_size.iter().sum::<u64>() + h.poh_promoted_size.unwrap_or(0));
}

#[cfg(test)]
mod tests {
    use clr_events::{
        gc::{GcEnd, GcSuspendEeBegin},
        gc_enums::{GcReason, GcType},
    };

    use super::*;

    fn start(count: u32, depth: u32, ty: GcType) -> ClrEvent<'static> {
        ClrEvent::GcStart(GcStart {
            count,
            depth: Some(depth),
            reason: GcReason::AllocSmall,
            gc_type: Some(ty),
            clr_instance_id: Some(0),
            client_sequence_number: None,
        })
    }

    fn end(count: u32) -> ClrEvent<'static> {
        ClrEvent::GcEnd(GcEnd { count, depth: 0, clr_instance_id: None })
    }

    fn suspend(reason: SuspendReason) -> ClrEvent<'static> {
        ClrEvent::GcSuspendEeBegin(GcSuspendEeBegin { reason, count: None, clr_instance_id: None })
    }

    const RESTART: ClrEvent<'static> = ClrEvent::GcRestartEeEnd { clr_instance_id: None };

    #[test]
    fn foreground_gc_inside_a_background_gc_and_pauses_by_thread() {
        let mut t = GcTimeline::default();
        // BGC 1 on thread 7: its initial suspension, then concurrent marking.
        t.on_event(&suspend(SuspendReason::ForGc), 7, 100);
        t.on_event(&start(1, 2, GcType::Background), 7, 110);
        t.on_event(&RESTART, 7, 150);
        // A debugger suspension on another thread is no GC pause; its restart is ignored.
        t.on_event(&suspend(SuspendReason::ForDebugger), 9, 200);
        t.on_event(&RESTART, 9, 210);
        // Foreground gen-0 GC 2 triggered by user thread 5 while BGC 1 runs.
        t.on_event(&suspend(SuspendReason::ForGc), 5, 300);
        t.on_event(&start(2, 0, GcType::Foreground), 5, 305);
        t.on_event(&end(2), 5, 340);
        t.on_event(&RESTART, 9, 345);
        t.on_event(&RESTART, 5, 350);
        // BGC 1's final suspension (SuspendForGCPrep), then its end.
        t.on_event(&suspend(SuspendReason::ForGcPrep), 7, 500);
        t.on_event(&RESTART, 7, 520);
        t.on_event(&end(1), 7, 600);
        let [bgc, fgc] = &t.records[..] else { panic!("{:?}", t.records) };
        assert_eq!((bgc.index, bgc.gc_type.as_str(), bgc.end_ns), (1, "BackgroundGC", Some(600)));
        assert_eq!(bgc.pauses, vec![(100, 150), (500, 520)]);
        assert_eq!(bgc.pause_ns, 70);
        assert_eq!((fgc.index, fgc.generation, fgc.tid, fgc.end_ns), (2, 0, 5, Some(340)));
        assert_eq!(fgc.pauses, vec![(300, 350)]);
        assert_eq!(fgc.suspend_tid, Some(5));
        assert_eq!(t.pauses_of(5).collect::<Vec<_>>(), vec![(300, 350)]);
        assert_eq!(t.pauses.len(), 3);
    }

    #[test]
    fn events_without_a_start_are_ignored() {
        let mut t = GcTimeline::default();
        t.on_event(&end(4), 1, 10);
        t.on_event(&RESTART, 1, 20);
        assert!(t.records.is_empty() && t.pauses.is_empty());
    }
}
