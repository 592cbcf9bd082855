//! Gathers what a recording needs from the runtime's events: JIT method ranges (to name code
//! the perf map does not cover, and all JIT code on runtimes without perf-map switching).
use clr_events::{ClrEvent, decode, methods::MethodInfo};
use clrprobe_eventpipe::nettrace::EventRef;

/// A method's native code range, from MethodLoadVerbose or the rundown's MethodDC*Verbose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitMethod {
    pub start: u64,
    pub size: u32,
    /// `Namespace.Type::Method`.
    pub name: String,
    /// True when it came from the rundown (present before recording started).
    pub from_rundown: bool,
}

/// Per-process collector of runtime events.
#[derive(Debug)]
pub struct ClrCollector {
    pub pid: u32,
    pub jit_methods: Vec<JitMethod>,
    pub events: u64,
    pub decode_errors: u64,
}

impl ClrCollector {
    pub fn new(pid: u32) -> Self {
        Self { pid, jit_methods: Vec::new(), events: 0, decode_errors: 0 }
    }

    pub fn on_event(&mut self, ev: &EventRef<'_>, pointer_size: u32) {
        self.events += 1;
        let mut raw = ev.raw_event();
        raw.pointer_size = pointer_size as u8;
        match decode(&raw) {
            Ok(ClrEvent::MethodLoadVerbose(m)) => self.method(&m, false),
            Ok(ClrEvent::MethodDcStartVerbose(m) | ClrEvent::MethodDcEndVerbose(m)) => self.method(&m, true),
            Ok(_) => {}
            Err(_) => self.decode_errors += 1,
        }
    }

    fn method(&mut self, m: &MethodInfo<'_>, from_rundown: bool) {
        if m.start_address == 0 || m.size == 0 {
            return;
        }
        let ns = m.namespace.map(|s| s.to_string_lossy()).unwrap_or_default();
        let name = m.name.map(|s| s.to_string_lossy()).unwrap_or_default();
        let full = if ns.is_empty() { name } else { format!("{ns}::{name}") };
        self.jit_methods.push(JitMethod { start: m.start_address, size: m.size, name: full, from_rundown });
    }
}
