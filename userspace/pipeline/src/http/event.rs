//! One EventSource event as the HTTP builder takes it: decoded fields plus the header facts
//! (thread, time, activity ids, stack) every transport has.
use clr_events::Value;

/// Provider names (EventSource names) the `--http` kind enables.
pub mod providers {
    pub const HTTP: &str = "System.Net.Http";
    pub const NAME_RESOLUTION: &str = "System.Net.NameResolution";
    pub const SOCKETS: &str = "System.Net.Sockets";
    pub const SECURITY: &str = "System.Net.Security";
    /// Enabled with keyword [`TASKS_FLOW_ACTIVITY_IDS`] only: the runtime then assigns activity
    /// ids to Start/Stop events and flows them across `await`s.
    pub const TPL: &str = "System.Threading.Tasks.TplEventSource";
    pub const TASKS_FLOW_ACTIVITY_IDS: u64 = 0x80;
    /// The four networking sources.
    pub const NET: [&str; 4] = [HTTP, NAME_RESOLUTION, SOCKETS, SECURITY];
}

/// One decoded EventSource event.
#[derive(Debug, Clone, Copy)]
pub struct NetEvent<'a> {
    pub provider: &'a str,
    /// The event's name from its metadata (`RequestStart`); may be empty in old traces.
    pub name: &'a str,
    pub event_id: u32,
    /// The event's opcode (1 Start, 2 Stop; 0 when unknown).
    pub opcode: u8,
    /// OS thread id.
    pub tid: u64,
    /// Nanoseconds on the source's clock.
    pub time_ns: u64,
    pub activity_id: [u8; 16],
    pub related_activity_id: [u8; 16],
    /// Payload fields by name, in order.
    pub fields: &'a [(String, Value)],
    /// Instruction pointers, leaf first (empty when none).
    pub stack: &'a [u64],
}

impl<'a> NetEvent<'a> {
    pub fn field(&self, name: &str) -> Option<&'a Value> {
        self.fields
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    pub fn str_field(&self, name: &str) -> Option<&'a str> {
        self.field(name).and_then(Value::as_str)
    }

    pub fn int_field(&self, name: &str) -> Option<i64> {
        self.field(name).and_then(Value::as_i64)
    }

    pub fn f64_field(&self, name: &str) -> Option<f64> {
        match self.field(name)? {
            Value::F64(v) => Some(*v),
            Value::F32(v) => Some(f64::from(*v)),
            v => v.as_i64().map(|i| i as f64),
        }
    }

    /// A Start event (by opcode, or by name when the opcode is missing).
    pub fn is_start(&self) -> bool {
        self.opcode == 1 || self.event_name().ends_with("Start")
    }

    /// The event name, or a known name for the id when the metadata has none.
    pub fn event_name(&self) -> &'a str {
        if !self.name.is_empty() {
            return self.name;
        }
        known_name(self.provider, self.event_id).unwrap_or("")
    }
}

/// Names of the networking events by id (.NET 5–8 sources), for traces whose metadata lacks them.
fn known_name(provider: &str, id: u32) -> Option<&'static str> {
    const HTTP: [&str; 16] = [
        "RequestStart",
        "RequestStop",
        "RequestFailed",
        "ConnectionEstablished",
        "ConnectionClosed",
        "RequestLeftQueue",
        "RequestHeadersStart",
        "RequestHeadersStop",
        "RequestContentStart",
        "RequestContentStop",
        "ResponseHeadersStart",
        "ResponseHeadersStop",
        "ResponseContentStart",
        "ResponseContentStop",
        "RequestFailedDetailed",
        "Redirect",
    ];
    const DNS: [&str; 3] = ["ResolutionStart", "ResolutionStop", "ResolutionFailed"];
    const SOCKETS: [&str; 6] = [
        "ConnectStart",
        "ConnectStop",
        "ConnectFailed",
        "AcceptStart",
        "AcceptStop",
        "AcceptFailed",
    ];
    const SECURITY: [&str; 3] = ["HandshakeStart", "HandshakeStop", "HandshakeFailed"];
    let table: &[&str] = match provider {
        providers::HTTP => &HTTP,
        providers::NAME_RESOLUTION => &DNS,
        providers::SOCKETS => &SOCKETS,
        providers::SECURITY => &SECURITY,
        _ => return None,
    };
    table
        .get(usize::try_from(id).ok()?.checked_sub(1)?)
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_by_id_when_metadata_has_none() {
        let ev = NetEvent {
            provider: providers::HTTP,
            name: "",
            event_id: 12,
            opcode: 0,
            tid: 1,
            time_ns: 0,
            activity_id: [0; 16],
            related_activity_id: [0; 16],
            fields: &[],
            stack: &[],
        };
        assert_eq!(ev.event_name(), "ResponseHeadersStop");
        assert_eq!(NetEvent { event_id: 0, ..ev }.event_name(), "");
        assert_eq!(
            NetEvent {
                provider: providers::SOCKETS,
                event_id: 1,
                ..ev
            }
            .event_name(),
            "ConnectStart"
        );
        assert_eq!(NetEvent { name: "X", ..ev }.event_name(), "X");
    }
}
