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
    fn dotnet_ticks_of_known_dates() {
        let t = SyncTimeUtc::from_fields([1970, 1, 4, 1, 0, 0, 0, 0]);
        assert_eq!(t.dotnet_ticks(), 621_355_968_000_000_000);
        let t = SyncTimeUtc::from_fields([2000, 3, 3, 1, 12, 30, 15, 250]);
        // DateTime(2000,3,1,12,30,15,250).Ticks
        assert_eq!(t.dotnet_ticks(), 630_875_106_152_500_000);
    }
}
