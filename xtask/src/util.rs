//! Process helpers for xtask.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

/// The workspace root (xtask lives one level below it).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask has a parent").to_path_buf()
}

/// Cargo's target directory for this workspace.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

/// A `cargo` command in the workspace root, on the toolchain that runs xtask.
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root());
    c
}

/// Runs `cmd`, failing with `what` when it does not exit 0.
pub fn check(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd.status().with_context(|| format!("could not start {what}: {cmd:?}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// Runs `cmd` and returns its stdout, or None when it cannot start or fails.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn is_root() -> bool {
    output(Command::new("id").arg("-u")).is_some_and(|s| s.trim() == "0")
}

pub fn have(program: &str) -> bool {
    output(Command::new("sh").args(["-c", &format!("command -v {program}")])).is_some()
}

/// Runs `bin args…` as root (through sudo when we are not root), exiting with its status.
pub fn run_as_root(bin: &Path, args: &[String]) -> Result<()> {
    let mut cmd = if is_root() {
        Command::new(bin)
    } else {
        let mut c = Command::new("sudo");
        c.arg(bin);
        c
    };
    let status = cmd.args(args).status().with_context(|| format!("running {}", bin.display()))?;
    std::process::exit(status.code().unwrap_or(1));
}

/// Installs Debian package `package` unless `program` is on PATH (needs root).
pub fn ensure_apt(program: &str, package: &str, why: &str) -> Result<()> {
    if have(program) {
        return Ok(());
    }
    install_apt(program, package, why)
}

/// Installs Debian package `package` unless the file `path` exists (needs root).
pub fn ensure_apt_file(path: &str, package: &str, why: &str) -> Result<()> {
    if std::path::Path::new(path).is_file() {
        return Ok(());
    }
    install_apt(path, package, why)
}

fn install_apt(program: &str, package: &str, why: &str) -> Result<()> {
    if !is_root() {
        bail!("{program} ({why}) is missing and installing it needs root: run `sudo apt-get install -y {package}`");
    }
    eprintln!("xtask: installing {package} from Debian ({why})");
    let install = || {
        let mut c = Command::new("apt-get");
        c.args(["install", "-y", "-q", "--no-install-recommends", package]).env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    if check(&mut install(), &format!("apt-get install {package}")).is_err() {
        check(Command::new("apt-get").args(["update", "-q"]), "apt-get update")?;
        check(&mut install(), &format!("apt-get install {package}"))
            .with_context(|| format!("could not install {package}; run `apt-get update && apt-get install -y {package}`"))?;
    }
    Ok(())
}

/// The middle value of `v` (the upper one of an even count; NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The host's load averages (1, 5, 15 minutes), as /proc/loadavg has them.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// A new private directory `$TMPDIR/clrprobe-TAG-XXXXXX` (mkdtemp: mode 0700, a random name;
/// nothing planted in /tmp is followed or reused). Kept: the caller removes it.
pub fn scratch_dir(tag: &str) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    // tempfile's default mode is 0777 less the umask: ask for 0700 as mkdtemp gives.
    Ok(tempfile::Builder::new()
        .prefix(&format!("clrprobe-{tag}-"))
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir().with_context(|| format!("making a scratch directory under {}", std::env::temp_dir().display()))?.keep())
}
