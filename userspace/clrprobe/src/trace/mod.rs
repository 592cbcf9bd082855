//! `clrprobe trace`: records an EventPipe session of a process to a `.nettrace` file (the
//! runtime's own bytes, readable by PerfView and TraceEvent), and `--dump` prints a file's
//! events decoded, as text or JSON lines.
mod clock;
mod dump;
mod line_heads;
mod stack_ids;
mod record;
mod speedscope;

pub use dump::{DumpStats, dump, dump_from};
pub use record::{TraceArgs, TraceError, TraceSummary, record_to_file};
pub use speedscope::to_speedscope;
