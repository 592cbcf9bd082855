//! The trace header: the `Trace` object (V4/V5) or Trace block (V6).

/// A UTC wall-clock time as the trace stores it (SYSTEMTIME layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncTimeUtc {
    pub year: i16,
    pub month: i16,
    pub day_of_week: i16,
    pub day: i16,
    pub hour: i16,
    pub minute: i16,
    pub second: i16,
    pub millisecond: i16,
}

impl SyncTimeUtc {
    pub(crate) fn from_fields(f: [i16; 8]) -> Self {
        SyncTimeUtc {
            year: f[0],
            month: f[1],
            day_of_week: f[2],
            day: f[3],
            hour: f[4],
            minute: f[5],
            second: f[6],
            millisecond: f[7],
        }
    }

    /// .NET `DateTime.Ticks` (100 ns units since 0001-01-01T00:00:00) of this time.
    pub fn dotnet_ticks(&self) -> i64 {
        let days = days_from_civil(
            i64::from(self.year),
            i64::from(self.month),
            i64::from(self.day),
        ) + DAYS_0001_TO_1970;
        let secs = days * 86_400
            + i64::from(self.hour) * 3600
            + i64::from(self.minute) * 60
            + i64::from(self.second);
        (secs * 1000 + i64::from(self.millisecond)).saturating_mul(10_000)
    }
}

const DAYS_0001_TO_1970: i64 = 719_162;

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Which NetTrace layout the stream uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatVersion {
    /// FastSerialization objects, `Trace` object version 4 (V5 = V4 plus metadata tags).
    V4,
    /// Block format with the V6 stream header.
    V6 { minor: u32 },
}

/// Trace-wide facts from the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceInfo {
    pub format: FormatVersion,
    /// Version of the `Trace` object (V4/V5 streams; 6 for V6).
    pub trace_object_version: i32,
    pub sync_time_utc: SyncTimeUtc,
    /// Timestamp (QPC ticks) of `sync_time_utc`: the session start.
    pub sync_time_qpc: i64,
    /// QPC ticks per second.
    pub qpc_frequency: i64,
    pub pointer_size: u32,
    pub process_id: Option<u64>,
    pub number_of_processors: Option<u32>,
    pub expected_cpu_sampling_rate: Option<u32>,
    /// V6 key/value pairs (empty for V4/V5).
    pub key_values: Vec<(String, String)>,
}

impl TraceInfo {
    /// Nanoseconds from the session start (`sync_time_qpc`) to a timestamp in QPC ticks.
    #[inline]
    pub fn ticks_to_ns(&self, timestamp: i64) -> i64 {
        // Fast path (per event): a clock whose tick is a whole number of nanoseconds (10 MHz
        // on Windows, 1 GHz on Linux), in i64 — the same value as the i128 division below.
        let freq64 = self.qpc_frequency.max(1);
        if freq64 <= 1_000_000_000 && 1_000_000_000 % freq64 == 0 {
            let scaled = timestamp
                .checked_sub(self.sync_time_qpc)
                .and_then(|d| d.checked_mul(1_000_000_000 / freq64));
            if let Some(ns) = scaled {
                return ns;
            }
        }
        let delta = i128::from(timestamp) - i128::from(self.sync_time_qpc);
        let freq = i128::from(self.qpc_frequency.max(1));
        let ns = delta * 1_000_000_000 / freq;
        ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_to_ns_fast_path_equals_the_wide_division() {
        let wide = |ts: i64, qpc: i64, f: i64| {
            let ns = (i128::from(ts) - i128::from(qpc)) * 1_000_000_000 / i128::from(f.max(1));
            ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
        };
        for f in [1, 3, 10_000_000, 1_000_000_000, 2_400_000_000, 19_200_000] {
            for qpc in [0, 12345, -99, i64::MAX / 3, i64::MIN / 2] {
                for ts in [0, 1, -1, 9_999_999, 123_456_789_012, i64::MAX, i64::MIN, i64::MAX / 7] {
                    let info = TraceInfo {
                        format: FormatVersion::V4,
                        trace_object_version: 4,
                        sync_time_utc: SyncTimeUtc::from_fields([2020, 1, 1, 1, 0, 0, 0, 0]),
                        sync_time_qpc: qpc,
                        qpc_frequency: f,
                        pointer_size: 8,
                        process_id: None,
                        number_of_processors: None,
                        expected_cpu_sampling_rate: None,
                        key_values: Vec::new(),
                    };
                    assert_eq!(info.ticks_to_ns(ts), wide(ts, qpc, f), "{ts} {qpc} {f}");
                }
            }
        }
    }

    #[test]
    fn dotnet_ticks_of_known_dates() {
        let t = SyncTimeUtc::from_fields([1970, 1, 4, 1, 0, 0, 0, 0]);
        assert_eq!(t.dotnet_ticks(), 621_355_968_000_000_000);
        let t = SyncTimeUtc::from_fields([2000, 3, 3, 1, 12, 30, 15, 250]);
        // DateTime(2000,3,1,12,30,15,250).Ticks
        assert_eq!(t.dotnet_ticks(), 630_875_106_152_500_000);
    }
}
