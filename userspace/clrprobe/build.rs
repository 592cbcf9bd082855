//! Embeds the BPF object: `CLRPROBE_BPF_OBJ` when set (as `cargo xtask build` does), else the
//! object `cargo xtask build-ebpf` leaves in this target directory, if it is there. Without
//! either, the binary still builds on stable and says at run time how to get the object.
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

fn main() {
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
