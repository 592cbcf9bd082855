//! pprof (`profile.proto`, usually gzipped as `.pb.gz`): writer and reader.
//!
//! How the model maps onto pprof:
//! * each [`crate::SampleType`] is a `sample_type` (`type` = kind, `unit` = unit); the first one
//!   is the `default_sample_type`;
//! * each frame is one `Location` (id = frame index + 1) with its address and mapping (start,
//!   limit, offset, path, GNU build id) and one `Line` pointing at a `Function` per distinct
//!   (name, module) whose `filename` is the module; how frame kinds travel in these standard
//!   fields is described in [`kinds`] — the file has no clrprobe-specific comments, so files
//!   rewritten by `go tool pprof -proto` or merged by a backend read back the same;
//! * sample stacks are written leaf first, as pprof wants;
//! * labels: numeric `pid` and `tid`, string `process_name` and `thread_name`, then the free
//!   string and numeric labels; a timed sample has the numeric label `clrprobe.timestamp_ns`
//!   (unit nanoseconds). These keys are reserved. pprof cannot tell a string label whose value
//!   is "" from a numeric label of 0 (both encode as zeros); the reader takes it as the number;
//! * frame attributes other than `unnamed` (a location without lines) and markers are not
//!   written: markers go to the companion events file (see [`go`]).
//!
//! [`go`] writes one file per kind with the sample types Go's runtime uses (`samples/count` +
//! `cpu/nanoseconds`, `alloc_objects/count` + `alloc_space/bytes`, ...) and reads them back.

pub mod go;
mod kinds;
mod proto;
mod read;
mod write;

pub use read::{MAX_DECODED, MAX_INFLATED, decode, read, read_file};
pub use write::{encode, to_writer, write_file};

pub(crate) const KEY_PID: &str = "pid";
pub(crate) const KEY_TID: &str = "tid";
pub(crate) const KEY_PROCESS: &str = "process_name";
pub(crate) const KEY_THREAD: &str = "thread_name";
/// Older clrprobe files.
pub(crate) const KEY_PROCESS_OLD: &str = "process";
pub(crate) const KEY_THREAD_OLD: &str = "thread";
pub(crate) const KEY_TIMESTAMP: &str = "clrprobe.timestamp_ns";
