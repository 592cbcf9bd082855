//! Turns (pid, address) into frames for .NET processes.
//!
//! Sans-IO parsers ([`perf_map`], [`maps`], [`pe`], [`metadata`], [`r2r`], [`kernel`]) take
//! bytes; [`ProcessSymbolizer`] reads `/proc/PID/...` and routes each address to the right one.
pub mod error;
pub mod frame;
pub mod perf_map;

pub use error::{Error, FormatError};
pub use frame::{Frame, FrameKind};
pub use perf_map::{PerfMap, PerfMapSymbol};
pub mod maps;
pub use maps::{Backing, Mapping, Maps};
pub mod pe;
mod reader;
pub mod metadata;
pub(crate) mod native_format;
pub mod r2r;
mod r2r_sig;
pub use r2r::{R2rImage, R2rMethod, R2rSymbol};
pub mod elf;
pub mod kernel;
pub use elf::{ElfSymbol, ElfSymbolizer};
pub use kernel::KernelSymbolizer;
pub mod cache;
pub use cache::{ImageCache, Module};
pub mod process;
pub use process::ProcessSymbolizer;
pub mod jitdump;
