//! Where snapshots go: HTTP (`clrprobe agent`), the terminal (`clrprobe top`).
pub mod files;
pub mod http;
pub mod terminal;
