//! Values of command-line flags, in the forms perf and dotnet-trace users type: durations
//! `10`, `2.5`, `10s`, `500ms`, `5m`, `1h`, `hh:mm:ss` / `mm:ss`; sampling rates `1..=100000`
//! Hz. Each bad value is one line naming what was wrong and what is accepted.
use std::time::Duration;

/// Longest duration accepted (a week): larger ones are typos.
const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Highest sampling rate accepted; the kernel caps lower (`kernel.perf_event_max_sample_rate`).
pub const MAX_FREQ: u64 = 100_000;

const DURATION_FORMS: &str = "use seconds (10, 2.5), a unit (500ms, 10s, 5m, 1h) or hh:mm:ss";

/// A positive duration: `10` and `2.5` are seconds; `ms`, `s`, `m`, `h` suffixes; `mm:ss` or
/// `hh:mm:ss` (dotnet-trace's form, seconds may have decimals).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let bad = || format!("invalid duration {s:?}: {DURATION_FORMS}");
    let secs = if t.contains(':') {
        let parts: Vec<&str> = t.split(':').collect();
        if parts.len() > 3 || parts.iter().any(|p| p.is_empty()) {
            return Err(bad());
        }
        let mut total = 0f64;
        for (i, p) in parts.iter().enumerate() {
            let last = i == parts.len() - 1;
            let v: f64 = if last {
                p.parse().map_err(|_| bad())?
            } else {
                p.parse::<u64>().map_err(|_| bad())? as f64
            };
            // Minutes and seconds after the first field stay below 60.
            if i > 0 && v >= 60.0 {
                return Err(format!("invalid duration {s:?}: minutes and seconds after a ':' must be below 60"));
            }
            total = total * 60.0 + v;
        }
        total
    } else {
        let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
            (n, 1e-3)
        } else if let Some(n) = t.strip_suffix('s') {
            (n, 1.0)
        } else if let Some(n) = t.strip_suffix('m') {
            (n, 60.0)
        } else if let Some(n) = t.strip_suffix('h') {
            (n, 3600.0)
        } else {
            (t, 1.0)
        };
        let v: f64 = num.trim().parse().map_err(|_| bad())?;
        v * scale
    };
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("invalid duration {s:?}: it must be more than 0 ({DURATION_FORMS})"));
    }
    let d = Duration::from_secs_f64(secs);
    if d > MAX_DURATION {
        return Err(format!("invalid duration {s:?}: more than a week; for no limit leave -d out and stop with Ctrl-C"));
    }
    Ok(d)
}

/// A sampling rate in Hz, `1..=100000` (`99`, `999`, `1k`).
pub fn parse_freq(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, scale) = match t.strip_suffix(['k', 'K']) {
        Some(n) => (n, 1000),
        None => (t.strip_suffix("Hz").or_else(|| t.strip_suffix("hz")).unwrap_or(t), 1),
    };
    let v: u64 = num.parse().map_err(|_| format!("invalid frequency {s:?}: use a whole number of Hz such as 99 or 999"))?;
    let v = v.saturating_mul(scale);
    if v == 0 || v > MAX_FREQ {
        return Err(format!("invalid frequency {s:?}: it must be 1 to {MAX_FREQ} Hz (99 is the default, 999 for short runs)"));
    }
    Ok(v)
}

/// A process id (not 0).
pub fn parse_pid(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Err("invalid pid 0: name a process (`clrprobe ps` lists .NET ones), or use -a for every process".into()),
        Ok(p) => Ok(p),
        Err(_) => Err(format!("invalid pid {s:?}: use numbers, as in -p 1234 or -p 1234,5678 (-n NAME picks by name)")),
    }
}

/// Processes whose name is `name`: the thread-group name (`comm`), the file name of the
/// program, or the `.dll` a `dotnet` host runs (`app` or `app.dll`), as dotnet-trace's `-n`
/// and `pgrep -x` match. This process is never one of them.
#[cfg(target_os = "linux")]
pub fn pids_named(name: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if name_matches(name, comm.trim_end(), &cmdline) {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

/// Does a process with this `comm` and NUL-separated command line go by `name`?
pub fn name_matches(name: &str, comm: &str, cmdline: &[u8]) -> bool {
    if name.is_empty() {
        return false;
    }
    // comm is cut to 15 bytes by the kernel.
    if comm == name || (comm.len() == 15 && name.len() > 15 && name.starts_with(comm)) {
        return true;
    }
    let args: Vec<&str> = cmdline.split(|b| *b == 0).filter_map(|a| std::str::from_utf8(a).ok()).filter(|a| !a.is_empty()).collect();
    let base = |a: &str| a.rsplit('/').next().unwrap_or(a).to_string();
    if args.first().is_some_and(|a| base(a) == name) {
        return true;
    }
    // `dotnet [host options] app.dll`: the first .dll argument.
    args.iter().skip(1).find(|a| a.ends_with(".dll")).is_some_and(|dll| {
        let b = base(dll);
        b == name || b.strip_suffix(".dll") == Some(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let s = |x: f64| Duration::from_secs_f64(x);
        assert_eq!(parse_duration("10"), Ok(s(10.0)));
        assert_eq!(parse_duration("2.5"), Ok(s(2.5)));
        assert_eq!(parse_duration("10s"), Ok(s(10.0)));
        assert_eq!(parse_duration("500ms"), Ok(s(0.5)));
        assert_eq!(parse_duration("5m"), Ok(s(300.0)));
        assert_eq!(parse_duration("1h"), Ok(s(3600.0)));
        assert_eq!(parse_duration("00:00:10"), Ok(s(10.0)));
        assert_eq!(parse_duration("01:02:03"), Ok(s(3723.0)));
        assert_eq!(parse_duration("1:30"), Ok(s(90.0)));
        for bad in ["0", "-1", "0s", "abc", "10x", "", "1:60", "::", "1:2:3:4", "nan", "inf", "9999h"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(!e.contains('\n') && e.contains("duration"), "{bad}: {e}");
        }
    }

    #[test]
    fn frequencies() {
        assert_eq!(parse_freq("99"), Ok(99));
        assert_eq!(parse_freq("1k"), Ok(1000));
        assert_eq!(parse_freq("999Hz"), Ok(999));
        for bad in ["0", "-5", "100001", "fast", "1.5"] {
            let e = parse_freq(bad).unwrap_err();
            assert!(!e.contains('\n') && e.contains("frequency"), "{bad}: {e}");
        }
    }

    #[test]
    fn names() {
        let cmd = b"/usr/share/dotnet/dotnet\0exec\0/app/MyApp.dll\0--port\0";
        assert!(name_matches("dotnet", "dotnet", cmd));
        assert!(name_matches("MyApp", "dotnet", cmd));
        assert!(name_matches("MyApp.dll", ".NET Main", cmd));
        assert!(!name_matches("App", "dotnet", cmd));
        assert!(name_matches("averyveryverylongname", "averyveryverylo", b""));
        assert!(!name_matches("", "x", b""));
    }
}
