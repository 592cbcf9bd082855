//! Parsing provider specs.
//!
//! Grammar: providers separated by `,`. Each is either
//! - runtime keyword sets: `set[+set…][:level]`, e.g. `gc+exception+contention:verbose`
//!   (names from [`RUNTIME_KEYWORDS`](super::config::RUNTIME_KEYWORDS); enables
//!   Microsoft-Windows-DotNETRuntime with the OR of their masks), or
//! - a provider by name: `Name[:keywords[:level[:key=value;key=value]]]`, e.g.
//!   `System.Net.Http`, `Allocations-Run:0x1:5:key=value`. Keywords are hex (`0x…`) or decimal;
//!   an empty or absent field takes the default (all keywords, Verbose).
//!
//! Entries naming the same provider are merged (keywords OR'ed, the more verbose level, arguments
//! concatenated).
use super::config::{Level, ProviderConfig, RUNTIME_PROVIDER, runtime_keyword};

/// Why a provider spec was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("empty provider entry in {0:?}")]
    EmptyEntry(String),
    #[error("unknown runtime keyword set {name:?} in {entry:?}")]
    UnknownKeywordSet { name: String, entry: String },
    #[error("bad keywords {value:?} in {entry:?} (expected 0x-hex or decimal u64)")]
    BadKeywords { value: String, entry: String },
    #[error("bad level {value:?} in {entry:?} (expected 0-5 or logalways/critical/error/warning/informational/verbose)")]
    BadLevel { value: String, entry: String },
    #[error("bad argument {value:?} in {entry:?} (expected key=value)")]
    BadArgument { value: String, entry: String },
    #[error("too many ':' fields in {0:?} (name:keywords:level:args)")]
    TooManyFields(String),
}

fn parse_keywords(v: &str, entry: &str) -> Result<u64, ConfigError> {
    let bad = || ConfigError::BadKeywords { value: v.to_string(), entry: entry.to_string() };
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).map_err(|_| bad()),
        None => v.parse().map_err(|_| bad()),
    }
}

fn parse_level(v: &str, entry: &str) -> Result<Level, ConfigError> {
    if v.is_empty() {
        return Ok(Level::Verbose);
    }
    Level::parse(v).ok_or_else(|| ConfigError::BadLevel { value: v.to_string(), entry: entry.to_string() })
}

/// A name is a keyword-set expression when every `+`-separated part names a runtime keyword set.
fn keyword_sets(name: &str) -> Option<u64> {
    name.split('+').map(runtime_keyword).try_fold(0u64, |acc, m| m.map(|m| acc | m))
}

fn parse_entry(entry: &str) -> Result<ProviderConfig, ConfigError> {
    let fields: Vec<&str> = entry.splitn(4, ':').map(str::trim).collect();
    let name = fields[0];
    if name.is_empty() {
        return Err(ConfigError::EmptyEntry(entry.to_string()));
    }
    if let Some(mask) = keyword_sets(name) {
        if fields.len() > 2 {
            return Err(ConfigError::TooManyFields(entry.to_string()));
        }
        let level = parse_level(fields.get(1).copied().unwrap_or(""), entry)?;
        return Ok(ProviderConfig::new(RUNTIME_PROVIDER, mask, level));
    }
    if name.contains('+') {
        let unknown = name.split('+').find(|n| runtime_keyword(n).is_none()).unwrap_or(name);
        return Err(ConfigError::UnknownKeywordSet { name: unknown.to_string(), entry: entry.to_string() });
    }
    let keywords = match fields.get(1).copied() {
        None | Some("") | Some("*") => u64::MAX,
        Some(v) => parse_keywords(v, entry)?,
    };
    let level = parse_level(fields.get(2).copied().unwrap_or(""), entry)?;
    let mut arguments = Vec::new();
    if let Some(args) = fields.get(3) {
        for kv in args.split(';').filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| ConfigError::BadArgument { value: kv.to_string(), entry: entry.to_string() })?;
            arguments.push((k.to_string(), v.to_string()));
        }
    }
    Ok(ProviderConfig { name: name.to_string(), keywords, level, arguments })
}

/// Parses a comma-separated provider spec into merged provider configs (in first-seen order).
pub fn parse_providers(spec: &str) -> Result<Vec<ProviderConfig>, ConfigError> {
    let mut out: Vec<ProviderConfig> = Vec::new();
    for entry in spec.split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err(ConfigError::EmptyEntry(spec.to_string()));
        }
        let p = parse_entry(entry)?;
        match out.iter_mut().find(|q| q.name == p.name) {
            Some(q) => {
                q.keywords |= p.keywords;
                q.level = q.level.max(p.level);
                q.arguments.extend(p.arguments);
            }
            None => out.push(p),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::config::SAMPLE_PROFILER_PROVIDER;

    #[test]
    fn keyword_sets_and_level() {
        let p = parse_providers("gc+exception+contention:verbose").unwrap();
        assert_eq!(p, vec![ProviderConfig::new(RUNTIME_PROVIDER, 0x1 | 0x8000 | 0x4000, Level::Verbose)]);
        let p = parse_providers("Exception:informational").unwrap();
        assert_eq!((p[0].keywords, p[0].level), (0x8000, Level::Informational));
        // merged with a second runtime entry
        let p = parse_providers("gc:4, jit+loader:2").unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].keywords, p[0].level), (0x1 | 0x10 | 0x8, Level::Informational));
    }

    #[test]
    fn custom_providers() {
        let p = parse_providers("System.Net.Http,Microsoft-DotNETCore-SampleProfiler,Allocations-Run:0x1:5:key=value;b=").unwrap();
        assert_eq!(p[0], ProviderConfig::new("System.Net.Http", u64::MAX, Level::Verbose));
        assert_eq!(p[1], ProviderConfig::new(SAMPLE_PROFILER_PROVIDER, u64::MAX, Level::Verbose));
        assert_eq!(p[2].keywords, 1);
        assert_eq!(p[2].level, Level::Verbose);
        assert_eq!(p[2].arguments, vec![("key".into(), "value".into()), ("b".into(), "".into())]);
        assert_eq!(p[2].arguments_string(), "key=value;b=");
        let p = parse_providers("Microsoft-Windows-DotNETRuntime:4294967296:error").unwrap();
        assert_eq!((p[0].keywords, p[0].level), (1 << 32, Level::Error));
    }

    #[test]
    fn rejects_bad_specs() {
        assert!(matches!(parse_providers("gc+bogus"), Err(ConfigError::UnknownKeywordSet { name, .. }) if name == "bogus"));
        assert!(matches!(parse_providers("X:0xZZ"), Err(ConfigError::BadKeywords { .. })));
        assert!(matches!(parse_providers("X:1:9"), Err(ConfigError::BadLevel { .. })));
        assert!(matches!(parse_providers("gc:loud"), Err(ConfigError::BadLevel { .. })));
        assert!(matches!(parse_providers("X:1:5:novalue"), Err(ConfigError::BadArgument { .. })));
        assert!(matches!(parse_providers("gc:5:1"), Err(ConfigError::TooManyFields(_))));
        assert!(matches!(parse_providers("a,,b"), Err(ConfigError::EmptyEntry(_))));
        assert!(matches!(parse_providers(""), Err(ConfigError::EmptyEntry(_))));
        assert!(matches!(parse_providers(":1"), Err(ConfigError::EmptyEntry(_))));
    }
}
