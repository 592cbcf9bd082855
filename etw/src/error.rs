//! Errors of the ETW source, each naming its cause and, where there is one, the fix.

use thiserror::Error;

use crate::ipcblock::CountersError;

#[derive(Debug, Error)]
pub enum EtwError {
    #[error(
        "starting the ETW session {session} was denied: the kernel logger and the CLR rundown need an elevated (Administrator) prompt; run clrprobe from an Administrator terminal"
    )]
    NotElevated { session: String },
    #[error(
        "an ETW session named {session} already exists (a previous clrprobe still running or killed): stop it with `logman stop {session} -ets`"
    )]
    SessionExists { session: String },
    #[error("ETW session {session} failed: {reason}")]
    Session { session: String, reason: String },
    #[error("process {pid} does not exist (or is not visible to this user)")]
    NoSuchProcess { pid: u32 },
    #[error("the ETW callback thread panicked; the recording is lost")]
    CallbackPanicked,
    #[error("building the profile: {0}")]
    Profile(#[from] clrprobe_profile::ProfileError),
    #[error("reading the CLR counters: {0}")]
    Counters(#[from] CountersError),
}
