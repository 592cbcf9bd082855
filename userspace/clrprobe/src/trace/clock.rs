//! A stream's timestamps in nanoseconds, as `TraceInfo::ticks_to_ns` gives them, with the
//! division by the tick rate made once per stream: a clock whose tick is not a whole number of
//! nanoseconds (a 2.4 MHz QPC) costs a 128-bit division per event there, here a multiply.

use clrprobe_eventpipe::nettrace::TraceInfo;

const NS_PER_S: u64 = 1_000_000_000;
/// The largest tick delta whose nanosecond product fits in a `u64`.
const MAX_DELTA: u64 = u64::MAX / NS_PER_S;

#[derive(Debug, Clone, Copy)]
pub(super) struct Clock {
    sync: i64,
    freq: i64,
    rate: Rate,
}

#[derive(Debug, Clone, Copy)]
enum Rate {
    /// A tick is this many whole nanoseconds.
    Whole(i64),
    /// `x / freq` for any `u64` x as `(t + ((x - t) >> 1)) >> shift` with `t` the high half of
    /// `x * magic` (the round-up method of Granlund and Montgomery).
    Magic { magic: u64, shift: u32, divisor: u64 },
}

impl Clock {
    pub(super) fn new(info: &TraceInfo) -> Clock {
        let freq = info.qpc_frequency.max(1);
        let d = freq as u64;
        let rate = if freq <= NS_PER_S as i64 && NS_PER_S.is_multiple_of(d) {
            Rate::Whole((NS_PER_S / d) as i64)
        } else {
            // d >= 2 here (1 divides 10^9): 1 <= shift <= 63.
            let l = 64 - (d - 1).leading_zeros();
            let magic = (((1u128 << 64) * ((1u128 << l) - u128::from(d))) / u128::from(d) + 1) as u64;
            Rate::Magic { magic, shift: l - 1, divisor: d }
        };
        Clock { sync: info.sync_time_qpc, freq, rate }
    }

    /// Nanoseconds from the session start to `ticks`: `TraceInfo::ticks_to_ns`, exactly.
    #[inline(always)]
    pub(super) fn ns(&self, ticks: i64) -> i64 {
        match self.rate {
            Rate::Whole(k) => {
                if let Some(ns) = ticks.checked_sub(self.sync).and_then(|d| d.checked_mul(k)) {
                    return ns;
                }
            }
            Rate::Magic { magic, shift, divisor } => {
                // A delta of zero or more: the 128-bit quotient truncated toward zero is the
                // `u64` one, which fits an `i64` (10^9 / freq < 1 here).
                if let Some(d) = ticks.checked_sub(self.sync)
                    && (0..=MAX_DELTA as i64).contains(&d)
                {
                    let x = d as u64 * NS_PER_S;
                    let t = ((u128::from(x) * u128::from(magic)) >> 64) as u64;
                    let q = (t + ((x - t) >> 1)) >> shift;
                    debug_assert_eq!(q, x / divisor);
                    return q as i64;
                }
            }
        }
        self.wide(ticks)
    }

    #[cold]
    fn wide(&self, ticks: i64) -> i64 {
        let delta = i128::from(ticks) - i128::from(self.sync);
        let ns = delta * i128::from(NS_PER_S) / i128::from(self.freq);
        ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprobe_eventpipe::nettrace::{FormatVersion, SyncTimeUtc};

    fn info(qpc: i64, freq: i64) -> TraceInfo {
        TraceInfo {
            format: FormatVersion::V4,
            trace_object_version: 4,
            sync_time_utc: SyncTimeUtc::default(),
            sync_time_qpc: qpc,
            qpc_frequency: freq,
            pointer_size: 8,
            process_id: None,
            number_of_processors: None,
            expected_cpu_sampling_rate: None,
            key_values: Vec::new(),
        }
    }

    #[test]
    fn nanoseconds_equal_the_readers() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut freqs = vec![
            0, -5, 1, 2, 3, 7, 1_000, 2_435_752, 3_579_545, 10_000_000, 14_318_180, 19_200_000, 24_000_000,
            999_999_999, 1_000_000_000, 1_000_000_001, 2_400_000_000, 3_000_000_007, i64::MAX,
        ];
        freqs.extend((0..40).map(|_| {
            let r = next();
            (r >> (r % 62 + 1)) as i64
        }));
        for f in freqs {
            for qpc in [0, 12_345, -99, i64::MAX / 3, i64::MIN / 2, i64::MAX, i64::MIN] {
                let (i, c) = (info(qpc, f), Clock::new(&info(qpc, f)));
                let mut deltas: Vec<i64> = vec![0, 1, -1, 9_999_999, 123_456_789_012, MAX_DELTA as i64, MAX_DELTA as i64 + 1, i64::MAX, i64::MIN];
                deltas.extend((0..300).map(|_| {
                    let r = next();
                    let d = (r >> (r % 64)) as i64;
                    if r.is_multiple_of(7) { -d } else { d }
                }));
                for d in deltas {
                    let ts = qpc.wrapping_add(d);
                    assert_eq!(c.ns(ts), i.ticks_to_ns(ts), "ts {ts} qpc {qpc} freq {f}");
                }
            }
        }
    }
}
