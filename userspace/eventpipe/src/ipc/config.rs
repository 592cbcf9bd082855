//! Typed tracing-session configuration.

/// The runtime provider.
pub const RUNTIME_PROVIDER: &str = "Microsoft-Windows-DotNETRuntime";
/// The runtime rundown provider.
pub const RUNDOWN_PROVIDER: &str = "Microsoft-Windows-DotNETRuntimeRundown";
/// The CPU sampling provider.
pub const SAMPLE_PROFILER_PROVIDER: &str = "Microsoft-DotNETCore-SampleProfiler";
/// The rundown keyword the runtime uses when rundown is requested (CollectTracing4+).
pub const DEFAULT_RUNDOWN_KEYWORD: u64 = 0x8002_0139;

/// Event level (EventPipe/ETW numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    LogAlways = 0,
    Critical = 1,
    Error = 2,
    Warning = 3,
    Informational = 4,
    Verbose = 5,
}

impl Level {
    pub fn from_u32(v: u32) -> Option<Level> {
        Some(match v {
            0 => Level::LogAlways,
            1 => Level::Critical,
            2 => Level::Error,
            3 => Level::Warning,
            4 => Level::Informational,
            5 => Level::Verbose,
            _ => return None,
        })
    }

    /// Accepts a number 0–5 or a name (logalways, critical, error, warning, informational/info, verbose).
    pub fn parse(s: &str) -> Option<Level> {
        if let Ok(n) = s.parse::<u32>() {
            return Level::from_u32(n);
        }
        Some(match s.to_ascii_lowercase().as_str() {
            "logalways" | "always" => Level::LogAlways,
            "critical" => Level::Critical,
            "error" => Level::Error,
            "warning" | "warn" => Level::Warning,
            "informational" | "info" => Level::Informational,
            "verbose" => Level::Verbose,
            _ => return None,
        })
    }
}

/// One provider to enable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    pub name: String,
    pub keywords: u64,
    pub level: Level,
    /// Filter arguments, sent as `key=value;key=value`.
    pub arguments: Vec<(String, String)>,
}

impl ProviderConfig {
    pub fn new(name: &str, keywords: u64, level: Level) -> Self {
        Self { name: name.to_string(), keywords, level, arguments: Vec::new() }
    }

    /// The arguments in wire form (`key=value;…`), empty when there are none.
    pub fn arguments_string(&self) -> String {
        self.arguments.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(";")
    }
}

/// A tracing session request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfig {
    /// Size of the runtime's session buffer.
    pub circular_buffer_mb: u32,
    /// Emit rundown (method/module maps) when the session stops.
    pub request_rundown: bool,
    /// Collect managed stacks with events. Turning it off needs CollectTracing3 (.NET 9+; 8.0.4 lacks it).
    pub request_stackwalk: bool,
    pub providers: Vec<ProviderConfig>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self { circular_buffer_mb: 256, request_rundown: true, request_stackwalk: true, providers: Vec::new() }
    }
}

impl SessionConfig {
    pub fn with_providers(providers: Vec<ProviderConfig>) -> Self {
        Self { providers, ..Self::default() }
    }

    /// The rundown keyword CollectTracing4+ sends for `request_rundown`.
    pub fn rundown_keyword(&self) -> u64 {
        if self.request_rundown { DEFAULT_RUNDOWN_KEYWORD } else { 0 }
    }
}

/// Named keyword sets of the runtime provider (Microsoft-Windows-DotNETRuntime), from the
/// ClrEtwAll manifest (see /work/shared/specs/clr-events.md).
pub const RUNTIME_KEYWORDS: &[(&str, u64)] = &[
    ("gc", 0x1),
    ("gchandle", 0x2),
    ("assemblyloader", 0x4),
    ("loader", 0x8),
    ("jit", 0x10),
    ("ngen", 0x20),
    ("startenumeration", 0x40),
    ("endenumeration", 0x80),
    ("security", 0x400),
    ("appdomainresourcemanagement", 0x800),
    ("jittracing", 0x1000),
    ("interop", 0x2000),
    ("contention", 0x4000),
    ("exception", 0x8000),
    ("threading", 0x10000),
    ("jittedmethodiltonativemap", 0x20000),
    ("overrideandsuppressngenevents", 0x40000),
    ("type", 0x80000),
    ("gcheapdump", 0x100000),
    ("gcsampledobjectallocationhigh", 0x200000),
    ("gcheapsurvivalandmovement", 0x400000),
    ("gcheapcollect", 0x800000),
    ("gcheapandtypenames", 0x1000000),
    ("gcsampledobjectallocationlow", 0x2000000),
    ("perftrack", 0x2000_0000),
    ("stack", 0x4000_0000),
    ("threadtransfer", 0x8000_0000),
    ("debugger", 0x1_0000_0000),
    ("monitoring", 0x2_0000_0000),
    ("codesymbols", 0x4_0000_0000),
    ("eventsource", 0x8_0000_0000),
    ("compilation", 0x10_0000_0000),
    ("compilationdiagnostic", 0x20_0000_0000),
    ("methoddiagnostic", 0x40_0000_0000),
    ("typediagnostic", 0x80_0000_0000),
    ("jitinstrumentationdata", 0x100_0000_0000),
    ("profiler", 0x200_0000_0000),
    ("waithandle", 0x400_0000_0000),
    ("allocationsampling", 0x800_0000_0000),
];

/// The mask of a named runtime keyword set (case-insensitive).
pub fn runtime_keyword(name: &str) -> Option<u64> {
    let lower = name.to_ascii_lowercase();
    RUNTIME_KEYWORDS.iter().find(|(n, _)| *n == lower).map(|&(_, m)| m)
}
