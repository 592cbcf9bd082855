//! Launch mode (`clrprobe record -- CMD…`): the command is started stopped before its first
//! instruction (a shell that stops itself, then execs it under the same pid), with perf maps switched on in its
//! environment; the recording attaches to its pid and then lets it run (SIGCONT), so the
//! profile covers the program from its start. The recording ends when it exits.
use std::{
    os::unix::process::ExitStatusExt,
    path::PathBuf,
    process::{Child, Command, ExitStatus},
};

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("no command given after `--`")]
    Empty,
    #[error("starting {program}: {source}")]
    Spawn { program: String, #[source] source: std::io::Error },
    #[error("waiting for {pid} to stop before exec: {source}")]
    Wait { pid: u32, #[source] source: std::io::Error },
    #[error("{program} exited before it could be profiled ({status})")]
    Exited { program: String, status: ExitStatus },
}

/// A program started stopped, its perf-map files removed when it is reaped.
pub struct Launched {
    child: Child,
    pub pid: u32,
    reaped: bool,
}

/// Environment a launched .NET program gets: a perf map (JIT code names) from the start.
pub const LAUNCH_ENV: &[(&str, &str)] = &[("DOTNET_PerfMapEnabled", "1"), ("COMPlus_PerfMapEnabled", "1")];

/// Starts `argv` stopped (it has not run an instruction of the program yet).
pub fn spawn_stopped(argv: &[String]) -> Result<Launched, LaunchError> {
    let program = argv.first().ok_or(LaunchError::Empty)?;
    // The shell stops itself, and on SIGCONT execs the program under the same pid (a stop
    // between fork and exec would block spawn(), which waits for the exec).
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(r#"kill -STOP $$ && exec "$@""#).arg("clrprobe-launch").args(argv);
    for (k, v) in LAUNCH_ENV {
        if std::env::var_os(k).is_none() {
            cmd.env(k, v);
        }
    }
    let mut child = cmd.spawn().map_err(|source| LaunchError::Spawn { program: program.clone(), source })?;
    let pid = child.id();
    let mut status = 0;
    // SAFETY: waitpid on our own child with a valid status pointer.
    let r = unsafe { libc::waitpid(pid as i32, &mut status, libc::WUNTRACED) };
    if r < 0 {
        let source = std::io::Error::last_os_error();
        let _ = child.kill();
        return Err(LaunchError::Wait { pid, source });
    }
    if !libc::WIFSTOPPED(status) {
        return Err(LaunchError::Exited { program: program.clone(), status: ExitStatus::from_raw(status) });
    }
    Ok(Launched { child, pid, reaped: false })
}

impl Launched {
    /// Waits (at most a second: the recording has ended, by Ctrl-C maybe) for the program to
    /// end, then removes the perf-map files its environment made. A program still running is
    /// left running (its perf map is switched off by the recording's perf-map guard).
    pub fn finish(mut self) -> std::io::Result<ExitStatus> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Ok(s),
                Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(10)),
                Ok(None) => {
                    self.reaped = true; // running, not stopped: nothing to do in Drop
                    return Err(std::io::Error::other(format!("still running as pid {}; left running", self.pid)));
                }
                Err(e) => break Err(e),
            }
        };
        self.reaped = status.is_ok();
        // Only files the program (running as we do) or root made: never a link or another
        // user's file planted under those names.
        // SAFETY: getuid/geteuid have no preconditions.
        let owner = clrprobe_symbolizer::target_file::Owner::users(unsafe { libc::getuid() }, unsafe { libc::geteuid() });
        for f in [format!("/tmp/perf-{}.map", self.pid), format!("/tmp/perfinfo-{}.map", self.pid), format!("/tmp/jit-{}.dump", self.pid)] {
            let _ = clrprobe_symbolizer::target_file::remove(&PathBuf::from(f), owner);
        }
        status
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        // Never leave a stopped child behind (a reaped pid may belong to another process).
        if self.reaped {
            return;
        }
        // SAFETY: kill(2) has no memory effects.
        unsafe { libc::kill(self.pid as i32, libc::SIGCONT) };
    }
}
