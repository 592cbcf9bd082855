//! Asking for an event block's bytes ahead of the header being decoded. A block read in place
//! ([`InMemory`](super::InMemory)) comes from memory, where a stream's block was just copied
//! into the reader's buffer (and so into the cache): every line of it is asked for. A stream's
//! block gets one line per event, 1 KiB ahead, as before this file (without it,
//! HeartRateMonitor as a stream read in 3.05 ms against 2.86–2.88 with it, medians of 8
//! alternations at load 17–20: from L2 into L1).
//!
//! Each header's place is known only once the previous one is decoded (its payload's size), so
//! the loop over headers waits on one load after the other; asking for the bytes ahead breaks
//! the chain. Every cache line is asked for, not one line per event: one line per event
//! covers a block whose events average 64 bytes or less (objver4's 46), but where they average
//! 258 (HeartRateMonitor's rundown events) it asked for about one line in four, and the
//! headers there waited on memory (in place 5–8 ms against 2.6–2.9 as a stream; 1.7–1.9 now).

/// How far ahead of the header being read the lines asked for start (in place).
const AHEAD: usize = 4096;
/// How far ahead of the header being read its line is asked for (a stream's block).
const STREAM_AHEAD: usize = 1024;
/// Lines asked for per event: 256 bytes, more than most events take (the stretch asked for
/// keeps ahead of the headers, its end within `AHEAD + 2 * SPAN` of them).
const LINES: usize = 4;
const LINE: usize = 64;
const SPAN: usize = LINES * LINE;

/// Where the lines asked for so far end, in a block being decoded.
pub(crate) struct ReadAhead {
    in_place: bool,
    next: usize,
}

impl ReadAhead {
    /// For a block whose headers start at `pos`; `in_place`: it is the input's own bytes.
    #[inline(always)]
    pub(crate) fn new(in_place: bool, pos: usize) -> Self {
        ReadAhead { in_place, next: pos + AHEAD }
    }

    /// Called for the header at `pos` of `body`. In place: the next `SPAN` bytes not asked
    /// for yet, starting no nearer than `AHEAD` and no further than `AHEAD + SPAN` past `pos`
    /// (past a long event the lines between are skipped; short events do not run it further
    /// ahead). A stream's block: the line `STREAM_AHEAD` past `pos`.
    #[inline(always)]
    pub(crate) fn step(&mut self, body: &[u8], pos: usize) {
        if !self.in_place {
            prefetch(body.as_ptr().wrapping_add(pos + STREAM_AHEAD));
            return;
        }
        let from = self.next.clamp(pos + AHEAD, pos + AHEAD + SPAN);
        for k in 0..LINES {
            prefetch(body.as_ptr().wrapping_add(from + k * LINE));
        }
        self.next = from + SPAN;
    }
}

/// Asks for the cache line at `p` (which need not be valid: a prefetch does not fault, so the
/// lines past the block's end, the next block's in place, are asked for too).
#[inline(always)]
fn prefetch(p: *const u8) {
    // SAFETY: SSE is in every x86_64 target; a prefetch reads nothing and does not fault.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
