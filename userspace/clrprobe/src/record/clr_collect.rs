//! Gathers what a recording needs from the runtime's events: JIT method ranges (to name code
//! the perf map does not cover, and all JIT code on runtimes without perf-map switching), and
//! the allocation / exception / contention samples of the event pipeline.
use std::{collections::HashSet, sync::Arc};

use clr_events::{ClrEvent, decode, methods::MethodInfo};
use clrprobe_eventpipe::nettrace::EventRef;
use clrprobe_pipeline::{EventInput, EventProfiles, Kinds};

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
    pub profiles: EventProfiles,
    /// Event stacks not yet handed to the symbolizer (taken by the recording loop).
    pub new_stacks: Vec<Arc<[u64]>>,
    seen_stacks: HashSet<Arc<[u64]>>,
    pub events: u64,
    pub decode_errors: u64,
    /// HTTP requests and `--providers` EventSource summaries (None: neither asked for).
    pub net: Option<crate::http::NetCollector>,
}

impl ClrCollector {
    pub fn new(pid: u32, kinds: Kinds) -> Self {
        Self {
            pid,
            jit_methods: Vec::new(),
            profiles: EventProfiles::new(kinds),
            new_stacks: Vec::new(),
            seen_stacks: HashSet::new(),
            events: 0,
            decode_errors: 0,
            net: None,
        }
    }

    pub fn on_event(&mut self, ev: &EventRef<'_>, pointer_size: u32) {
        self.events += 1;
        if let Some(net) = self.net.as_mut()
            && net.on_event(ev)
        {
            self.note_stack(ev.stack());
        }
        let mut raw = ev.raw_event();
        raw.pointer_size = pointer_size as u8;
        let decoded = match decode(&raw) {
            Ok(d) => d,
            Err(_) => {
                self.decode_errors += 1;
                return;
            }
        };
        match &decoded {
            ClrEvent::MethodLoadVerbose(m) => self.method(m, false),
            ClrEvent::MethodDcStartVerbose(m) | ClrEvent::MethodDcEndVerbose(m) => self.method(m, true),
            ClrEvent::Unknown => return,
            _ => {}
        }
        let stack = ev.stack();
        let before = self.profiles.pending().len();
        self.profiles.on_event(EventInput {
            pid: self.pid,
            tid: ev.thread_id(),
            time_ns: ev.time_ns().max(0) as u64,
            event: &decoded,
            stack,
        });
        if self.profiles.pending().len() != before {
            self.note_stack(stack);
        }
    }

    /// Hands a new event stack to the symbolizer (through `new_stacks`).
    fn note_stack(&mut self, stack: &[u64]) {
        if stack.is_empty() {
            return;
        }
        let s: Arc<[u64]> = Arc::from(stack);
        if self.seen_stacks.insert(s.clone()) {
            self.new_stacks.push(s);
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
