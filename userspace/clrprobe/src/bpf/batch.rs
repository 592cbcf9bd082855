//! `BPF_MAP_LOOKUP_AND_DELETE_BATCH` on the sample aggregation maps (aya 0.14 has no batch
//! operations): one call per bucket run of up to [`ENTRIES`] entries instead of a
//! get-next-key, a lookup and a delete per entry.
use std::{
    os::fd::{AsFd, AsRawFd},
    sync::atomic::{AtomicBool, Ordering},
};

use aya::maps::MapData;
use clrprobe_common::{SampleKey, SampleValue};

use super::BpfError;

/// `enum bpf_cmd` (Linux 5.6+).
const BPF_MAP_LOOKUP_AND_DELETE_BATCH: libc::c_int = 25;
/// Entries asked for per call.
pub const ENTRIES: usize = 1024;
/// A bucket holding more than the buffer gets a larger buffer, up to this many entries.
const MAX_ENTRIES: usize = 1 << 16;

/// Set once the kernel refused the command: later drains go entry by entry.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// The `batch` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

pub fn usable() -> bool {
    !REFUSED.load(Ordering::Relaxed)
}

pub fn refuse() {
    REFUSED.store(true, Ordering::Relaxed);
}

thread_local! {
    /// The buffers the kernel writes keys and values into, kept from one drain to the next
    /// (~56 KB each drain: freed and allocated again every second, they were the kind of
    /// mid-size short-lived buffer that fragments a long-running agent's heap).
    static BUFFERS: std::cell::RefCell<(Vec<SampleKey>, Vec<SampleValue>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// Moves every entry of `map` (a BPF hash map of `SampleKey` → `SampleValue`, as checked by the
/// caller) to `out`. On Err, the entries read before the error are in `out` and deleted.
pub fn drain(map: &MapData, name: &'static str, out: &mut Vec<(SampleKey, u64)>) -> Result<(), BpfError> {
    BUFFERS.with_borrow_mut(|(keys, values)| {
        let r = drain_into(map, name, out, keys, values);
        // A bucket too full for the usual buffer (rare) made them larger: not kept so.
        if keys.len() > ENTRIES {
            keys.truncate(ENTRIES);
            keys.shrink_to(ENTRIES);
            values.truncate(ENTRIES);
            values.shrink_to(ENTRIES);
        }
        r
    })
}

fn drain_into(map: &MapData, name: &'static str, out: &mut Vec<(SampleKey, u64)>, keys: &mut Vec<SampleKey>, values: &mut Vec<SampleValue>) -> Result<(), BpfError> {
    let fd = map.fd().as_fd().as_raw_fd();
    let mut n = keys.len().max(ENTRIES);
    keys.resize(n, SampleKey::default());
    values.resize(n, SampleValue::default());
    // A hash map's batch position is a bucket index (u32).
    let mut position: Option<u32> = None;
    let mut next: u32 = 0;
    loop {
        let mut attr = BatchAttr {
            in_batch: position.as_ref().map_or(0, |p| p as *const u32 as u64),
            out_batch: &mut next as *mut u32 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: n as u32,
            map_fd: fd as u32,
            ..Default::default()
        };
        // SAFETY: `attr` is a valid `bpf_attr` prefix (the kernel zero-fills the rest); the
        // kernel writes at most `count` keys and values, into buffers of `n` of each, sized as
        // the map's keys and values (checked by `aya::maps::HashMap::try_from`), and one u32
        // to `out_batch`; it reads one u32 from `in_batch`. All outlive the call.
        let r = unsafe {
            libc::syscall(libc::SYS_bpf, BPF_MAP_LOOKUP_AND_DELETE_BATCH, &mut attr as *mut BatchAttr, size_of::<BatchAttr>() as u32)
        };
        let err = (r < 0).then(std::io::Error::last_os_error);
        // The count written back is read only where the kernel writes it (done, or ENOENT
        // and ENOSPC at the end); another error (EINVAL: no such command) leaves it as sent.
        let errno = err.as_ref().and_then(std::io::Error::raw_os_error);
        let got = match errno {
            None | Some(libc::ENOENT) | Some(libc::ENOSPC) => (attr.count as usize).min(n),
            Some(_) => 0,
        };
        out.extend(keys[..got].iter().zip(&values[..got]).map(|(k, v)| (*k, v.count)));
        match err {
            None if got > 0 => position = Some(next),
            None => {
                return Err(BpfError::Batch { name, source: std::io::Error::other("no entry read and no end reported") });
            }
            // The last buckets were read.
            Some(_) if errno == Some(libc::ENOENT) => return Ok(()),
            // One bucket holds more entries than the buffer: a larger one.
            Some(_) if errno == Some(libc::ENOSPC) && got == 0 && n < MAX_ENTRIES => {
                n = (n * 4).min(MAX_ENTRIES);
                keys.resize(n, SampleKey::default());
                values.resize(n, SampleValue::default());
            }
            Some(source) => return Err(BpfError::Batch { name, source }),
        }
    }
}
