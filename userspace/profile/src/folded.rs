//! Folded stacks (Brendan Gregg's `collapsed` format): one line per distinct stack,
//! `root;caller;leaf count`, one file per sample type.
//!
//! Frame names are made safe for the format: `;` becomes `:` and line breaks become spaces.
//! Samples whose value is zero or negative are left out (the format has no negative counts).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::ProfileError;
use crate::model::{Frame, FrameKind, LabelSet, Profile};
use crate::output;

/// How frames are spelled in folded lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoldedOptions {
    /// Append perf's suffixes: `_[k]` to kernel frames and `_[j]` to managed frames, which
    /// flame graph palettes (inferno's `java`) colour.
    pub annotate_kinds: bool,
    /// Prefix frames with the module: `System.Private.CoreLib.dll!System.String.Concat`.
    pub include_module: bool,
    /// Start every stack with a process frame and a thread frame taken from the labels.
    pub thread_roots: bool,
}

impl Default for FoldedOptions {
    fn default() -> Self {
        FoldedOptions { annotate_kinds: true, include_module: false, thread_roots: false }
    }
}

/// Replace the characters the format reserves.
pub fn escape(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            ';' => ':',
            '\n' | '\r' => ' ',
            c => c,
        })
        .collect()
}

/// The folded spelling of one frame.
pub fn frame_label(frame: &Frame, opts: &FoldedOptions) -> String {
    let mut out = String::with_capacity(frame.name.len() + frame.module.len() + 5);
    if opts.include_module && !frame.module.is_empty() {
        out.push_str(&escape(&frame.module));
        out.push('!');
    }
    if frame.name.is_empty() {
        out.push_str("[unknown]");
    } else {
        out.push_str(&escape(&frame.name));
    }
    if opts.annotate_kinds {
        match frame.kind {
            FrameKind::Kernel => out.push_str("_[k]"),
            k if k.is_managed() => out.push_str("_[j]"),
            _ => {}
        }
    }
    out
}

fn root_frames(labels: &LabelSet) -> Vec<String> {
    let mut roots = Vec::new();
    if labels.pid.is_some() || labels.process_name.is_some() {
        let name = labels.process_name.as_deref().unwrap_or("process");
        roots.push(match labels.pid {
            Some(pid) => format!("{} ({pid})", escape(name)),
            None => escape(name),
        });
    }
    if labels.tid.is_some() || labels.thread_name.is_some() {
        let name = labels.thread_name.as_deref().unwrap_or("thread");
        roots.push(match labels.tid {
            Some(tid) => format!("{} ({tid})", escape(name)),
            None => escape(name),
        });
    }
    roots
}

/// The folded lines for sample type `index`, aggregated by text and sorted.
pub fn lines(p: &Profile, index: usize, opts: &FoldedOptions) -> Result<Vec<String>, ProfileError> {
    if index >= p.sample_types().len() {
        return Err(ProfileError::NoSuchSampleType { index, count: p.sample_types().len() });
    }
    let labels: Vec<String> = p.frames().iter().map(|f| frame_label(f, opts)).collect();
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    let mut key = String::new();
    for s in p.samples() {
        let v = s.values[index];
        if v <= 0 {
            continue;
        }
        key.clear();
        if let Some(l) = p.labels(s.labels).filter(|_| opts.thread_roots) {
            for r in root_frames(l) {
                key.push_str(&r);
                key.push(';');
            }
        }
        for f in p.stack(s.stack).unwrap_or(&[]) {
            if let Some(l) = labels.get(f.index()) {
                key.push_str(l);
                key.push(';');
            }
        }
        key.pop();
        if key.is_empty() {
            key.push_str("[no stack]");
        }
        match counts.get_mut(key.as_str()) {
            Some(c) => *c = c.saturating_add(v),
            None => {
                counts.insert(key.clone(), v);
            }
        }
    }
    Ok(counts.into_iter().map(|(k, c)| format!("{k} {c}")).collect())
}

/// Write the folded lines of sample type `index` to a stream.
pub fn to_writer<W: Write>(p: &Profile, index: usize, opts: &FoldedOptions, w: W) -> Result<(), ProfileError> {
    let lines = lines(p, index, opts)?;
    output::to_stream("folded", w, |w| write_lines(&lines, w))
}

fn write_lines<W: Write>(lines: &[String], w: &mut W) -> std::io::Result<()> {
    for l in lines {
        w.write_all(l.as_bytes())?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// Write the folded lines of sample type `index` to `path`.
pub fn write_file(p: &Profile, index: usize, opts: &FoldedOptions, path: impl AsRef<Path>) -> Result<(), ProfileError> {
    let lines = lines(p, index, opts)?;
    output::write_file(path.as_ref(), |w| write_lines(&lines, w))
}

/// Write one file per sample type into `dir`, named `<stem>.<kind>.folded`; returns the paths.
pub fn write_all(p: &Profile, dir: impl AsRef<Path>, stem: &str, opts: &FoldedOptions) -> Result<Vec<PathBuf>, ProfileError> {
    let mut paths = Vec::with_capacity(p.sample_types().len());
    for (i, t) in p.sample_types().iter().enumerate() {
        let path = dir.as_ref().join(format!("{stem}.{}.folded", file_safe(&t.kind)));
        write_file(p, i, opts, &path)?;
        paths.push(path);
    }
    Ok(paths)
}

/// Sample kinds are ours, but keep file names tame anyway.
pub(crate) fn file_safe(kind: &str) -> String {
    kind.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}
