//! Parsed images shared between processes: keyed by file identity (device, inode, size, mtime),
//! so a second process of the same runtime (even in another mount namespace, reached through a
//! different `/proc/PID/root` path) reuses the parsed CoreLib.
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::elf::ElfSymbolizer;
use crate::{Error, FormatError, R2rImage};

/// Largest PE image parsed (CoreLib is about 12 MB, of which 1.7 MB are read at parse time).
const MAX_IMAGE: u64 = 512 << 20;

/// Identity of a file's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileKey {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_sec: i64,
    pub mtime_nsec: i64,
}

impl FileKey {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        FileKey { dev: meta.dev(), ino: meta.ino(), size: meta.size(), mtime_sec: meta.mtime(), mtime_nsec: meta.mtime_nsec() }
    }
}

/// What a mapped file turned out to be.
#[derive(Debug)]
pub enum Module {
    /// A ReadyToRun PE image, parsed.
    ReadyToRun(Box<R2rImage>),
    /// A PE image without usable R2R code (IL-only, composite component, or corrupt: why).
    Pe(FormatError),
    /// An ELF file (symbolized through blazesym, from the file held open here).
    Elf(ElfFile),
    /// Anything else.
    Other,
}

/// An ELF file held open since it was checked: blazesym reads it through
/// `/proc/self/fd/N` ([`ElfFile::path`]), so what it reads is the file checked and classified,
/// whatever the target has put at the mapped path since (a link, a FIFO that would block).
#[derive(Debug)]
pub struct ElfFile {
    file: std::fs::File,
}

impl ElfFile {
    /// A path to this very file, good while the cache holds it.
    pub fn path(&self) -> std::path::PathBuf {
        use std::os::fd::AsRawFd;
        std::path::PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }
}

/// Opens a mapped file of a target: read-only, without blocking (a FIFO put there), without
/// following a link in its last component (maps name files by their real path, so a link
/// there was put in place after the mapping), not inherited by children.
pub(crate) fn open_mapped(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path)
}

/// Shared caches; hand one `Arc<ImageCache>` to every [`crate::ProcessSymbolizer`].
#[derive(Debug, Default)]
pub struct ImageCache {
    modules: Mutex<HashMap<FileKey, Arc<Module>>>,
    elf: ElfSymbolizer,
    kernel: Mutex<Option<Arc<crate::KernelSymbolizer>>>,
    parses: AtomicUsize,
    repairs: crate::name_repair::Repairs,
}

impl ImageCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Method names the perf map cut short, completed from assemblies' metadata.
    pub fn repairs(&self) -> &crate::name_repair::Repairs {
        &self.repairs
    }

    /// Files held classified (and parsed) now.
    pub fn module_count(&self) -> usize {
        lock(&self.modules).len()
    }

    /// How many files were read and classified/parsed (cache misses).
    pub fn parses(&self) -> usize {
        self.parses.load(Ordering::Relaxed)
    }

    /// Classifies (and for R2R images parses) the file at `path`, or returns the cached result.
    pub fn module(&self, path: &Path) -> Result<Arc<Module>, Error> {
        // Keyed by the file opened (not by a second look at the path, which may have changed).
        let f = open_mapped(path).map_err(|e| Error::io(path, e))?;
        let meta = f.metadata().map_err(|e| Error::io(path, e))?;
        let key = FileKey::of(&meta);
        if let Some(m) = lock(&self.modules).get(&key) {
            return Ok(Arc::clone(m));
        }
        let module = Arc::new(Self::load(f, &meta, path)?);
        self.parses.fetch_add(1, Ordering::Relaxed);
        lock(&self.modules).insert(key, Arc::clone(&module));
        Ok(module)
    }

    fn load(mut f: std::fs::File, meta: &std::fs::Metadata, path: &Path) -> Result<Module, Error> {
        use std::io::Read;
        // A mapped path of the target may have been replaced (by a FIFO, a device): only a
        // regular file is read.
        if !meta.is_file() {
            log::debug!("{}: not a regular file; not read", path.display());
            return Ok(Module::Other);
        }
        let mut magic = [0u8; 4];
        if f.read_exact(&mut magic).is_err() {
            return Ok(Module::Other);
        }
        Ok(match &magic {
            [0x7f, b'E', b'L', b'F'] => Module::Elf(ElfFile { file: f }),
            [b'M', b'Z', ..] if meta.len() > MAX_IMAGE => {
                log::debug!("{}: {} bytes, over the {MAX_IMAGE}-byte image cap; not read", path.display(), meta.len());
                Module::Other
            }
            [b'M', b'Z', ..] => {
                // Only the headers, the metadata and the R2R sections are read (not the code).
                match R2rImage::parse_source(&crate::pe::FileSource::new(&f, meta.len())) {
                    Ok(img) => Module::ReadyToRun(Box::new(img)),
                    Err(e) => {
                        log::debug!("{}: no R2R code: {e}", path.display());
                        Module::Pe(e)
                    }
                }
            }
            _ => Module::Other,
        })
    }

    /// The shared ELF symbolizer.
    pub fn elf(&self) -> &ElfSymbolizer {
        &self.elf
    }

    /// Uses these kernel symbols instead of reading `/proc/kallsyms` (replay of saved inputs).
    pub fn set_kernel(&self, k: crate::KernelSymbolizer) {
        *lock(&self.kernel) = Some(Arc::new(k));
    }

    /// Uses kernel symbols another cache loaded (a short-lived cache beside a long-lived
    /// one: `/proc/kallsyms` is read and parsed once).
    pub fn share_kernel(&self, k: Arc<crate::KernelSymbolizer>) {
        *lock(&self.kernel) = Some(k);
    }

    /// Kernel symbols if they have been loaded (never reads /proc/kallsyms).
    pub fn kernel_if_loaded(&self) -> Option<Arc<crate::KernelSymbolizer>> {
        lock(&self.kernel).clone()
    }

    /// Kernel symbols, loaded once.
    pub fn kernel(&self) -> Result<Arc<crate::KernelSymbolizer>, Error> {
        let mut k = lock(&self.kernel);
        if let Some(k) = &*k {
            return Ok(Arc::clone(k));
        }
        let loaded = Arc::new(if std::env::var_os("CLRPROBE_KERNEL_STARTS").is_some_and(|v| v == "1") { crate::KernelSymbolizer::load()? } else { crate::KernelSymbolizer::load_lazily()? });
        *k = Some(Arc::clone(&loaded));
        Ok(loaded)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    #[test]
    fn cache_is_shareable_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<super::ImageCache>();
    }
}
