//! `clrprobe report --replay DIR`: the profiles of a recording rebuilt from what `record
//! --save-raw DIR` kept, without root and without the processes. The saved records and each
//! process's EventPipe stream drive the pipeline's aggregator
//! ([`clrprobe_pipeline::stream::Replay`]); frames are named by the recorder's own resolver
//! over symbolizers of the saved inputs: the maps and perf-map snapshots, the runtime's
//! method events, the kernel symbols saved, and native or ReadyToRun code from the files on
//! disk when they are the files recorded (same build id; same size and mtime for files
//! without one), else `module+offset`. The same directory gives the same bytes.
use std::{
    collections::{BTreeMap, HashSet},
    path::{Path, PathBuf},
    sync::Arc,
};

use clrprobe_pipeline::stream::{
    Aggregator, Namer, Replay, ReplayError, ReplayStats,
    raw::{FileIdentity, RawItem},
};
use clrprobe_profile::{Frame, Profile};
use clrprobe_symbolizer::{KernelSymbolizer, ProcessSymbolizer};

use crate::{
    formats::Format,
    output::Written,
    record::{FrameResolver, JitMethod},
};

/// The profiles rebuilt, by the file kind names `record` writes (`cpu`, `alloc`,
/// `contention`, `offcpu`, `exceptions`); kinds without samples are left out.
pub struct Replayed {
    pub profiles: Vec<(&'static str, Profile)>,
    pub stats: ReplayStats,
    /// Each process's event report (exceptions, contention, allocations, GCs), for
    /// `PREFIX.events.json` as `record` writes it.
    pub events: clrprobe_profile::events::Events,
    /// Mapped files named as `module+offset` because the file on disk is not the one recorded.
    pub changed_files: Vec<String>,
}


#[derive(Default)]
struct Saved {
    maps: BTreeMap<u32, Vec<String>>,
    perf_maps: BTreeMap<u32, Vec<(u64, Vec<u8>)>>,
    files: Vec<FileIdentity>,
    kernel: String,
}

/// Is the file at `f.path` the one recorded?
fn same_file(f: &FileIdentity) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(&f.path) else { return false };
    if !meta.is_file() {
        return false;
    }
    if !f.build_id.is_empty() {
        return clrprobe_symbolizer::build_id::of_file(Path::new(&f.path)).as_deref() == Some(f.build_id.as_str());
    }
    meta.size() == f.size && meta.mtime() * 1_000_000_000 + meta.mtime_nsec() == f.mtime_ns
}

/// Names frames for the aggregator's profiles from the saved inputs.
struct SavedNames<'r> {
    resolver: &'r mut FrameResolver,
    usable: &'r HashSet<String>,
}

impl Namer for SavedNames<'_> {
    fn stack(&mut self, pid: u32, kernel: &[u64], user: &[u64]) -> Vec<Frame> {
        if self.resolver.symbolizer_mut(pid).is_none() {
            // A process sampled but not followed (host-wide recordings): kernel names only.
            let cache = Arc::clone(self.resolver.image_cache());
            self.resolver.add_symbolizer(ProcessSymbolizer::offline(pid, cache, self.usable.clone()));
        }
        self.resolver.stack(pid, kernel, user)
    }

    fn process_name(&mut self, pid: u32) -> String {
        // Not from /proc: the pid may be another process by now.
        pid.to_string()
    }
}

/// Rebuilds the profiles of the recording saved in `dir`.
pub fn profiles(dir: &Path) -> Result<Replayed, ReplayError> {
    let replay = Replay::open(dir)?;
    let mut agg = Aggregator::new(replay.aggregator_config());
    let meta = replay.meta().clone();
    let mut saved = Saved::default();
    let stats = replay.run(&mut agg, &mut |item| match item {
        RawItem::Maps { pid, text, .. } => saved.maps.entry(*pid).or_default().push(text.clone()),
        RawItem::PerfMap { pid, offset, bytes } => saved.perf_maps.entry(*pid).or_default().push((*offset, bytes.clone())),
        RawItem::File(f) => saved.files.push(f.clone()),
        RawItem::KernelSymbols(text) => saved.kernel.push_str(text),
        _ => {}
    })?;
    let _ = agg.take_new_stacks();

    let mut resolver = FrameResolver::new();
    let cache = Arc::clone(resolver.image_cache());
    cache.set_kernel(KernelSymbolizer::parse(&saved.kernel));
    let mut usable = HashSet::new();
    let mut changed_files = Vec::new();
    for f in &saved.files {
        if same_file(f) {
            usable.insert(f.path.clone());
        } else {
            changed_files.push(f.path.clone());
        }
    }
    resolver.use_saved_build_ids(saved.files.iter().map(|f| (f.path.clone(), f.build_id.clone())).collect());
    let pids: HashSet<u32> = saved.maps.keys().chain(saved.perf_maps.keys()).copied().collect();
    let mut pids: Vec<u32> = pids.into_iter().collect();
    pids.sort_unstable();
    for pid in pids {
        let mut sym = ProcessSymbolizer::offline(pid, Arc::clone(&cache), usable.clone());
        for text in saved.maps.get(&pid).into_iter().flatten() {
            // A snapshot that does not parse was not usable live either.
            let _ = sym.feed_maps(text);
        }
        let mut next = 0;
        for (offset, bytes) in saved.perf_maps.get(&pid).into_iter().flatten() {
            // Chunks follow each other; a perf map that started over (pid reuse) starts afresh.
            if *offset == next {
                sym.feed_perf_map(bytes);
                next = offset + bytes.len() as u64;
            }
        }
        sym.finish_perf_map();
        resolver.add_symbolizer(sym);
    }
    let mut by_pid: BTreeMap<u32, Vec<JitMethod>> = BTreeMap::new();
    for (pid, start, size, name) in agg.take_jit_methods() {
        by_pid.entry(pid).or_default().push(JitMethod { start, size, name, from_rundown: false });
    }
    for (pid, methods) in by_pid {
        resolver.add_jit_methods(pid, &methods);
    }

    let events = crate::pipeline::sinks::files::events(&agg, meta.start_unix_ns, agg.now_ns().saturating_sub(meta.start_mono_ns), false);
    let mut names = SavedNames { resolver: &mut resolver, usable: &usable };
    let profiles = crate::pipeline::sinks::files::profiles(&agg, &mut names).map_err(|e| ReplayError::File { path: dir.to_path_buf(), reason: e.to_string() })?;
    Ok(Replayed { profiles, stats, events, changed_files })
}

/// Writes each profile in each format as `PREFIX.KIND.*` (through the safe writer).
pub fn write(replayed: &Replayed, prefix: &Path, formats: &[Format]) -> Vec<Written> {
    crate::pipeline::sinks::files::write(&replayed.profiles, &replayed.events, prefix, formats)
}

/// The default output prefix: `DIR.replay` next to the directory.
pub fn default_prefix(dir: &Path) -> PathBuf {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "clrprobe".into());
    dir.with_file_name(format!("{name}.replay"))
}

/// A line per process and kind for the user.
pub fn summary(r: &Replayed) -> String {
    let mut s = format!(
        "replayed {} items, {} records, {} runtime events{}\n",
        r.stats.items,
        r.stats.records,
        r.stats.events,
        if r.stats.complete { "" } else { " (the recording did not end cleanly: replayed what was saved)" }
    );
    for (kind, p) in &r.profiles {
        s.push_str(&format!("  {kind}: {} stacks, {} in all\n", p.samples().count(), p.total(0)));
    }
    for w in &r.stats.warnings {
        s.push_str(&format!("  warning: {w}\n"));
    }
    if !r.changed_files.is_empty() {
        s.push_str(&format!(
            "  {} mapped files changed or gone since the recording (named module+offset): {}\n",
            r.changed_files.len(),
            r.changed_files.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    s
}
