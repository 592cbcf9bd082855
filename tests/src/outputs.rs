//! Reading what `clrprobe` wrote, for the live tests of `record` and `report --replay`: a fresh
//! output directory, the files of a prefix, a command's output, the top frames of a kind.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

/// A new, empty, private `$TMPDIR/clrprobe-TAG-NAME-XXXXXX` (see [`crate::scratch_dir`]).
pub fn out_dir(tag: &str, name: &str) -> PathBuf {
    crate::scratch_dir(&format!("{tag}-{name}"))
}

/// Runs `cmd` to its end; its stdout then stderr. Fails the test if it failed.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let (o, e) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "{cmd:?} failed: {o}{e}");
    o + &e
}

/// Runs `cmd` (`--json`) to its end: its stdout as JSON, its stderr. Fails the test if it failed.
pub fn run_json(cmd: &mut Command) -> (Value, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let (o, e) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "{cmd:?} failed: {o}{e}");
    (serde_json::from_str(&o).unwrap_or_else(|err| panic!("{cmd:?}: summary JSON: {err}: {o}{e}")), e)
}

/// Files `PREFIX.*`, by what follows the prefix (`cpu.pb.gz`, `events.json` …).
pub fn files(prefix: &Path) -> BTreeMap<String, Vec<u8>> {
    let stem = format!("{}.", prefix.file_name().unwrap().to_string_lossy());
    std::fs::read_dir(prefix.parent().unwrap())
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix(&stem)?.to_string();
            Some((rest, std::fs::read(e.path()).unwrap()))
        })
        .collect()
}

/// What follows `PREFIX.` in the names of the files written, sorted.
pub fn kinds_written(prefix: &Path) -> Vec<String> {
    files(prefix).into_keys().collect()
}

/// `PREFIX.SUFFIX` (`with_suffix(p, "cpu.pb.gz")`).
pub fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}.{suffix}", prefix.display()))
}

/// `PREFIX.events.json`, parsed.
pub fn events_json(prefix: &Path) -> Value {
    let path = with_suffix(prefix, "events.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// Top `n` self frames of `kind` (None: the file's first kind) as `clrprobe report --json
/// --top N FILE` lists them (`clrprobe`: the binary): (name, self value).
pub fn top(clrprobe: &str, file: &Path, kind: Option<&str>, n: usize) -> Vec<(String, i64)> {
    let json = run(Command::new(clrprobe).args(["report", "--json", "--top", &n.to_string()]).arg(file));
    let json = &json[..json.rfind('}').unwrap() + 1];
    let v: Value = serde_json::from_str(json).unwrap();
    let kinds = v["kinds"].as_array().unwrap();
    let k = kinds.iter().find(|k| kind.is_none_or(|n| k["kind"] == n)).unwrap_or_else(|| panic!("no {kind:?} kind in {}: {v}", file.display()));
    k["top_self"].as_array().unwrap().iter().map(|t| (t[0].as_str().unwrap().to_owned(), t[2].as_i64().unwrap())).collect()
}
