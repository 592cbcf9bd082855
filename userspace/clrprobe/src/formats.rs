//! Output formats (shared by every platform's recorder).

/// Output formats of `clrprobe record`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// gzip'd pprof protobuf with every sample type (`PREFIX.pb.gz`).
    Pprof,
    /// Brendan Gregg folded stacks, one file per kind (`PREFIX.KIND.folded`).
    Folded,
    /// Flame graph SVG per kind (`PREFIX.KIND.svg`).
    Svg,
    /// Firefox Profiler JSON per kind (`PREFIX.KIND.firefox.json`).
    Firefox,
    /// speedscope JSON (`PREFIX.speedscope.json`).
    Speedscope,
}

impl Format {
    pub const DEFAULT: &'static [Format] = &[Format::Pprof, Format::Folded, Format::Svg, Format::Firefox];
}

