//! clrprobe's allocator and its settings.
//!
//! EXPERIMENT (round 12): jemalloc as the global allocator; glibc malloc only serves libc's own
//! allocations then.
//!
//! glibc serves an allocation of 128 KiB or more with its own mapping and unmaps it when it is
//! freed, but its first such free raises that threshold to the freed size (up to 32 MiB): after
//! a start-up buffer of a few MB (CoreLib's metadata, a library's unwind tables) was freed,
//! later big buffers came from the brk heap, whose freed pages stay resident. Measured on
//! `record -p PID --cpu -F 99`: the heap's resident set 4.5 → 0.75 MB, the peak 16.8 → 14.6 MB.

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings: two arenas (as glibc's M_ARENA_MAX 2), freed pages handed back with
/// MADV_DONTNEED (no lazy MADV_FREE stage, whose pages stay in RSS), dirty pages kept 1 s.
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: &[u8; 47] = b"narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// Keeps allocations of 128 KiB or more in their own mappings, returned when freed (a fixed
/// threshold: glibc then stops raising it). Call once, before other threads start.
pub fn return_large_frees() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes malloc's parameters; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
}

/// Hands memory freed since back to the OS (every arena's dirty pages).
pub fn release_free() {
    // "arena.<MALLCTL_ARENAS_ALL>.purge"
    let name = b"arena.4096.purge\0";
    // SAFETY: a void mallctl with no old or new value; the name is NUL-terminated.
    unsafe { tikv_jemalloc_sys::mallctl(name.as_ptr().cast(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), 0) };
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The allocator's committed memory in KB: jemalloc's resident estimate is a stats build's;
/// 0 here.
pub fn committed_kb() -> usize {
    0
}
