//! Where snapshots go: HTTP (`clrprobe agent`).
pub mod http;
