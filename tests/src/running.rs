//! Starting a workload on a runtime and handing back its pid, directories and a stop handle.
use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Condvar, Mutex},
    time::{Duration, Instant},
};

use crate::{Runtime, TestbedError, compile};

/// What to start: a workload from `tests/workloads/` on a runtime, with arguments and environment.
#[derive(Debug, Clone)]
pub struct Workload {
    pub name: String,
    pub runtime: Runtime,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// How long to wait for the `ready` line.
    pub ready_timeout: Duration,
}

impl Workload {
    pub fn new(name: &str, runtime: Runtime) -> Self {
        Self { name: name.to_string(), runtime, args: Vec::new(), env: Vec::new(), ready_timeout: Duration::from_secs(30) }
    }

    pub fn arg(mut self, a: impl ToString) -> Self {
        self.args.push(a.to_string());
        self
    }

    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.to_string(), v.to_string()));
        self
    }

    /// The command line that would run it (host, dll, args) with its environment applied.
    pub fn command(&self) -> Result<Command, TestbedError> {
        let dll = compile(&self.name, self.runtime)?;
        let root = self.runtime.dotnet_root()?;
        let mut cmd = Command::new(root.join("dotnet"));
        cmd.arg(&dll)
            .args(&self.args)
            .env("DOTNET_ROOT", &root)
            // Neither runtime finds an ICU it knows on Debian 12 as shipped here.
            .env("DOTNET_SYSTEM_GLOBALIZATION_INVARIANT", "1")
            .env("DOTNET_CLI_TELEMETRY_OPTOUT", "1")
            .env_remove("DOTNET_PerfMapEnabled")
            .env_remove("COMPlus_PerfMapEnabled")
            .current_dir(dll.parent().expect("dll has a directory"));
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        Ok(cmd)
    }

    /// Starts it and waits for `ready`.
    pub fn start(&self) -> Result<Running, TestbedError> {
        let mut cmd = self.command()?;
        let app_dir = cmd.get_current_dir().map(PathBuf::from).unwrap_or_default();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| TestbedError::Spawn { what: format!("{} on {:?}", self.name, self.runtime), source })?;
        let output = Arc::new((Mutex::new(Vec::<String>::new()), Condvar::new()));
        for stream in [
            child.stdout.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child.stderr.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let out = Arc::clone(&output);
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    let (lines, cv) = &*out;
                    lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                    cv.notify_all();
                }
            });
        }
        let pid = child.id();
        let start = start_ticks(pid);
        let running = Running { pid, app_dir, runtime: self.runtime, child, output, status: None, name: self.name.clone(), start };
        if running.wait_for_line("ready", self.ready_timeout).is_none() {
            let output = running.output().join("\n");
            return Err(TestbedError::NotReady { workload: self.name.clone(), secs: self.ready_timeout.as_secs(), output });
        }
        Ok(running)
    }
}

/// A started workload. Dropping it kills the process.
pub struct Running {
    pub pid: u32,
    /// Directory holding the compiled dll (its working directory).
    pub app_dir: PathBuf,
    pub runtime: Runtime,
    pub name: String,
    child: Child,
    output: Arc<(Mutex<Vec<String>>, Condvar)>,
    status: Option<ExitStatus>,
    /// Its start time (clock ticks since boot, /proc/PID/stat): the key in its diagnostics
    /// socket's name.
    start: Option<u64>,
}

impl Running {
    /// Every line printed so far (stdout and stderr, in arrival order per stream).
    pub fn output(&self) -> Vec<String> {
        self.output.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until a line starting with `prefix` has been printed; returns it.
    pub fn wait_for_line(&self, prefix: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let (lines, cv) = &*self.output;
        let mut guard = lines.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(l) = guard.iter().find(|l| l.starts_with(prefix)) {
                return Some(l.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            guard = cv.wait_timeout(guard, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Is the process still running?
    pub fn is_alive(&mut self) -> bool {
        self.status.is_none() && matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for the workload to finish by itself (up to `timeout`), killing it after that.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                self.status = Some(s);
                std::thread::sleep(Duration::from_millis(20)); // let the readers drain
                return s;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill()
    }

    /// Kills the workload (SIGKILL) and reaps it.
    pub fn kill(&mut self) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        let _ = self.child.kill();
        let s = self.child.wait().expect("waiting for a child we spawned");
        self.status = Some(s);
        s
    }

    /// Sockets open in the process (its diagnostics listener plus accepted connections): a
    /// session left open in the target shows as one more.
    pub fn socket_count(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .map(|d| {
                d.flatten()
                    .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")))
                    .count()
            })
            .unwrap_or(0)
    }

    /// Sends a signal (for example SIGINT) without waiting.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.pid as i32, sig) };
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
        // A runtime started with perf maps on (DOTNET_PerfMapEnabled) writes these files and
        // never removes them: the test bed does, once the process is gone.
        for f in [
            format!("/tmp/perf-{}.map", self.pid),
            format!("/tmp/perfinfo-{}.map", self.pid),
            format!("/tmp/jit-{}.dump", self.pid),
        ] {
            let _ = std::fs::remove_file(f);
        }
        // A killed runtime leaves its diagnostics socket; with pids reused (pid_max 32768),
        // stale sockets pile up in /tmp. Removed when it is still the socket this process made.
        if let Some(start) = self.start {
            use std::os::unix::fs::FileTypeExt;
            let socket = socket_path(self.pid, start);
            if std::fs::symlink_metadata(&socket).is_ok_and(|m| m.file_type().is_socket()) {
                let _ = std::fs::remove_file(socket);
            }
        }
    }
}

/// The diagnostics socket `pid` made, `/tmp/dotnet-diagnostic-{pid}-{start}-socket` with its
/// start time (clock ticks since boot, field 22 of /proc/PID/stat). Pids are reused (pid_max
/// is 32768 here) and a killed runtime leaves its socket, so `/tmp` may hold an earlier
/// process's with the same pid: matching on the pid alone finds that one too.
pub fn diagnostics_socket(pid: u32) -> Option<PathBuf> {
    Some(socket_path(pid, start_ticks(pid)?))
}

/// A process's start time, clock ticks since boot (field 22 of /proc/PID/stat).
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(19)?.parse().ok()
}

/// Where the runtime of `pid`, started at `start`, makes its diagnostics socket.
fn socket_path(pid: u32, start: u64) -> PathBuf {
    PathBuf::from(format!("/tmp/dotnet-diagnostic-{pid}-{start}-socket"))
}

/// Thread names and kernel wait channels of a process, `name:wchan` comma-separated (what a
/// hang looks like).
pub fn thread_states(pid: u32) -> String {
    let mut v = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let wchan = std::fs::read_to_string(t.path().join("wchan")).unwrap_or_default();
        v.push(format!("{}:{wchan}", comm.trim()));
    }
    v.join(", ")
}
