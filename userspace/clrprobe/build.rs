//! Embeds the BPF object: `CLRPROBE_BPF_OBJ` when set (as `cargo xtask build` does), else the
//! object `cargo xtask build-ebpf` leaves in this target directory, if it is there. Without
//! either, the binary still builds on stable and says at run time how to get the object.
//!
//! Release builds for x86_64 Linux (linked by rust-lld, Rust's default there) also hand the
//! linker link-order.txt: the functions `record -p PID --cpu` runs, placed together at the start
//! of the text (`cargo xtask link-order` makes the file). Every fault on the binary's code maps
//! the 64 KiB around it, so scattered over the 7.3 MB of text they kept 5–6 MB of it resident;
//! together (2.4 MB, grouped by phase), 1.3–1.6 MB.
//! Names the linker does not find (changed code, other profiles) are skipped silently.
//! `CLRPROBE_LINK_ORDER=0` links without it, as does a linker chosen in RUSTFLAGS or for the
//! target in cargo's configuration (it may not be lld).
use std::path::{Path, PathBuf};

/// `<target>/bpfel-unknown-none/release/clrprobe-ebpf`, from OUT_DIR
/// (`<target>/<profile>/build/<pkg>-<hash>/out`).
fn default_object() -> Option<(PathBuf, PathBuf)> {
    let out = PathBuf::from(std::env::var_os("OUT_DIR")?);
    let target = out.ancestors().nth(4)?.to_path_buf();
    Some((target.join("bpfel-unknown-none/release/clrprobe-ebpf"), target))
}

fn embed(path: &Path) {
    println!("cargo::rerun-if-changed={}", path.display());
    println!("cargo::rustc-cfg=clrprobe_bpf");
    println!("cargo::rustc-env=CLRPROBE_BPF_OBJ_PATH={}", path.display());
}

/// `--symbol-ordering-file` for the `clrprobe` binary when the build links it with rust-lld.
fn link_order() {
    println!("cargo::rerun-if-env-changed=CLRPROBE_LINK_ORDER");
    println!("cargo::rerun-if-env-changed=CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER");
    println!("cargo::rerun-if-env-changed=RUSTC_LINKER");
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let file = Path::new(&env("CARGO_MANIFEST_DIR")).join("link-order.txt");
    println!("cargo::rerun-if-changed={}", file.display());
    let own_linker = env("CARGO_ENCODED_RUSTFLAGS")
        .split('\x1f')
        .any(|f| f.contains("linker") || f.contains("link-self-contained") || f.contains("fuse-ld"));
    if env("TARGET") != "x86_64-unknown-linux-gnu"
        || env("PROFILE") != "release"
        || env("CLRPROBE_LINK_ORDER") == "0"
        || own_linker
        || std::env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some()
        // Cargo's linker for the target, from the environment or a config file.
        || std::env::var_os("RUSTC_LINKER").is_some()
        || !file.is_file()
    {
        return;
    }
    println!("cargo::rustc-link-arg-bin=clrprobe=-Wl,--symbol-ordering-file={}", file.display());
    println!("cargo::rustc-link-arg-bin=clrprobe=-Wl,--no-warn-symbol-ordering");
}

fn main() {
    link_order();
    println!("cargo::rustc-check-cfg=cfg(clrprobe_bpf)");
    println!("cargo::rerun-if-env-changed=CLRPROBE_BPF_OBJ");
    if let Ok(path) = std::env::var("CLRPROBE_BPF_OBJ") {
        if !Path::new(&path).is_file() {
            panic!("CLRPROBE_BPF_OBJ={path} does not exist: run `cargo xtask build-ebpf` first");
        }
        embed(Path::new(&path));
        return;
    }
    match default_object() {
        Some((obj, _)) if obj.is_file() => embed(&obj),
        // Notice when `cargo xtask build-ebpf` creates it.
        Some((_, target)) => println!("cargo::rerun-if-changed={}", target.display()),
        None => {}
    }
}
