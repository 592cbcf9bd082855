//! clrprobe's own memory: with a reader thread per .NET process (`--all`), glibc gives each
//! thread its own malloc arena and keeps what they freed resident. Arenas are capped and freed
//! memory is handed back to the kernel after each drain. [`OwnMemory`]: the resident set at the
//! end of the recording (from /proc/self/status), its peak then, and the peak once the outputs
//! are written.

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
use serde::Serialize;

#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct OwnMemory {
    /// VmRSS when the recording stopped (before the profile was built), in KiB.
    pub recording_rss_kb: u64,
    /// VmHWM (peak resident set) when the recording stopped, in KiB.
    pub recording_peak_kb: u64,
    /// VmHWM after the outputs were written, in KiB (0 until the caller fills it in).
    pub final_peak_kb: u64,
}

/// A `kB` field of /proc/self/status (`VmRSS`, `VmHWM`).
pub fn status_kb(field: &str) -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else { return 0 };
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse().ok())
        .unwrap_or(0)
}

impl OwnMemory {
    pub fn at_recording_end() -> Self {
        Self { recording_rss_kb: status_kb("VmRSS"), recording_peak_kb: status_kb("VmHWM"), final_peak_kb: 0 }
    }

    /// Fills in the peak after the outputs were written.
    pub fn after_outputs(&mut self) {
        self.final_peak_kb = status_kb("VmHWM");
    }
}
