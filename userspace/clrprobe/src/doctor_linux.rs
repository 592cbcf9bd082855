//! Linux checks for `clrprobe doctor`.
use std::{fs, path::Path};

use super::{Check, Status, check};

const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

pub(super) fn checks() -> Vec<Check> {
    let caps = effective_caps();
    let has = |bit: u32| caps.map(|c| c & (1u64 << bit) != 0).unwrap_or(false);
    vec![
        kernel(),
        btf(),
        cap("CAP_BPF", has(CAP_BPF) || has(CAP_SYS_ADMIN), caps, true),
        cap("CAP_PERFMON", has(CAP_PERFMON) || has(CAP_SYS_ADMIN), caps, true),
        cap("CAP_SYS_ADMIN", has(CAP_SYS_ADMIN), caps, false),
        cap("CAP_SYS_PTRACE", has(CAP_SYS_PTRACE), caps, false),
        perf_event_paranoid(has(CAP_PERFMON) || has(CAP_SYS_ADMIN)),
        tracefs(),
        debugfs(),
        uprobe_pmu(),
        bpf_syscall(),
        perf_event_syscall(),
    ]
}

fn effective_caps() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
}

/// Parses "6.18.44-foo" into (6, 18).
pub(crate) fn parse_kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

fn kernel() -> Check {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let release = release.trim();
    match parse_kernel_version(release) {
        // Ring buffers (aya-log) need 5.8, as does CAP_BPF.
        Some(v) if v >= (5, 8) => check("kernel", Status::Ok, release, ""),
        Some(_) => check(
            "kernel",
            Status::Missing,
            format!("{release} is older than 5.8 (no BPF ring buffer, no CAP_BPF)"),
            "upgrade to Linux 5.8 or newer; clrprobe falls back to perf_event sampling meanwhile",
        ),
        None => check("kernel", Status::Warn, format!("unreadable release {release:?}"), "check /proc/sys/kernel/osrelease"),
    }
}

fn btf() -> Check {
    let p = Path::new("/sys/kernel/btf/vmlinux");
    if p.exists() {
        check("BTF", Status::Ok, "/sys/kernel/btf/vmlinux present", "")
    } else {
        check(
            "BTF",
            Status::Warn,
            "/sys/kernel/btf/vmlinux absent (CO-RE relocations unavailable)",
            "use a kernel built with CONFIG_DEBUG_INFO_BTF=y",
        )
    }
}

fn cap(name: &'static str, present: bool, caps: Option<u64>, required: bool) -> Check {
    let detail = match caps {
        None => "could not read CapEff from /proc/self/status".to_string(),
        Some(c) if present => format!("effective (CapEff={c:016x})"),
        Some(c) => format!("not effective (CapEff={c:016x})"),
    };
    let status = match (present, required) {
        (true, _) => Status::Ok,
        (false, true) => Status::Missing,
        (false, false) => Status::Warn,
    };
    let fix = match name {
        "CAP_SYS_PTRACE" => "run as root (sudo) to read other users' /proc/PID/root, perf maps and sockets",
        "CAP_SYS_ADMIN" => "run as root (sudo); needed for system-wide recording on older kernels",
        _ => "run as root (sudo clrprobe …) or grant it: setcap cap_bpf,cap_perfmon+ep $(which clrprobe)",
    };
    check(name, status, detail, fix)
}

fn perf_event_paranoid(has_perfmon: bool) -> Check {
    let raw = fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default();
    let value: Option<i32> = raw.trim().parse().ok();
    match value {
        None => check(
            "perf_event_paranoid",
            Status::Missing,
            "/proc/sys/kernel/perf_event_paranoid missing (kernel without perf events?)",
            "use a kernel with CONFIG_PERF_EVENTS=y",
        ),
        Some(v) if has_perfmon || v <= 1 => check(
            "perf_event_paranoid",
            Status::Ok,
            format!("{v}{}", if has_perfmon { " (CAP_PERFMON overrides it)" } else { "" }),
            "",
        ),
        Some(v) => check(
            "perf_event_paranoid",
            Status::Missing,
            format!("{v} forbids sampling other processes without CAP_PERFMON"),
            "sudo sysctl kernel.perf_event_paranoid=1 (or run clrprobe as root)",
        ),
    }
}

fn mounted(fs_type: &str) -> Option<String> {
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_dev, dir, ty) = (f.next()?, f.next()?, f.next()?);
            (ty == fs_type).then(|| dir.to_string())
        })
        .next()
}

fn tracefs() -> Check {
    match mounted("tracefs") {
        Some(dir) => check("tracefs", Status::Ok, format!("mounted at {dir}"), ""),
        None => check(
            "tracefs",
            Status::Warn,
            "not mounted (tracepoint ids and legacy uprobe attach need it)",
            "mount -t tracefs nodev /sys/kernel/tracing",
        ),
    }
}

fn debugfs() -> Check {
    match mounted("debugfs") {
        Some(dir) => check("debugfs", Status::Ok, format!("mounted at {dir}"), ""),
        None => check(
            "debugfs",
            Status::Warn,
            "not mounted (only old kernels need it; tracefs is enough)",
            "mount -t debugfs nodev /sys/kernel/debug",
        ),
    }
}

fn uprobe_pmu() -> Check {
    let p = Path::new("/sys/bus/event_source/devices/uprobe/type");
    match fs::read_to_string(p) {
        Ok(t) => check("uprobe PMU", Status::Ok, format!("perf type {}", t.trim()), ""),
        Err(_) => check(
            "uprobe PMU",
            Status::Warn,
            "no /sys/bus/event_source/devices/uprobe (uprobes fall back to tracefs)",
            "use a kernel with CONFIG_UPROBE_EVENTS=y (4.17+ has the uprobe PMU)",
        ),
    }
}

/// Creates (and closes) a one-entry BPF array map: the kernel's own answer to "may I use BPF?".
fn bpf_syscall() -> Check {
    #[repr(C)]
    struct MapCreate {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        map_flags: u32,
    }
    const BPF_MAP_CREATE: libc::c_long = 0;
    const BPF_MAP_TYPE_ARRAY: u32 = 2;
    let mut attr = [0u8; 128];
    let create = MapCreate { map_type: BPF_MAP_TYPE_ARRAY, key_size: 4, value_size: 8, max_entries: 1, map_flags: 0 };
    // SAFETY: MapCreate is plain data, smaller than attr.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&create as *const MapCreate).cast::<u8>(),
            attr.as_mut_ptr(),
            std::mem::size_of::<MapCreate>(),
        )
    };
    // SAFETY: bpf(2) with a zeroed, correctly sized attr.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_CREATE, attr.as_ptr(), attr.len() as u32) };
    if fd >= 0 {
        // SAFETY: we own the fd just returned.
        unsafe { libc::close(fd as i32) };
        check("bpf() syscall", Status::Ok, "created a BPF map", "")
    } else {
        let err = std::io::Error::last_os_error();
        check(
            "bpf() syscall",
            Status::Missing,
            format!("BPF_MAP_CREATE failed: {err}"),
            "run as root or with CAP_BPF; check kernel.unprivileged_bpf_disabled and seccomp/LSM policy",
        )
    }
}

/// Opens a cpu-clock sampling event on CPU 0 for all processes, as the sampler does.
fn perf_event_syscall() -> Check {
    const PERF_TYPE_SOFTWARE: u32 = 1;
    const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&PERF_TYPE_SOFTWARE.to_ne_bytes());
    attr[4..8].copy_from_slice(&128u32.to_ne_bytes());
    attr[8..16].copy_from_slice(&PERF_COUNT_SW_CPU_CLOCK.to_ne_bytes());
    attr[16..24].copy_from_slice(&99u64.to_ne_bytes()); // sample_freq
    let flags: u64 = 1 /* disabled */ | (1 << 10) /* freq */;
    attr[40..48].copy_from_slice(&flags.to_ne_bytes());
    // SAFETY: perf_event_open with a zeroed attr of the size we declare.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, attr.as_ptr(), -1i32, 0i32, -1i32, 0u64) };
    if fd >= 0 {
        // SAFETY: we own the fd just returned.
        unsafe { libc::close(fd as i32) };
        check("perf_event_open", Status::Ok, "cpu-clock sampling on all processes allowed", "")
    } else {
        let err = std::io::Error::last_os_error();
        check(
            "perf_event_open",
            Status::Missing,
            format!("system-wide cpu-clock event refused: {err}"),
            "run as root or with CAP_PERFMON, or lower kernel.perf_event_paranoid",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions_parse() {
        assert_eq!(parse_kernel_version("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(parse_kernel_version("5.4.0"), Some((5, 4)));
        assert_eq!(parse_kernel_version("garbage"), None);
    }

    #[test]
    fn probe_matches_the_process_credentials() {
        // Cross-check two independent sources: CapEff bits and what bpf() itself says.
        let r = crate::doctor::Report::probe();
        let cap_bpf = r.get("CAP_BPF").unwrap().status == Status::Ok;
        let syscall = r.get("bpf() syscall").unwrap().status == Status::Ok;
        assert_eq!(cap_bpf, syscall, "{r}");
    }
}
