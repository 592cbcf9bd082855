//! One profile per process, cut out of the whole-host profile by the `pid` label: same sample
//! types, period and clock; frames and stacks re-interned; markers and reports of that pid.
use std::collections::BTreeMap;

use clrprobe_profile::{Profile, ProfileBuilder, ProfileError, remap::Remap};

use crate::report::REPORT_COMMENT;

/// The samples of each pid (samples without a pid label are only in the whole profile); only
/// of the pids in `only` when given.
pub fn split_by_process(profile: &Profile, only: Option<&std::collections::HashSet<u32>>) -> Result<BTreeMap<u32, Profile>, ProfileError> {
    // Each frame, stack and label set is interned once per process, not once per sample.
    let mut out: BTreeMap<u32, (ProfileBuilder, Remap)> = BTreeMap::new();
    for s in profile.samples() {
        let Some(labels) = profile.labels(s.labels) else { continue };
        let Some(pid) = labels.pid else { continue };
        if only.is_some_and(|o| !o.contains(&pid)) {
            continue;
        }
        let (b, remap) = out.entry(pid).or_insert_with(|| {
            let mut b = ProfileBuilder::new(profile.sample_types().to_vec());
            if let Some(p) = profile.period() {
                b.set_period(p.clone());
            }
            b.set_start_time_ns(profile.start_time_ns());
            b.set_duration_ns(profile.duration_ns());
            for m in profile.markers().iter().filter(|m| m.pid == Some(pid)) {
                b.add_marker(m.clone());
            }
            let prefix = format!("{REPORT_COMMENT}{pid} ");
            for c in profile.comments().iter().filter(|c| c.starts_with(&prefix)) {
                b.add_comment(c.clone());
            }
            (b, Remap::new())
        });
        let stack = remap.stack(b, profile, s.stack)?;
        let l = remap.labels(b, profile, s.labels)?;
        match s.timestamp_ns {
            Some(t) => b.add_timed_sample(stack, s.values, l, t)?,
            None => b.add_sample(stack, s.values, l)?,
        }
    }
    Ok(out.into_iter().map(|(pid, (b, _))| (pid, b.build())).collect())
}

/// Writes `PREFIX.PID.*.pb.gz` for each of `pids` (the processes recorded: the .NET ones of a
/// host-wide recording; every other process is in the host profile under its `pid` label),
/// pprof only, on a few threads (encoding, compressing and syncing dozens of files one by one
/// was most of the time `--all` took to stop).
pub fn write_per_process(profile: &Profile, prefix: &std::path::Path, pids: &[u32]) -> Vec<crate::output::Written> {
    let t0 = std::time::Instant::now();
    let only: std::collections::HashSet<u32> = pids.iter().copied().collect();
    let per: Vec<(u32, Profile)> = match split_by_process(profile, Some(&only)) {
        Ok(per) => per.into_iter().collect(),
        Err(e) => return vec![crate::output::Written { path: prefix.to_path_buf(), result: Err(e) }],
    };
    log::info!("per-process: {} profiles split in {:?}", per.len(), t0.elapsed());
    // Each file is flushed to disk before its rename (fsync: 10-25 ms each on this VM, waiting
    // on the disk, not the CPU): 20 processes' files written two at a time took 1.5 s of a
    // 2 s stop; eight writers share the journal's commits.
    let threads = 8.min(per.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<crate::output::Written> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut written = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((pid, p)) = per.get(i) else { break };
                        let prefix = std::path::PathBuf::from(format!("{}.{pid}", prefix.display()));
                        written.extend(crate::output::write_all(p, &prefix, &[crate::formats::Format::Pprof]));
                    }
                    written
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap_or_default()).collect()
    });
    out.sort_by(|a, b| a.path.cmp(&b.path));
    log::info!("per-process: {} files written after {:?}", out.len(), t0.elapsed());
    out
}
