//! Recording a session's stream to a file.
use std::{
    fs::File,
    io::{BufWriter, Write},
    path::PathBuf,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use clrprobe_eventpipe::ipc::{Client, IpcError, ProviderConfig, SessionConfig};
use clrprobe_profile::safe_file::{OutputDir, SafeFileError};
use serde::Serialize;

#[derive(Debug, Clone)]
pub struct TraceArgs {
    pub pid: u32,
    pub providers: Vec<ProviderConfig>,
    pub duration: Option<Duration>,
    pub output: PathBuf,
    pub rundown: bool,
    pub buffer_mb: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("EventPipe session on pid {pid}: {source}")]
    Ipc { pid: u32, #[source] source: IpcError },
    #[error("writing {path}: {source} (free space or choose another -o; nothing was left under that name)")]
    Write { path: PathBuf, #[source] source: std::io::Error },
    #[error(transparent)]
    Output(#[from] SafeFileError),
    #[cfg(target_os = "linux")]
    #[error(transparent)]
    SetUp(#[from] crate::lifecycle::setup::SetupError),
}

#[derive(Debug, Serialize)]
pub struct TraceSummary {
    pub session_id: u64,
    pub bytes: u64,
    pub seconds: f64,
    /// Why the recording ended.
    pub ended_by: &'static str,
}

/// Copies the session stream into `args.output` until `stop`, the duration, or the target's
/// exit; then stops the session (the rundown follows) and copies the rest.
pub fn record_to_file(args: &TraceArgs, stop: &AtomicBool) -> Result<TraceSummary, TraceError> {
    let pid = args.pid;
    let config = SessionConfig {
        circular_buffer_mb: args.buffer_mb,
        request_rundown: args.rundown,
        request_stackwalk: true,
        providers: args.providers.clone(),
    };
    // A temporary file renamed into place at the end: no link followed, no half file left.
    let name = args.output.file_name().ok_or_else(|| SafeFileError::NotRegular { path: args.output.clone() })?;
    let dir = OutputDir::of(&args.output)?;
    let mut pending = dir.create(name)?;
    let file = pending.take_file();
    // Not while another clrprobe sets the target up (no wait for the runtime's start-up: this
    // sends no EnablePerfMap, and a session may be started in a runtime suspended at start-up).
    #[cfg(target_os = "linux")]
    let setting_up = crate::lifecycle::setup::lock(pid, Instant::now() + crate::lifecycle::setup::SETUP_WAIT)?;
    let client = Client::for_pid(pid).map_err(|source| TraceError::Ipc { pid, source })?;
    let mut session = client.start_session(&config).map_err(|source| TraceError::Ipc { pid, source })?;
    #[cfg(target_os = "linux")]
    drop(setting_up);
    let session_id = session.id();
    let stop_handle = session.stop_handle();
    let started = Instant::now();
    let path = args.output.clone();
    // The copy runs on its own thread; the runtime closes the stream after StopTracing.
    let copier = std::thread::spawn(move || -> Result<(u64, File), std::io::Error> {
        let mut w = BufWriter::with_capacity(1 << 20, file);
        let n = std::io::copy(&mut session, &mut w)?;
        w.flush()?;
        Ok((n, w.into_inner().map_err(|e| e.into_error())?))
    });
    let ended_by = loop {
        std::thread::sleep(Duration::from_millis(50));
        if stop.load(Ordering::SeqCst) {
            break "signal";
        }
        if args.duration.is_some_and(|d| started.elapsed() >= d) {
            break "duration";
        }
        if copier.is_finished() {
            break "target exit";
        }
    };
    // Bounded: a runtime that does not finish the session (stopped, not answering) is given
    // up on after a second; the bytes copied so far stay in the file.
    let _ = stop_handle.stop_within(Duration::from_millis(700));
    let deadline = Instant::now() + Duration::from_millis(500);
    while !copier.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if !copier.is_finished() {
        stop_handle.abort();
        std::thread::sleep(Duration::from_millis(100));
    }
    if !copier.is_finished() {
        return Ok(TraceSummary { session_id, bytes: 0, seconds: started.elapsed().as_secs_f64(), ended_by: "signal; the runtime did not answer" });
    }
    let bytes = match copier.join() {
        Ok(Ok((n, file))) => {
            pending.commit_with(file)?;
            n
        }
        Ok(Err(source)) => return Err(TraceError::Write { path, source }),
        Err(_) => return Err(TraceError::Write { path, source: std::io::Error::other("the copying thread panicked") }),
    };
    Ok(TraceSummary { session_id, bytes, seconds: started.elapsed().as_secs_f64(), ended_by })
}
