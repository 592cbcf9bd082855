//! JIT code ranges from the runtime's method events, to name code the perf map does not cover
//! (and all JIT code on runtimes without perf-map switching).

/// A method's native code range, from MethodLoadVerbose or the rundown's MethodDC*Verbose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitMethod {
    pub start: u64,
    pub size: u32,
    /// `Namespace.Type::Method`.
    pub name: String,
    /// True when it came from the rundown (present before recording started).
    pub from_rundown: bool,
}
