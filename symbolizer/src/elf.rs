//! Native ELF frames through blazesym: one shared `Symbolizer` whose file cache (keyed by path
//! and file metadata) keeps parsed modules across processes. Addresses go in as file offsets,
//! computed from `/proc/PID/maps`, so no perf-map or process logic of blazesym is involved.
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};

use crate::Error;

/// A named ELF symbol hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfSymbol {
    pub name: String,
    /// Offset of the address from the symbol start.
    pub offset: u64,
}

type Reply = Result<Vec<Option<ElfSymbol>>, Error>;

struct Request {
    path: PathBuf,
    offsets: Vec<u64>,
    reply: mpsc::Sender<Reply>,
}

/// Symbolizes file offsets of ELF modules (executables, shared objects).
///
/// blazesym's `Symbolizer` is neither `Send` nor `Sync`, so it lives on a worker thread of its
/// own; this handle is `Send + Sync` and can be shared by every process symbolizer. The thread
/// ends when the handle is dropped.
pub struct ElfSymbolizer {
    tx: mpsc::Sender<Request>,
}

impl std::fmt::Debug for ElfSymbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ElfSymbolizer")
    }
}

impl Default for ElfSymbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl ElfSymbolizer {
    pub fn new() -> Self {
        let (tx, rx) = mpsc::channel::<Request>();
        let spawned = std::thread::Builder::new().name("clrprobe-elf-sym".into()).spawn(move || {
            let inner = Symbolizer::builder().enable_demangling(true).enable_code_info(false).enable_inlined_fns(false).build();
            for req in rx {
                let _ = req.reply.send(symbolize(&inner, &req.path, &req.offsets));
            }
        });
        if let Err(e) = spawned {
            log::error!("cannot start the ELF symbolizer thread: {e}");
        }
        ElfSymbolizer { tx }
    }

    /// Names the given file offsets of the ELF file at `path` (None where no symbol covers one).
    pub fn symbolize_offsets(&self, path: &Path, offsets: &[u64]) -> Result<Vec<Option<ElfSymbol>>, Error> {
        let gone = || Error::Elf { path: path.to_path_buf(), detail: "the ELF symbolizer thread is gone".into() };
        let (reply, rx) = mpsc::channel();
        self.tx.send(Request { path: path.to_path_buf(), offsets: offsets.to_vec(), reply }).map_err(|_| gone())?;
        rx.recv().map_err(|_| gone())?
    }
}

fn symbolize(inner: &Symbolizer, path: &Path, offsets: &[u64]) -> Reply {
    let mut src = Elf::new(path);
    src.debug_syms = false;
    let src = Source::Elf(src);
    let out = inner
        .symbolize(&src, Input::FileOffset(offsets))
        .map_err(|e| Error::Elf { path: path.to_path_buf(), detail: e.to_string() })?;
    Ok(out
        .into_iter()
        .map(|s| match s {
            Symbolized::Sym(sym) => Some(ElfSymbol { name: sym.name.into_owned(), offset: sym.offset as u64 }),
            Symbolized::Unknown(_) => None,
        })
        .collect())
}
