//! Turns (pid, address) into frames for .NET processes on Linux.
//!
//! The `/proc` layer ([`ProcessSymbolizer`], [`ImageCache`], [`ElfSymbolizer`]) is Linux-only;
//! the parsers build on every target.
//!
//! ```no_run
//! use std::sync::Arc;
//! use clrprobe_symbolizer::{ImageCache, ProcessSymbolizer};
//!
//! # fn main() -> Result<(), clrprobe_symbolizer::Error> {
//! let cache = Arc::new(ImageCache::new()); // share across processes: CoreLib is parsed once
//! let mut s = ProcessSymbolizer::with_cache(1234, Arc::clone(&cache))?;
//! s.refresh_perf_map()?; // while recording; the table outlives the process
//! for f in s.symbolize(&[0x7f00_1234_5678]) {
//!     println!("{:?} {} {:?} {:?} +{:#x}", f.kind, f.name, f.module, f.tier, f.offset);
//! }
//! # Ok(()) }
//! ```
//!
//! Where each address goes ([`ProcessSymbolizer::symbolize`]):
//! - kernel half of the address space: [`KernelSymbolizer`] (`/proc/kallsyms`);
//! - a file-backed mapping of a ReadyToRun PE image (System.Private.CoreLib.dll, ...):
//!   file offset -> RVA -> RUNTIME_FUNCTION -> method ([`r2r`], named via [`metadata`]);
//! - a file-backed ELF mapping: blazesym on the file offset ([`elf`]);
//! - anonymous or `memfd:doublemapper` memory (the JIT heap): the runtime's perf map
//!   ([`perf_map`]; `DOTNET_PerfMapEnabled=1`), then its jitdump ([`jitdump`]; also written
//!   with `=2`), both re-read on a miss;
//! - code in a PE image the R2R parser cannot place (e.g. composite images, not parsed yet):
//!   the jitdump's `[PreJIT]` records, which the runtime writes as it starts using a method;
//! - anything else: `module+0xoffset` (or the bare address), kind [`FrameKind::Unknown`].
//!
//! The parsers ([`perf_map`], [`maps`], [`pe`], [`metadata`], [`r2r`], [`kernel`],
//! [`jitdump`]) are sans-IO: they take bytes and return typed errors ([`FormatError`]) for
//! bad input. Files of the target are opened through `/proc/PID/root` unless the process shares
//! our mount namespace.
#[cfg(target_os = "linux")]
pub mod cache;
#[cfg(target_os = "linux")]
pub mod elf;
#[cfg(target_os = "linux")]
pub mod name_repair;
pub mod build_id;
pub mod error;
pub mod frame;
pub mod jitdump;
pub mod kernel;
pub mod maps;
pub mod metadata;
pub(crate) mod native_format;
pub mod pe;
pub mod perf_map;
#[cfg(target_os = "linux")]
pub mod process;
pub mod r2r;
mod r2r_names;
mod r2r_sig;
#[cfg(target_os = "linux")]
pub mod target_file;
mod reader;

#[cfg(target_os = "linux")]
pub use cache::{ImageCache, Module};
#[cfg(target_os = "linux")]
pub use elf::{ElfSymbol, ElfSymbolizer};
pub use error::{Error, FormatError};
pub use frame::{Frame, FrameKind};
pub use kernel::KernelSymbolizer;
pub use maps::{Backing, Mapping, Maps};
pub use perf_map::{PerfMap, PerfMapSymbol};
#[cfg(target_os = "linux")]
pub use process::ProcessSymbolizer;
pub use r2r::{R2rImage, R2rMethod, R2rSymbol};
