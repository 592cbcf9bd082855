//! clrprobe's BPF programs. Built for `bpfel-unknown-none` by `cargo xtask build-ebpf`
//! and embedded in the `clrprobe` binary.
#![no_std]
#![no_main]

mod maps;
mod sampler;
mod sched;
mod uprobes;
mod ustack;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
