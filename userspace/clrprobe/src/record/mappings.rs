//! The pprof mapping of a frame's address: the `/proc/PID/maps` line it falls in (start,
//! limit, file offset, path) and the GNU build id of the file mapped, read through
//! `/proc/PID/map_files` (the kernel's link to the very file mapped, so nothing the target
//! controls can put a FIFO or a symlink in the way). Kernel addresses get one
//! `[kernel.kallsyms]` mapping with the running kernel's build id.
use std::{collections::HashMap, sync::Arc};

use clrprobe_profile::Mapping;
use clrprobe_symbolizer::{
    build_id,
    kernel::is_kernel_address,
    maps::{Backing, Maps},
};

#[derive(Default)]
pub(super) struct Mappings {
    /// (pid, start, end, inode) → mapping.
    by_range: HashMap<(u32, u64, u64, u64), Arc<Mapping>>,
    /// (path, inode) → build id ("" when none): a library's id is read once for every process.
    build_ids: HashMap<(String, u64), String>,
    kernel: Option<Arc<Mapping>>,
    /// Replay: build ids by path as recorded (the pid's files are not read).
    pub(super) saved_build_ids: Option<HashMap<String, String>>,
}

/// Where the kernel's text may be: the upper half of the address space.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

impl Mappings {
    /// Forgets the mappings of exited processes (build ids of their files stay).
    pub(super) fn forget(&mut self, pids: &std::collections::HashSet<u32>) {
        self.by_range.retain(|k, _| !pids.contains(&k.0));
    }

    /// The mapping of `addr` in `pid` (None outside every mapping).
    pub(super) fn of(&mut self, pid: u32, addr: u64, maps: &Maps) -> Option<Arc<Mapping>> {
        if is_kernel_address(addr) {
            let m = self.kernel.get_or_insert_with(|| {
                Arc::new(Mapping {
                    start: KERNEL_START,
                    limit: u64::MAX,
                    offset: 0,
                    path: "[kernel.kallsyms]".into(),
                    build_id: build_id::of_kernel().unwrap_or_default().into(),
                })
            });
            return Some(Arc::clone(m));
        }
        let m = maps.find(addr)?;
        let key = (pid, m.start, m.end, m.inode);
        if let Some(found) = self.by_range.get(&key) {
            return Some(Arc::clone(found));
        }
        let (path, build_id) = match &m.backing {
            Backing::File { path, .. } => {
                let id = match &self.saved_build_ids {
                    Some(ids) => ids.get(path).cloned().unwrap_or_default(),
                    None => self
                        .build_ids
                        .entry((path.clone(), m.inode))
                        .or_insert_with(|| {
                            build_id::of_file(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end).as_ref())
                                .unwrap_or_default()
                        })
                        .clone(),
                };
                (path.clone(), id)
            }
            Backing::Memfd { name } => (format!("memfd:{name}"), String::new()),
            Backing::Special(s) => (s.clone(), String::new()),
            Backing::Anon => ("[anon]".to_owned(), String::new()),
        };
        let mapping = Arc::new(Mapping {
            start: m.start,
            limit: m.end,
            offset: m.offset,
            path: path.into(),
            build_id: build_id.into(),
        });
        self.by_range.insert(key, Arc::clone(&mapping));
        Some(mapping)
    }
}
