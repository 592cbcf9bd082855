//! Shared by the ETW-vs-EventPipe tests: a manifest payload builder, the EventPipe-side
//! reference pipeline, ETW record builders and a canonical form of a profile for comparison.
#![allow(dead_code)]

use clr_events::{Guid, RawEvent, decode};
use clrprobe_etw::methods::MethodTable;
use clrprobe_etw::{EtwRecord, kernel, providers};
use clrprobe_pipeline::{EventInput, EventProfiles, EventReport, Kinds};
use clrprobe_profile::{Profile, ProfileBuilder};

pub use clr_events::builder::Payload;

/// One CLR event as both transports carry it.
#[derive(Clone)]
pub struct Ev {
    pub rundown: bool,
    pub id: u16,
    pub version: u8,
    pub tid: u32,
    /// 100 ns units.
    pub time: i64,
    pub payload: Vec<u8>,
    pub stack: Vec<u64>,
}

pub const PID: u32 = 4321;

/// The EventPipe path: RawEvent named by provider string, stacks on the event.
pub fn eventpipe_profile(events: &[Ev], ps: u8, kinds: Kinds) -> (Profile, EventReport) {
    let mut methods = MethodTable::new();
    let mut profiles = EventProfiles::new(kinds);
    for e in events {
        let provider = if e.rundown { clr_events::providers::RUNDOWN } else { clr_events::providers::RUNTIME };
        let raw = RawEvent { provider, event_id: e.id, version: e.version, payload: &e.payload, pointer_size: ps };
        let ev = decode(&raw).unwrap_or_else(|err| panic!("event {} v{}: {err}", e.id, e.version));
        methods.on_clr_event(PID, &ev);
        let time_ns = u64::try_from(e.time).unwrap_or(0) * 100;
        profiles.on_event(EventInput { pid: PID, tid: u64::from(e.tid), time_ns, event: &ev, stack: &e.stack });
    }
    let mut b = ProfileBuilder::new(kinds.sample_types());
    profiles.write_into(&mut b, &mut methods).expect("write_into");
    (b.build(), profiles.report())
}

/// The ETW records for `events`: provider by GUID, and each stack as a ClrStackWalk record
/// (runtime event 82) right after its event, as the CLR fires it with the Stack keyword.
pub fn etw_records(events: &[Ev], ps: u8) -> Vec<EtwRecord> {
    let mut out = Vec::new();
    for e in events {
        let provider: Guid = if e.rundown { providers::RUNDOWN } else { providers::RUNTIME };
        out.push(EtwRecord {
            provider,
            event_id: e.id,
            opcode: 0,
            version: e.version,
            pid: PID,
            tid: e.tid,
            timestamp: e.time,
            payload: e.payload.clone(),
            pointer_size: ps,
            stack: None,
        });
        if !e.stack.is_empty() {
            let mut p = Payload::new(ps).u16(3).u8(0).u8(0).u32(e.stack.len() as u32);
            for &f in &e.stack {
                p = p.ptr(f);
            }
            out.push(EtwRecord {
                provider: providers::RUNTIME,
                event_id: kernel::CLR_STACK_WALK_ID,
                opcode: 82,
                version: 0,
                pid: PID,
                tid: e.tid,
                timestamp: e.time + 1,
                payload: p.buf,
                pointer_size: ps,
                stack: None,
            });
        }
    }
    out
}

/// Every sample as one line: labels, values by sample type, frames root → leaf (sorted).
pub fn canonical(p: &Profile) -> Vec<String> {
    let types: Vec<String> = p.sample_types().iter().map(|t| format!("{}/{}", t.kind, t.unit)).collect();
    let mut lines: Vec<String> = p
        .samples()
        .map(|s| {
            let frames: Vec<String> = p
                .stack(s.stack)
                .unwrap_or(&[])
                .iter()
                .map(|&f| {
                    let f = p.frame(f).expect("frame id");
                    format!("{}|{}|{}|{:#x}|{:?}", f.name.as_str(), f.module.as_str(), f.kind.as_str(), f.address, f.attrs)
                })
                .collect();
            let values: Vec<String> = types.iter().zip(s.values).map(|(t, v)| format!("{t}={v}")).collect();
            format!("{:?} {} :: {}", p.labels(s.labels).expect("labels"), values.join(","), frames.join(" > "))
        })
        .collect();
    lines.sort();
    lines
}

/// Sum of one sample type's values.
pub fn total(p: &Profile, kind: &str) -> i64 {
    p.sample_type_index(kind).map(|i| p.total(i)).unwrap_or(0)
}
