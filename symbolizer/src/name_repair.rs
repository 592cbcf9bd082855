//! Completing method names that .NET 8's perf map and jitdump cut short.
//!
//! .NET 8 writes some names one or more characters short (dotnet/runtime#102938; .NET 8.0.4
//! here writes `FirstSecondApp::FirstSecon(int64)` for `FirstSecond`). The runtime's method
//! events name such code right, but code compiled before an EventPipe session started, in a
//! process that exits before the session's rundown, has only those names. A JIT name is
//! checked against the metadata of the assembly it names; when its type has no method of that
//! name, it is completed if exactly one method of the type starts with it and takes as many
//! parameters as the record lists. Otherwise it is left as written.
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::FormatError;
use crate::metadata::Metadata;
use crate::pe::{FileSource, PeImage};

/// Largest assembly read for names (CoreLib is ~13 MB).
const MAX_ASSEMBLY: u64 = 512 << 20;

/// The type and method names of one assembly, as sorted hashes (8 bytes per type and method).
#[derive(Debug, Default)]
pub struct MethodIndex {
    types: Vec<u64>,
    methods: Vec<u64>,
}

fn hash_of(parts: &[&str]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in parts {
        p.hash(&mut h);
    }
    h.finish()
}

impl MethodIndex {
    pub fn build(md: &Metadata<'_>) -> Self {
        let names: Vec<String> = (1..=md.types.len() as u32).map(|rid| md.type_name(rid).unwrap_or_default()).collect();
        let mut types: Vec<u64> = names.iter().map(|n| hash_of(&[n])).collect();
        let mut methods = Vec::with_capacity(md.methods.len());
        for (rid, ty) in (1..).zip(&names) {
            for m in md.methods_of_type(rid) {
                if let Some(name) = md.methods.get(m as usize - 1) {
                    methods.push(hash_of(&[ty, name]));
                }
            }
        }
        types.sort_unstable();
        methods.sort_unstable();
        Self { types, methods }
    }

    pub fn has_type(&self, ty: &str) -> bool {
        self.types.binary_search(&hash_of(&[ty])).is_ok()
    }

    pub fn has_method(&self, ty: &str, method: &str) -> bool {
        self.methods.binary_search(&hash_of(&[ty, method])).is_ok()
    }
}

/// The one method of type `ty` whose name starts with `cut` (and is longer) and that takes
/// `params` parameters when that is known; None when there is no such method or several.
pub fn complete(md: &Metadata<'_>, ty: &str, cut: &str, params: Option<u32>) -> Option<String> {
    let rid = (1..=md.types.len() as u32).find(|&r| md.type_name(r).as_deref() == Some(ty))?;
    let mut found: Option<&str> = None;
    for m in md.methods_of_type(rid) {
        let name = md.methods.get(m as usize - 1)?;
        if name.len() <= cut.len() || !name.starts_with(cut) {
            continue;
        }
        if params.is_some_and(|p| md.param_count(m) != Some(p)) {
            continue;
        }
        match found {
            Some(f) if f != name.as_ref() => return None,
            _ => found = Some(name),
        }
    }
    found.map(str::to_string)
}

/// What of an assembly's metadata to read: only what names methods (types, methods, nested
/// classes, strings: [`PeImage::metadata_at`]), or all of it (signatures too).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    Names,
    Whole,
}

/// Reads the metadata of the managed image at `path` (a regular file, opened as mapped files
/// are: without blocking, no link followed; only its headers and metadata are read) and hands
/// it to `f`.
fn with_metadata<T>(path: &Path, read: Read, f: impl FnOnce(&Metadata<'_>) -> T) -> Result<T, FormatError> {
    let file = crate::cache::open_mapped(path).map_err(|_| FormatError::NotReadyToRun("assembly not readable"))?;
    let meta = file.metadata().map_err(|_| FormatError::NotReadyToRun("assembly not readable"))?;
    if !meta.is_file() || meta.len() > MAX_ASSEMBLY {
        return Err(FormatError::NotReadyToRun("not a regular file of a readable size"));
    }
    let src = FileSource::new(&file, meta.len());
    let pe = PeImage::read(&src)?;
    let (md_rva, md_size) = pe.cor20(&src)?.metadata;
    let bytes = match read {
        Read::Names => pe.metadata_at(&src, md_rva, md_size)?,
        Read::Whole => pe.bytes_at(&src, md_rva, md_size, "metadata")?,
    };
    let md = Metadata::parse(&bytes)?;
    Ok(f(&md))
}

/// Parameters listed in a perf-map signature: `(int64)` → 1, `()` → 0; commas inside
/// generic arguments (`<…>`, `[…]`) do not count.
pub fn listed_params(full: &str) -> Option<u32> {
    let open = full.find('(')?;
    let body = &full[open + 1..];
    let mut depth = 0i32;
    let mut count = 0u32;
    let mut any = false;
    for c in body.chars() {
        match c {
            '<' | '[' => depth += 1,
            '>' | ']' => depth -= 1,
            ',' if depth == 0 => count += 1,
            ')' if depth == 0 => return Some(if any { count + 1 } else { 0 }),
            c if !c.is_whitespace() => any = true,
            _ => {}
        }
    }
    None
}

/// (assembly path, name as cut, parameters listed) of a completion asked for.
type CompletionKey = (String, String, Option<u32>);

/// Per assembly file: its method index and the completions asked for so far.
#[derive(Debug, Default)]
pub struct Repairs {
    indexes: Mutex<HashMap<String, Option<Arc<MethodIndex>>>>,
    completions: Mutex<HashMap<CompletionKey, Option<String>>>,
}

impl Repairs {
    /// `name` (`Type::Method`) as the assembly at `path` has it: completed when the perf map
    /// cut it short, else None (keep the name as written).
    pub fn repair(&self, path: &Path, name: &str, params: Option<u32>) -> Option<String> {
        let (ty, method) = name.rsplit_once("::")?;
        // Generic instantiations (`List`1[System.__Canon]`, `M[System.__Canon]`) are not
        // metadata names: not checked.
        if ty.contains('[') || method.contains('[') || method.is_empty() {
            return None;
        }
        let key = path.to_string_lossy().into_owned();
        let index = {
            let mut idx = self.indexes.lock().unwrap_or_else(|e| e.into_inner());
            idx.entry(key.clone()).or_insert_with(|| with_metadata(path, Read::Names, MethodIndex::build).ok().map(Arc::new)).clone()
        }?;
        if !index.has_type(ty) || index.has_method(ty, method) {
            return None;
        }
        let ck = (key, name.to_string(), params);
        if let Some(done) = self.completions.lock().unwrap_or_else(|e| e.into_inner()).get(&ck) {
            return done.clone();
        }
        let fixed = with_metadata(path, Read::Whole, |md| complete(md, ty, method, params)).ok().flatten().map(|m| format!("{ty}::{m}"));
        self.completions.lock().unwrap_or_else(|e| e.into_inner()).insert(ck, fixed.clone());
        fixed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_listed_parameters() {
        assert_eq!(listed_params("void [A] A::M(int64)"), Some(1));
        assert_eq!(listed_params("void [A] A::M()"), Some(0));
        assert_eq!(
            listed_params("void [System.Console] System.ConsolePal::Writ(class [System.Runtime]Microsoft.Win32.SafeHandles.SafeFileHandle,valuetype [System.Runtime]System.ReadOnlySpan`1<uint8>,bool)"),
            Some(3)
        );
        assert_eq!(listed_params("void [A] A::M(class X`2<int32,int64>,int32)"), Some(2));
        assert_eq!(listed_params("void [A] A::M"), None);
    }
}
