//! The shared NetTrace recordings (`../shared/testdata/nettrace` beside the checkout, or
//! `$CLRPROBE_SHARED/testdata/nettrace`): read in place, never copied into the repository.
use std::{
    io::Read,
    path::{Path, PathBuf},
};

/// The corpus directory; panics (fails the test or bench) when it is absent.
pub fn dir() -> PathBuf {
    let shared = std::env::var_os("CLRPROBE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    let dir = shared.join("testdata/nettrace");
    assert!(dir.is_dir(), "NetTrace corpus missing: expected {} (the shared/ directory beside the checkout)", dir.display());
    dir
}

/// The path of one recording; panics when it is not a file.
pub fn path(name: &str) -> PathBuf {
    let p = dir().join(name);
    assert!(p.is_file(), "{} missing (the shared/ directory beside the checkout)", p.display());
    p
}

/// The bytes of one recording; a `.zip` is unpacked (its `.nettrace` entry).
pub fn read(name: &str) -> Vec<u8> {
    let p = path(name);
    let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
    if !name.ends_with(".zip") {
        return bytes;
    }
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        if entry.name().ends_with(".nettrace") {
            let mut out = Vec::new();
            entry.read_to_end(&mut out).unwrap_or_else(|e| panic!("unzipping {}: {e}", p.display()));
            return out;
        }
    }
    panic!("{} holds no .nettrace entry", p.display())
}
