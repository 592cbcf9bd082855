//! Feeding EventPipe events of the networking sources (and of any provider asked for with
//! `--providers`) to the request builder and the generic EventSource summary.
use std::{collections::HashSet, path::Path};

use clr_events::decode_fields;
use clrprobe_eventpipe::nettrace::{EventRef, NetTraceError, NetTraceReader};
use clrprobe_pipeline::http::{EventSourceStats, HttpBuilder, HttpRequest, NetEvent, providers};

/// Per-process collector of EventSource events.
#[derive(Debug, Default)]
pub struct NetCollector {
    /// Builds requests when `--http` is on.
    pub http: Option<HttpBuilder>,
    /// Summarises the events of these providers (named with `--providers`).
    pub generic: Option<(HashSet<String>, EventSourceStats)>,
    /// Events whose fields could not be decoded.
    pub decode_errors: u64,
}

impl NetCollector {
    pub fn new(http: bool, generic_providers: &[String]) -> Self {
        Self {
            http: http.then(HttpBuilder::new),
            generic: (!generic_providers.is_empty()).then(|| {
                (
                    generic_providers.iter().cloned().collect(),
                    EventSourceStats::default(),
                )
            }),
            decode_errors: 0,
        }
    }

    /// True when neither part is on.
    pub fn is_off(&self) -> bool {
        self.http.is_none() && self.generic.is_none()
    }

    /// Takes one event; returns true when it opened a request (its stack should be named).
    pub fn on_event(&mut self, ev: &EventRef<'_>) -> bool {
        let md = ev.metadata();
        let for_http = self.http.is_some() && providers::NET.contains(&md.provider.as_str());
        let for_generic = self
            .generic
            .as_ref()
            .is_some_and(|(names, _)| names.contains(&md.provider));
        if !for_http && !for_generic {
            return false;
        }
        let fields = match md.schema.as_ref() {
            Some(schema) => match decode_fields(schema, ev.payload()) {
                Ok(f) => f,
                Err(_) => {
                    self.decode_errors += 1;
                    return false;
                }
            },
            None => Vec::new(),
        };
        if let Some((_, stats)) = self.generic.as_mut().filter(|_| for_generic) {
            let name = if md.name.is_empty() {
                format!("#{}", md.event_id)
            } else {
                md.name.clone()
            };
            stats.add(&md.provider, &name, &fields);
        }
        let Some(b) = self.http.as_mut().filter(|_| for_http) else {
            return false;
        };
        let before = b.request_count();
        b.on_event(&NetEvent {
            provider: &md.provider,
            name: &md.name,
            event_id: md.event_id,
            opcode: md.opcode,
            tid: ev.thread_id(),
            time_ns: ev.time_ns().max(0) as u64,
            activity_id: ev.activity_id(),
            related_activity_id: ev.related_activity_id(),
            fields: &fields,
            stack: ev.stack(),
        });
        b.request_count() != before
    }

    /// The requests and the generic summary.
    pub fn finish(self) -> NetOutcome {
        let http_on = self.http.is_some();
        let (events, unmatched, without_activity, dropped) = self
            .http
            .as_ref()
            .map_or((0, 0, 0, 0), |b| (b.events, b.unmatched, b.without_activity, b.dropped));
        NetOutcome {
            requests: self.http.map(HttpBuilder::finish).unwrap_or_default(),
            generic: self.generic.map(|(_, s)| s.finish()),
            events,
            unmatched,
            without_activity,
            dropped,
            http_on,
            decode_errors: self.decode_errors,
        }
    }
}

/// What a [`NetCollector`] produced.
#[derive(Debug, Default)]
pub struct NetOutcome {
    pub requests: Vec<HttpRequest>,
    pub generic: Option<EventSourceStats>,
    pub events: u64,
    pub unmatched: u64,
    pub without_activity: u64,
    /// Requests past the builder's limit, not kept.
    pub dropped: u64,
    /// `--http` was on (false: only `--providers`).
    pub http_on: bool,
    pub decode_errors: u64,
}

/// Builds the requests (and the summary of `generic_providers`) of a recorded `.nettrace` file.
pub fn replay(path: &Path, generic_providers: &[String]) -> Result<NetOutcome, NetTraceError> {
    let file = std::fs::File::open(path).map_err(NetTraceError::from)?;
    let mut reader = NetTraceReader::new(std::io::BufReader::with_capacity(1 << 20, file))?;
    let mut c = NetCollector::new(true, generic_providers);
    while let Some(ev) = reader.next_event()? {
        c.on_event(&ev);
    }
    Ok(c.finish())
}
