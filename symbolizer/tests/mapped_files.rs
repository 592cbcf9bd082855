//! A target's mapped ELF file is read from the file the cache opened and checked: a FIFO put
//! at its path afterwards (which would block a reader opening the path) changes nothing.
use std::time::Duration;

use clrprobe_symbolizer::{ImageCache, Module};

#[test]
fn an_elf_file_replaced_by_a_fifo_is_still_symbolized_from_the_file_checked() {
    let dir = clrprobe_tests::scratch_dir("mapped");
    let lib = dir.join("libc-copy.so.6");
    std::fs::copy("/usr/lib/x86_64-linux-gnu/libc.so.6", &lib).unwrap();
    let cache = std::sync::Arc::new(ImageCache::new());
    let module = cache.module(&lib).unwrap();
    let Module::Elf(file) = &*module else { panic!("libc classified as {module:?}") };
    let held = file.path();
    let offsets: Vec<u64> = (0x30000..0x120000).step_by(0x1000).collect();
    let before = cache.elf().symbolize_offsets(&held, &offsets).unwrap();
    let named = before.iter().flatten().count();
    assert!(named > 20, "only {named} of {} offsets named", offsets.len());
    // The path now holds a FIFO: opening it for reading would block until a writer comes.
    std::fs::remove_file(&lib).unwrap();
    let c = std::ffi::CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let (c2, held2, offs) = (cache.clone(), held.clone(), offsets.clone());
    std::thread::spawn(move || {
        // A fresh symbolizer state is not needed: the held file's path is what is read.
        let _ = tx.send(c2.elf().symbolize_offsets(&held2, &offs).map_err(|e| e.to_string()));
    });
    let after = rx.recv_timeout(Duration::from_secs(20)).expect("symbolizing blocked on the FIFO").unwrap();
    assert_eq!(before, after);
    // A second lookup of the path refuses the FIFO without blocking.
    let again = cache.module(&lib).unwrap();
    assert!(matches!(&*again, Module::Other), "{again:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
