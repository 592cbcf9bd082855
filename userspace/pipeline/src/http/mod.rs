//! HTTP client requests from the BCL's own EventSources, and a generic summary of any
//! EventSource's events.
//!
//! `System.Net.Http` reports each outgoing request (RequestStart … RequestStop, with headers and
//! content phases in between); `System.Net.NameResolution`, `System.Net.Sockets` and
//! `System.Net.Security` report DNS lookups, connects and TLS handshakes. With the
//! `System.Threading.Tasks.TplEventSource` keyword `TasksFlowActivityIds` (0x80) the runtime gives
//! every Start event a new activity id whose parent (the event's related activity id) is the
//! activity current at that moment, and that activity id flows through `await`s: walking the
//! parents of any event's activity id leads to the request it belongs to. Connection set-up that
//! ran outside the request's flow is tied to the request through the connection id
//! (ConnectionEstablished → RequestHeadersStart).
//!
//! [`HttpBuilder`] takes events as any source delivers them ([`NetEvent`]) and builds one
//! [`HttpRequest`] per request; [`host_path_stats`] and [`otel_duration_histograms`] summarise
//! them; [`EventSourceStats`] counts any provider's events and summarises their numeric fields.
mod builder;
mod event;
mod generic;
mod request;
mod stats;

pub use builder::{HttpBuilder, socket_address};
pub use event::{NetEvent, providers};
pub use generic::{EventSourceStats, EventStats, FieldStats};
pub use request::{HttpRequest, Phases, SetupKind, SetupSpan};
pub use stats::{
    HostPathStats, OTEL_DURATION_BOUNDS_S, OtelHistogram, host_path_stats,
    otel_duration_histograms, percentile,
};
