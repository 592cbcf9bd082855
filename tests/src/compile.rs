//! Compiling workloads with mcs, cached by a hash of their sources.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
};

use crate::{Runtime, TestbedError, cache_dir};

/// `tests/workloads/` in the source tree.
pub fn workloads_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads")
}

fn fnv1a(data: &[u8], mut h: u64) -> u64 {
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The `-r:Assembly` references a workload asks for in leading `// mcs: -r:…` comment lines.
fn references(main: &Path) -> Result<Vec<String>, TestbedError> {
    let text = fs::read_to_string(main)?;
    Ok(text
        .lines()
        .take_while(|l| l.starts_with("//"))
        .filter_map(|l| l.strip_prefix("// mcs:"))
        .flat_map(str::split_whitespace)
        .filter(|a| a.starts_with("-r:"))
        .map(str::to_string)
        .collect())
}

static COMPILE_LOCK: Mutex<()> = Mutex::new(());

/// Compiles `tests/workloads/<name>.cs` (with Common.cs) for `runtime` and returns the dll path,
/// next to a `<name>.runtimeconfig.json` naming the runtime's framework.
pub fn compile(name: &str, runtime: Runtime) -> Result<PathBuf, TestbedError> {
    let dir = workloads_dir();
    let main = dir.join(format!("{name}.cs"));
    if !main.is_file() {
        return Err(TestbedError::NoWorkload(name.to_string()));
    }
    let common = dir.join("Common.cs");
    let mut h = 0xcbf29ce484222325;
    for f in [&common, &main] {
        h = fnv1a(&fs::read(f)?, h);
    }
    let out_dir = cache_dir().join("workloads").join(format!("{name}-{h:016x}")).join(runtime.cache_name());
    let dll = out_dir.join(format!("{name}.dll"));
    let _guard = COMPILE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !dll.is_file() {
        fs::create_dir_all(&out_dir)?;
        // mcs names the assembly after the output file: compile to `<name>.dll` in a scratch
        // directory (not `<name>.dll.tmp`, which would make the assembly `<name>.dll`).
        let scratch = out_dir.join(format!(".build-{}", std::process::id()));
        fs::create_dir_all(&scratch)?;
        let tmp = scratch.join(format!("{name}.dll"));
        let out = Command::new("mcs")
            .args(references(&main)?)
            .arg("-target:exe")
            .arg("-optimize+")
            .arg("-debug-")
            .arg(format!("-out:{}", tmp.display()))
            .arg(&common)
            .arg(&main)
            .output()
            .map_err(TestbedError::NoCompiler)?;
        if !out.status.success() {
            return Err(TestbedError::Compile {
                workload: name.to_string(),
                output: format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
            });
        }
        fs::rename(&tmp, &dll)?;
        let _ = fs::remove_dir_all(&scratch);
    }
    let config = out_dir.join(format!("{name}.runtimeconfig.json"));
    let text = format!(
        "{{\"runtimeOptions\":{{\"tfm\":\"net{v}\",\"framework\":{{\"name\":\"Microsoft.NETCore.App\",\"version\":\"{v}\"}}}}}}\n",
        v = runtime.framework_version()
    );
    // Written once, atomically: a host starting meanwhile must never read it half-written.
    if fs::read_to_string(&config).ok().as_deref() != Some(text.as_str()) {
        let tmp = out_dir.join(format!("{name}.runtimeconfig.json.{}.tmp", std::process::id()));
        fs::write(&tmp, &text)?;
        fs::rename(&tmp, &config)?;
    }
    Ok(dll)
}
