//! The diagnostics client: one connection per command.
use std::{io::Write, time::Duration};

use super::{
    collect::CollectTracingVersion,
    config::SessionConfig,
    discovery::find_socket,
    error::IpcError,
    header::{CommandId, command_set, encode_message},
    process::{ProcessDetails, ProcessInfo, ProcessInfo2},
    reply::{OkReply, read_reply},
    session::Session,
    transport::{Connection, Endpoint},
};

/// Process command set ids.
mod process_id {
    pub const PROCESS_INFO: u8 = 0x00;
    pub const RESUME_RUNTIME: u8 = 0x01;
    pub const PROCESS_INFO2: u8 = 0x04;
    pub const ENABLE_PERF_MAP: u8 = 0x05;
    pub const DISABLE_PERF_MAP: u8 = 0x06;
}
/// EventPipe StopTracing id.
const STOP_TRACING: u8 = 0x01;

/// What EnablePerfMap (0x0405) turns on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerfMapType {
    Disabled = 0,
    /// Both /tmp/perf-PID.map and jitdump.
    All = 1,
    /// Only the jitdump file (/tmp/jit-PID.dump).
    JitDump = 2,
    /// Only /tmp/perf-PID.map (plus perfinfo-PID.map).
    PerfMap = 3,
}

/// A client for one runtime's diagnostics server.
#[derive(Debug, Clone)]
pub struct Client {
    endpoint: Endpoint,
    timeout: Duration,
}

impl Client {
    /// Default bound on how long a command waits for its reply.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

    pub fn new(endpoint: Endpoint) -> Self {
        Self { endpoint, timeout: Self::DEFAULT_TIMEOUT }
    }

    /// Finds the endpoint of `pid` ([`find_socket`]).
    pub fn for_pid(pid: u32) -> Result<Self, IpcError> {
        Ok(Self::new(find_socket(pid)?))
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Connects and writes one request; the reply is still to be read.
    pub(crate) fn send(&self, command: CommandId, payload: &[u8]) -> Result<Connection, IpcError> {
        let message = encode_message(command, payload)?;
        let mut conn = self.endpoint.connect()?;
        conn.set_read_timeout(Some(self.timeout))?;
        conn.set_write_timeout(Some(self.timeout))?;
        conn.write_all(&message)?;
        conn.flush()?;
        Ok(conn)
    }

    /// Sends one command and returns the OK reply (the connection stays open for streaming).
    pub fn request_open(&self, command: CommandId, payload: &[u8]) -> Result<(Connection, OkReply), IpcError> {
        let mut conn = self.send(command, payload)?;
        let reply = read_reply(&mut conn)?;
        Ok((conn, reply))
    }

    /// Sends one command on a new connection and returns its OK reply.
    pub fn request(&self, command: CommandId, payload: &[u8]) -> Result<OkReply, IpcError> {
        Ok(self.request_open(command, payload)?.1)
    }

    /// ProcessInfo (0x0400).
    pub fn process_info(&self) -> Result<ProcessInfo, IpcError> {
        let r = self.request(CommandId::new(command_set::PROCESS, process_id::PROCESS_INFO), &[])?;
        Ok(ProcessInfo::parse(&r.payload)?)
    }

    /// ProcessInfo2 (0x0404, .NET 6+). Older runtimes answer UNKNOWN_COMMAND.
    pub fn process_info2(&self) -> Result<ProcessInfo2, IpcError> {
        let r = self.request(CommandId::new(command_set::PROCESS, process_id::PROCESS_INFO2), &[])?;
        Ok(ProcessInfo2::parse(&r.payload)?)
    }

    /// ProcessInfo2 if the runtime knows it, else ProcessInfo (fallback on UNKNOWN_COMMAND).
    pub fn process_details(&self) -> Result<ProcessDetails, IpcError> {
        match self.process_info2() {
            Ok(p) => Ok(ProcessDetails {
                info: p.info,
                managed_entrypoint_assembly: Some(p.managed_entrypoint_assembly),
                clr_product_version: Some(p.clr_product_version),
            }),
            Err(e) if e.is_unknown_command() => Ok(ProcessDetails {
                info: self.process_info()?,
                managed_entrypoint_assembly: None,
                clr_product_version: None,
            }),
            Err(e) => Err(e),
        }
    }

    /// ResumeRuntime (0x0401): releases a runtime started with a suspending diagnostic port.
    pub fn resume_runtime(&self) -> Result<(), IpcError> {
        self.request(CommandId::new(command_set::PROCESS, process_id::RESUME_RUNTIME), &[])?.hresult()
    }

    /// EnablePerfMap (0x0405, .NET 8+).
    pub fn enable_perf_map(&self, kind: PerfMapType) -> Result<(), IpcError> {
        let payload = (kind as u32).to_le_bytes();
        self.request(CommandId::new(command_set::PROCESS, process_id::ENABLE_PERF_MAP), &payload)?.hresult()
    }

    /// DisablePerfMap (0x0406, .NET 8+).
    pub fn disable_perf_map(&self) -> Result<(), IpcError> {
        self.request(CommandId::new(command_set::PROCESS, process_id::DISABLE_PERF_MAP), &[])?.hresult()
    }

    /// StopTracing (0x0201) on a new connection; returns the session id the runtime echoes.
    ///
    /// The runtime writes the session's remaining events (and rundown) before it replies, so
    /// someone must be reading the session stream meanwhile, or this times out.
    pub fn stop_tracing(&self, session_id: u64) -> Result<u64, IpcError> {
        self.request(CommandId::new(command_set::EVENTPIPE, STOP_TRACING), &session_id.to_le_bytes())?.session_id()
    }

    /// Starts a streaming session, trying [`CollectTracingVersion::DEFAULT_LADDER`] newest first
    /// and falling back on UNKNOWN_COMMAND (skipping versions that cannot express `config`).
    pub fn start_session(&self, config: &SessionConfig) -> Result<Session, IpcError> {
        self.start_session_with(config, &CollectTracingVersion::DEFAULT_LADDER)
    }

    /// Like [`start_session`](Self::start_session) with an explicit list of versions to try in order.
    pub fn start_session_with(
        &self,
        config: &SessionConfig,
        versions: &[CollectTracingVersion],
    ) -> Result<Session, IpcError> {
        let mut tried = Vec::new();
        for &version in versions.iter().filter(|v| v.can_express(config)) {
            tried.push(version);
            let payload = version.encode(config)?;
            match self.request_open(version.command(), &payload) {
                Ok((conn, reply)) => {
                    let id = reply.session_id()?;
                    conn.set_read_timeout(None)?;
                    return Ok(Session::new(self.clone(), id, version, conn));
                }
                Err(e) if e.is_unknown_command() => continue,
                Err(e) => return Err(e),
            }
        }
        Err(IpcError::NoCollectTracingVersion { tried })
    }
}
