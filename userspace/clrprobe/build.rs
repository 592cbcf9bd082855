//! Embeds the BPF object when `CLRPROBE_BPF_OBJ` names it (set by `cargo xtask build`).
//! Without it the binary still builds on stable and says at run time how to get the object.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(clrprobe_bpf)");
    println!("cargo::rerun-if-env-changed=CLRPROBE_BPF_OBJ");
    if let Ok(path) = std::env::var("CLRPROBE_BPF_OBJ") {
        if !std::path::Path::new(&path).is_file() {
            panic!("CLRPROBE_BPF_OBJ={path} does not exist: run `cargo xtask build-ebpf` first");
        }
        println!("cargo::rerun-if-changed={path}");
        println!("cargo::rustc-cfg=clrprobe_bpf");
        println!("cargo::rustc-env=CLRPROBE_BPF_OBJ_PATH={path}");
    }
}
