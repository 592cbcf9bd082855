//! Native ELF frames through blazesym: one shared `Symbolizer` whose file cache (keyed by path
//! and file metadata) keeps parsed modules across processes. Addresses go in as file offsets,
//! computed from `/proc/PID/maps`, so no perf-map or process logic of blazesym is involved.
use std::path::Path;

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

/// Symbolizes file offsets of ELF modules (executables, shared objects).
pub struct ElfSymbolizer {
    inner: Symbolizer,
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
        let inner = Symbolizer::builder().enable_demangling(true).enable_code_info(false).enable_inlined_fns(false).build();
        ElfSymbolizer { inner }
    }

    /// Names the given file offsets of the ELF file at `path` (None where no symbol covers one).
    pub fn symbolize_offsets(&self, path: &Path, offsets: &[u64]) -> Result<Vec<Option<ElfSymbol>>, Error> {
        let mut src = Elf::new(path);
        src.debug_syms = false;
        let src = Source::Elf(src);
        let out = self
            .inner
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
}
