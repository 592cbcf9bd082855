//! Composes records into a profile: stack correlation → CLR decoding → method table and event
//! pipeline; kernel samples → CPU samples; image loads → native module ranges. Platform-neutral:
//! the Windows session only feeds it records.

use std::collections::HashMap;

use clr_events::decode;
use clrprobe_pipeline::{EventProfiles, EventReport, FrameSource, Kinds};
use clrprobe_profile::{LabelSet, Period, Profile, ProfileBuilder, ProfileError, SampleType, kinds, units};

use crate::kernel::{self, ImageLoad, SampledProfile};
use crate::methods::MethodTable;
use crate::providers;
use crate::record::EtwRecord;
use crate::stackwalk::{Correlated, CorrelatorConfig, CorrelatorStats, StackCorrelator};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filetime_converts_to_unix_nanoseconds() {
        // 2020-01-01T00:00:00Z is FILETIME 132_223_104_000_000_000.
        assert_eq!(filetime_to_unix_ns(132_223_104_000_000_000), 1_577_836_800_000_000_000);
        assert_eq!(filetime_to_unix_ns(0), 0);
    }
}

/// Which correlator a record goes to: 0 runtime (and private), 1 rundown, 2 kernel.
fn stream(rec: &EtwRecord) -> usize {
    if rec.provider == providers::RUNDOWN {
        1
    } else if rec.is_clr() {
        0
    } else {
        2
    }
}

/// What to record: kernel CPU samples and/or the CLR event kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordKinds {
    pub cpu: bool,
    pub events: Kinds,
}

impl RecordKinds {
    pub const ALL: RecordKinds = RecordKinds { cpu: true, events: Kinds::ALL };

    pub fn sample_types(&self) -> Vec<SampleType> {
        let mut v = Vec::new();
        if self.cpu {
            v.push(SampleType::new(kinds::CPU, units::SAMPLES));
        }
        v.extend(self.events.sample_types());
        v
    }
}

/// Counts of what was seen and dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CollectorStats {
    pub records: u64,
    pub clr_events: u64,
    /// CLR payloads that did not decode (logged at debug level).
    pub decode_errors: u64,
    pub cpu_samples: u64,
    /// Samples whose process could not be told (no pid in the header nor a stack).
    pub samples_without_process: u64,
    pub images: u64,
    pub stacks: CorrelatorStats,
}

pub struct Collector {
    kinds: RecordKinds,
    pid: Option<u32>,
    /// One correlator per ETW session stream (runtime, rundown, kernel): each session's events
    /// arrive in their own order, so one stream's time must not release another's events.
    correlators: [StackCorrelator; 3],
    /// Public so a caller can name frames of its own stacks too.
    pub methods: MethodTable,
    events: EventProfiles,
    cpu: HashMap<(u32, u32, Vec<u64>), i64>,
    /// Sampling interval, for the profile's period.
    pub sample_interval_ns: u64,
    stats: CollectorStats,
    /// First and last header timestamps (FILETIME) of the wanted events.
    span: Option<(i64, i64)>,
}

/// FILETIME (100 ns since 1601) of the Unix epoch.
const UNIX_EPOCH_FILETIME: i64 = 116_444_736_000_000_000;

/// Nanoseconds since the Unix epoch for a FILETIME (0 before 1970).
pub fn filetime_to_unix_ns(ft: i64) -> u64 {
    u64::try_from(ft.saturating_sub(UNIX_EPOCH_FILETIME)).unwrap_or(0).saturating_mul(100)
}

impl Collector {
    /// `pid`: keep only this process's events (`None`: all processes but the idle process 0).
    pub fn new(kinds: RecordKinds, pid: Option<u32>, config: CorrelatorConfig) -> Self {
        Collector {
            kinds,
            pid,
            correlators: [StackCorrelator::new(config), StackCorrelator::new(config), StackCorrelator::new(config)],
            methods: MethodTable::new(),
            events: EventProfiles::new(kinds.events),
            cpu: HashMap::new(),
            sample_interval_ns: 1_000_000,
            stats: CollectorStats::default(),
            span: None,
        }
    }

    pub fn push(&mut self, rec: EtwRecord) {
        self.stats.records += 1;
        let stream = stream(&rec);
        for c in self.correlators[stream].push(rec) {
            self.handle(c);
        }
    }

    fn wanted(&self, pid: u32) -> bool {
        match self.pid {
            Some(p) => p == pid,
            None => pid != 0 && pid != u32::MAX,
        }
    }

    fn seen(&mut self, ts: i64) {
        self.span = Some(match self.span {
            Some((a, b)) => (a.min(ts), b.max(ts)),
            None => (ts, ts),
        });
    }

    fn handle(&mut self, c: Correlated) {
        let rec = &c.record;
        if let Some(raw) = rec.raw_event() {
            if !self.wanted(rec.pid) {
                return;
            }
            self.stats.clr_events += 1;
            self.seen(rec.timestamp);
            match decode(&raw) {
                Ok(ev) => {
                    self.methods.on_clr_event(rec.pid, &ev);
                    self.events.on_event(rec.event_input(&ev, &c.stack));
                }
                Err(e) => {
                    self.stats.decode_errors += 1;
                    log::debug!("{} event {} v{}: {e}", raw.provider, raw.event_id, raw.version);
                }
            }
        } else if rec.provider == providers::KERNEL_PERF_INFO && rec.opcode == kernel::OPCODE_SAMPLED_PROFILE {
            if !self.kinds.cpu {
                return;
            }
            let Ok(s) = SampledProfile::decode(&rec.payload, rec.pointer_size) else {
                self.stats.decode_errors += 1;
                return;
            };
            let pid = if rec.pid != 0 && rec.pid != u32::MAX { Some(rec.pid) } else { c.stack_process };
            let Some(pid) = pid else {
                self.stats.samples_without_process += 1;
                return;
            };
            if !self.wanted(pid) {
                return;
            }
            self.stats.cpu_samples += 1;
            self.seen(rec.timestamp);
            let stack = if c.stack.is_empty() { vec![s.instruction_pointer] } else { c.stack };
            *self.cpu.entry((pid, s.thread_id, stack)).or_insert(0) += i64::from(s.count.max(1));
        } else if rec.provider == providers::KERNEL_IMAGE
            && matches!(rec.opcode, kernel::OPCODE_IMAGE_LOAD | kernel::OPCODE_IMAGE_DC_START | kernel::OPCODE_IMAGE_DC_END)
        {
            match ImageLoad::decode(&rec.payload, rec.pointer_size) {
                Ok(img) => {
                    self.stats.images += 1;
                    self.methods.add_image(&img);
                }
                Err(_) => self.stats.decode_errors += 1,
            }
        }
    }

    /// Releases every held event; call before [`Collector::finish`] when reusing stats.
    pub fn flush(&mut self) {
        for i in 0..self.correlators.len() {
            for c in self.correlators[i].finish() {
                self.handle(c);
            }
        }
    }

    pub fn stats(&self) -> CollectorStats {
        let mut stacks = CorrelatorStats::default();
        for c in &self.correlators {
            stacks.orphan_stacks += c.stats.orphan_stacks;
            stacks.bad_stacks += c.stats.bad_stacks;
        }
        CollectorStats { stacks, ..self.stats }
    }

    /// The profile (CPU samples first, then the event kinds) and the event report.
    pub fn finish(mut self) -> Result<(Profile, EventReport, CollectorStats), ProfileError> {
        self.flush();
        let stats = self.stats();
        let types = self.kinds.sample_types();
        let mut b = ProfileBuilder::new(types.clone());
        if let Some((first, last)) = self.span {
            b.set_start_time_ns(filetime_to_unix_ns(first));
            b.set_duration_ns(u64::try_from(last.saturating_sub(first)).unwrap_or(0).saturating_mul(100));
        }
        if self.kinds.cpu {
            b.set_period(Period {
                sample_type: SampleType::new(kinds::CPU, units::NANOSECONDS),
                value: i64::try_from(self.sample_interval_ns).unwrap_or(i64::MAX),
            });
            let col = types.iter().position(|t| t.kind == kinds::CPU).unwrap_or(0);
            let mut cpu: Vec<_> = self.cpu.iter().collect();
            cpu.sort();
            for ((pid, tid, stack), &n) in cpu {
                let frames = self.methods.frames(*pid, stack);
                let mut ids = Vec::with_capacity(frames.len());
                for f in frames {
                    ids.push(b.intern_frame(f)?);
                }
                let stack = b.intern_stack(&ids)?;
                let labels = b.intern_labels(LabelSet::thread(*pid, *tid))?;
                let mut values = vec![0i64; types.len()];
                values[col] = n;
                b.add_sample(stack, &values, labels)?;
            }
        }
        self.events.write_into(&mut b, &mut self.methods)?;
        Ok((b.build(), self.events.report(), stats))
    }
}
