//! pprof (`profile.proto`, usually gzipped as `.pb.gz`): writer and reader.
//!
//! How the model maps onto pprof:
//! * each [`crate::SampleType`] is a `sample_type` (`type` = kind, `unit` = unit); the first one
//!   is the `default_sample_type`;
//! * each frame is one `Location` (id = frame index + 1) with one `Line` pointing at a
//!   `Function` per distinct (name, module); `Function.filename` and a `Mapping` per module
//!   carry the module; `Location.address` the address;
//! * sample stacks are written leaf first, as pprof wants;
//! * labels: numeric `pid` and `tid`, string `process` and `thread`, then the free string and
//!   numeric labels; a timed sample has the numeric label `clrprobe.timestamp_ns`. These keys
//!   are reserved. pprof cannot tell a string label whose value is "" from a numeric label
//!   of 0 (both encode as zeros); the reader takes it as the number;
//! * what pprof has no field for travels in two profile comments that other tools just show
//!   as text: `clrprobe:frames <json>` (frame kinds and attributes, by location id) and
//!   `clrprobe:markers <json>` (markers).

mod proto;
mod read;
mod write;

pub use read::{MAX_DECODED, MAX_INFLATED, decode, read, read_file};
pub use write::{encode, to_writer, write_file};

pub(crate) const KEY_PID: &str = "pid";
pub(crate) const KEY_TID: &str = "tid";
pub(crate) const KEY_PROCESS: &str = "process";
pub(crate) const KEY_THREAD: &str = "thread";
pub(crate) const KEY_TIMESTAMP: &str = "clrprobe.timestamp_ns";
pub(crate) const COMMENT_FRAMES: &str = "clrprobe:frames ";
pub(crate) const COMMENT_MARKERS: &str = "clrprobe:markers ";

/// Frame details pprof has no field for, keyed by location id.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct FrameExtra {
    pub loc: u64,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attrs: Vec<(String, String)>,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct MarkerJson {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data: Vec<(String, String)>,
}
