//! Upscaling allocation samples to estimated bytes and object counts.
//!
//! * AllocationTick (GC keyword, verbose): the runtime fires one event each time a thread's
//!   allocations cross ~100 KB on a heap; `AllocationAmount64` is the bytes allocated since the
//!   previous tick on that heap. clrprobe attributes the whole amount to the type and stack of
//!   the object that crossed the threshold (the sampled object). Objects: amount / object size
//!   when the event carries the size (V4, .NET 5+), else one object per tick.
//! * AllocationSampled (.NET 10): each allocated byte is sampled with probability 1/100 KiB
//!   (Poisson process), so an object of size `s` is sampled with `p = 1 - exp(-s / 102400)`;
//!   each event stands for `1/p` objects and `s/p` bytes.

/// Mean distance between sampled bytes for AllocationSampled.
pub const SAMPLING_MEAN_BYTES: f64 = 102_400.0;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllocEstimate {
    pub bytes: f64,
    pub objects: f64,
}

/// Estimate for one AllocationTick.
pub fn estimate_tick(amount: u64, object_size: Option<u64>) -> AllocEstimate {
    let objects = match object_size {
        Some(s) if s > 0 => (amount as f64 / s as f64).max(1.0),
        _ => 1.0,
    };
    AllocEstimate { bytes: amount as f64, objects }
}

/// Estimate for one AllocationSampled event.
pub fn estimate_sampled(object_size: u64) -> AllocEstimate {
    let s = object_size.max(1) as f64;
    let p = 1.0 - (-s / SAMPLING_MEAN_BYTES).exp();
    AllocEstimate { bytes: s / p, objects: 1.0 / p }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_amount_is_the_bytes_and_size_gives_counts() {
        assert_eq!(estimate_tick(100_000, Some(48)).objects.round(), 2083.0);
        assert_eq!(estimate_tick(100_000, None), AllocEstimate { bytes: 100_000.0, objects: 1.0 });
    }

    #[test]
    fn sampled_upscaling_is_unbiased_for_small_and_large_objects() {
        // Small objects: p ≈ s/mean, so bytes ≈ mean per sample.
        let e = estimate_sampled(24);
        assert!((e.bytes - SAMPLING_MEAN_BYTES).abs() / SAMPLING_MEAN_BYTES < 0.001);
        // Huge objects are always sampled: one object, its own size.
        let e = estimate_sampled(100_000_000);
        assert!((e.objects - 1.0).abs() < 1e-9 && (e.bytes - 1e8).abs() < 1.0);
    }
}
