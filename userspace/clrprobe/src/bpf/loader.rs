//! aya's loader without the kernel's BTF when the object needs none.
//!
//! `aya::EbpfLoader::new()` always reads and parses `/sys/kernel/btf/vmlinux` (5.5 MB here;
//! the parse peaks near 20 MB of heap), and aya 0.14 has no constructor that skips it. The
//! loader uses that BTF only to apply CO-RE relocations; programs that attach through kernel
//! BTF (fentry, lsm, tp_btf) parse it again themselves when they load. clrprobe's object has
//! no CO-RE relocations, so for it the parse is pure cost.
//!
//! When the object has none, the loader is created on a short-lived thread that first moves
//! into a private mount namespace of its own (`unshare(CLONE_FS | CLONE_NEWNS)`, every mount
//! made private so nothing propagates back to the host) and mounts an empty read-only tmpfs
//! over `/sys/kernel/btf`: `Btf::from_sys_fs` then fails and the loader carries no BTF. Only
//! that thread sees the tmpfs; the namespace, and the mount with it, goes away when the thread
//! exits. Nothing on the host changes. Where any step is refused (no CAP_SYS_ADMIN, seccomp),
//! the ordinary loader is used: the same result with the parse's memory peak.
use std::io;

use aya::EbpfLoader;

const BTF_DIR: &std::ffi::CStr = c"/sys/kernel/btf";
const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// How the loader was made (for the debug log and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BtfChoice {
    /// The object has CO-RE relocations: the kernel's BTF was parsed.
    Parsed,
    /// The kernel has no BTF file: nothing to parse.
    Absent,
    /// The object needs no kernel BTF and the parse was skipped.
    Skipped,
    /// Skipping was refused (the reason is logged); the BTF was parsed.
    ParsedAfterRefusal,
}

/// A loader for `object`: without the kernel's BTF when the object has no CO-RE relocations.
pub fn loader_for(object: &[u8]) -> (EbpfLoader<'static>, BtfChoice) {
    if std::fs::symlink_metadata(VMLINUX).is_err() {
        return (EbpfLoader::new(), BtfChoice::Absent);
    }
    if needs_kernel_btf(object) {
        return (EbpfLoader::new(), BtfChoice::Parsed);
    }
    match loader_without_kernel_btf() {
        Ok(loader) => (loader, BtfChoice::Skipped),
        Err(e) => {
            log::debug!("kernel BTF parsed anyway: hiding it from aya's loader failed: {e}");
            (EbpfLoader::new(), BtfChoice::ParsedAfterRefusal)
        }
    }
}

/// True when the object carries CO-RE relocations (or cannot be parsed: aya then reports why).
pub fn needs_kernel_btf(object: &[u8]) -> bool {
    match aya_obj::Object::parse(object) {
        Ok(obj) => obj.has_btf_relocations(),
        Err(_) => true,
    }
}

fn loader_without_kernel_btf() -> io::Result<EbpfLoader<'static>> {
    std::thread::Builder::new()
        .name("bpf-loader".into())
        .spawn(|| {
            hide_kernel_btf()?;
            // Checked, not assumed: the loader is built only where the file is gone.
            match std::fs::symlink_metadata(VMLINUX) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(EbpfLoader::new()),
                Err(e) => Err(e),
                Ok(_) => Err(io::Error::other("vmlinux still visible after the mount")),
            }
        })?
        .join()
        .map_err(|_| io::Error::other("the loader thread panicked"))?
}

/// Moves the calling thread into a private mount namespace where `/sys/kernel/btf` is empty.
fn hide_kernel_btf() -> io::Result<()> {
    let check = |rc: libc::c_int, what: &str| {
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    };
    // SAFETY: plain syscalls on the calling thread's own fs/mount-namespace state; every
    // pointer is a NUL-terminated literal or null where the call allows it.
    unsafe {
        check(
            libc::unshare(libc::CLONE_FS | libc::CLONE_NEWNS),
            "unshare(CLONE_NEWNS)",
        )?;
        // The copy's mounts are still peers of the host's: make them private first, or the
        // tmpfs would propagate back. If this fails, nothing is mounted.
        check(
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ),
            "making the private namespace's mounts private",
        )?;
        check(
            libc::mount(
                c"clrprobe-nobtf".as_ptr(),
                BTF_DIR.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                c"size=4k,mode=0555".as_ptr().cast(),
            ),
            "mounting an empty tmpfs over /sys/kernel/btf",
        )?;
    }
    Ok(())
}

/// Bytes of the stack-copy ring when only CPU samples use it: a sixteenth of a second of
/// samples at `freq` Hz on every online CPU, a power of two between 256 KiB and the object's
/// 16 MiB. The kernel maps the data pages twice, so the ring counts twice in the resident set.
/// A thread empties it as records arrive ([`super::RingReader`]), so it only covers that
/// thread's wake-up latency; the records then wait on the heap ([`copy_queue_records`]). A
/// full ring loses no sample: that sample keeps its frame-pointer stack (counted as
/// `ring_full`), which drops the callers of frameless JIT methods. (Read only by the
/// recording loop, the ring had to hold half a second: 2 MiB, 4.3 MB resident at 99 Hz.)
pub fn cpu_ring_bytes(freq: u64) -> u32 {
    let want = freq.saturating_mul(online_cpus()).saturating_mul(RECORD_BYTES) / 16;
    want.clamp(MIN_RING_BYTES.into(), 16 << 20)
        .next_power_of_two()
        .min(16 << 20) as u32
}

/// Records the ring's reader may hold for the recording loop: half a second of samples at
/// `freq` Hz on every CPU (a drain that symbolizes can hold the loop that long), at least 64;
/// 256 without a sampling rate (off-CPU copies only). Each holds the stack bytes copied (at
/// most 16 KiB), and only while the loop is busy.
pub fn copy_queue_records(freq: Option<u64>) -> usize {
    match freq {
        Some(f) => (f.saturating_mul(online_cpus()) / 2).clamp(64, 1 << 16) as usize,
        None => 256,
    }
}

fn online_cpus() -> u64 {
    aya::util::online_cpus().map_or(1, |c| c.len()).max(1) as u64
}

/// Ring bytes one copy reserves (record and the ring's 8-byte header).
const RECORD_BYTES: u64 = (size_of::<clrprobe_common::UserStack>() + 8) as u64;

/// The smallest stack-copy ring (for loads that copy no stacks).
pub const MIN_RING_BYTES: u32 = 256 << 10;

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded object has no CO-RE relocations: its loader skips the kernel's BTF, the
    /// host keeps seeing vmlinux (the tmpfs lived only in the loader thread's namespace), and
    /// the object still loads.
    #[test]
    fn object_loads_without_kernel_btf_and_the_host_is_untouched() {
        let obj = crate::bpf::embedded_object().expect("clrprobe built with its BPF object");
        assert!(
            !needs_kernel_btf(obj),
            "the object has CO-RE relocations: the BTF parse is needed"
        );
        let (loader, choice) = loader_for(obj);
        drop(loader);
        assert_eq!(choice, BtfChoice::Skipped);
        assert!(
            std::path::Path::new(VMLINUX).exists(),
            "vmlinux hidden on the host"
        );
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        assert!(
            !mounts.contains("clrprobe-nobtf"),
            "the tmpfs leaked into the host namespace"
        );
        crate::bpf::Loaded::load_with_ring(cpu_ring_bytes(99))
            .expect("the object loads without BTF and with a smaller ring");
    }

    /// aya-log's ring is loaded at 16 KiB, not the 128 KiB aya-log-ebpf declares (it is
    /// resident as a whole, twice): read from the fdinfo of this process's ring maps.
    #[test]
    fn log_ring_is_small() {
        let loaded = crate::bpf::Loaded::load_with_ring(cpu_ring_bytes(99)).expect("the object loads");
        let mut rings = Vec::new();
        for e in std::fs::read_dir("/proc/self/fdinfo").unwrap().flatten() {
            let Ok(info) = std::fs::read_to_string(e.path()) else { continue };
            let field = |k: &str| info.lines().find_map(|l| l.strip_prefix(k)).map(|v| v.trim().to_string());
            if field("map_type:").as_deref() == Some("27") {
                rings.push(field("max_entries:").unwrap_or_default());
            }
        }
        assert!(rings.iter().any(|r| r == "16384"), "ring maps: {rings:?}");
        assert!(!rings.iter().any(|r| r == "131072"), "ring maps: {rings:?}");
        drop(loaded);
    }

    #[test]
    fn cpu_ring_is_a_bounded_power_of_two() {
        for freq in [1, 99, 999, 100_000] {
            let n = cpu_ring_bytes(freq);
            assert!(
                n.is_power_of_two() && (256 << 10..=16 << 20).contains(&n),
                "{freq} Hz: {n}"
            );
        }
        assert!(cpu_ring_bytes(99) <= cpu_ring_bytes(999));
    }
}
