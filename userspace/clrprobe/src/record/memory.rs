//! clrprobe's own memory: with a reader thread per .NET process (`--all`), glibc gives each
//! thread its own malloc arena and keeps what they freed resident. Arenas are capped and freed
//! memory is handed back to the kernel after each drain.

/// Caps malloc arenas (call before threads start).
pub fn cap_arenas() {
    // SAFETY: mallopt only changes allocator parameters.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
}

/// Returns freed heap memory of every arena to the kernel.
pub fn trim() {
    // SAFETY: malloc_trim only releases free memory.
    unsafe { libc::malloc_trim(0) };
}
