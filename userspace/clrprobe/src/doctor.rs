//! Capability probe (`clrprobe doctor`), run before every recording and printed on failure.
//!
//! Each check reads the machine as it is (files under /proc and /sys, and real syscalls where a
//! file cannot tell), and every missing piece carries a one-line fix.
use std::fmt;

use serde::Serialize;

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Recording works without it, with less data.
    Warn,
    /// Recording with BPF cannot work without it.
    Missing,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    /// One line telling how to fix it; empty when ok.
    pub fix: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub checks: Vec<Check>,
}

impl Report {
    /// Runs every check on this machine.
    pub fn probe() -> Self {
        Self { checks: platform::checks() }
    }

    /// True when something needed for BPF recording is missing.
    pub fn has_missing(&self) -> bool {
        self.checks.iter().any(|c| c.status == Status::Missing)
    }

    pub fn get(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.checks {
            let tag = match c.status {
                Status::Ok => "ok     ",
                Status::Warn => "warn   ",
                Status::Missing => "MISSING",
            };
            writeln!(f, "{tag} {:<22} {}", c.name, c.detail)?;
            if !c.fix.is_empty() {
                writeln!(f, "        {:<22} fix: {}", "", c.fix)?;
            }
        }
        if self.has_missing() {
            writeln!(f, "clrprobe cannot record with BPF until the MISSING items are fixed.")?;
        }
        Ok(())
    }
}

fn check(name: &'static str, status: Status, detail: impl Into<String>, fix: &str) -> Check {
    let fix = if status == Status::Ok { String::new() } else { fix.to_string() };
    Check { name, status, detail: detail.into(), fix }
}

#[cfg(target_os = "linux")]
#[path = "doctor_linux.rs"]
mod platform;

#[cfg(not(target_os = "linux"))]
mod platform {
    pub(super) fn checks() -> Vec<super::Check> {
        vec![super::check(
            "platform",
            super::Status::Missing,
            "clrprobe's BPF recorder needs Linux",
            "on Windows use the ETW source (clrprobe record runs it there)",
        )]
    }
}
