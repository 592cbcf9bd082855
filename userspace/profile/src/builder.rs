//! [`ProfileBuilder`]: interning, aggregation and merging.

use std::sync::Arc;

use crate::error::ProfileError;
use crate::hash::FastMap;
use crate::strings::StringTable;
use crate::model::{
    Frame, FrameId, LabelSet, LabelSetId, Marker, Period, Profile, SampleRec, SampleType, StackId,
};

/// Builds a [`Profile`].
///
/// Samples added with [`ProfileBuilder::add_sample`] are aggregated: a second sample with the
/// same stack and label set adds its values to the first. Samples added with
/// [`ProfileBuilder::add_timed_sample`] keep their timestamp and are never aggregated.
#[derive(Debug, Default)]
pub struct ProfileBuilder {
    p: Profile,
    frame_ids: FastMap<Frame, FrameId>,
    stack_ids: FastMap<Arc<[FrameId]>, StackId>,
    label_ids: FastMap<LabelSet, LabelSetId>,
    aggregated: FastMap<(StackId, LabelSetId), u32>,
    strings: StringTable,
}

fn next_id(len: usize, what: &'static str) -> Result<u32, ProfileError> {
    u32::try_from(len).ok().filter(|&i| i < u32::MAX).ok_or(ProfileError::TooMany(what))
}

impl ProfileBuilder {
    pub fn new(sample_types: Vec<SampleType>) -> Self {
        ProfileBuilder { p: Profile { sample_types, ..Profile::default() }, ..Default::default() }
    }

    /// Continue building on an existing profile (e.g. to merge more into it).
    pub fn from_profile(mut p: Profile) -> Self {
        let mut strings = StringTable::default();
        for f in &mut p.frames {
            strings.share_frame(f);
        }
        for l in &mut p.label_sets {
            strings.share_labels(l);
        }
        let mut b = ProfileBuilder {
            frame_ids: p.frames.iter().enumerate().map(|(i, f)| (f.clone(), FrameId(i as u32))).collect(),
            stack_ids: p.stacks.iter().enumerate().map(|(i, s)| (s.clone(), StackId(i as u32))).collect(),
            label_ids: p.label_sets.iter().enumerate().map(|(i, l)| (l.clone(), LabelSetId(i as u32))).collect(),
            strings,
            ..ProfileBuilder::default()
        };
        for (i, s) in p.samples.iter().enumerate() {
            if s.timestamp_ns.is_none() {
                b.aggregated.entry((s.stack, s.labels)).or_insert(i as u32);
            }
        }
        b.p = p;
        b
    }

    /// Distinct strings interned so far (frame names, modules, attributes, labels).
    pub fn string_count(&self) -> usize {
        self.strings.len()
    }

    /// The frames interned so far.
    pub fn frames(&self) -> &[Frame] {
        &self.p.frames
    }

    /// (frames, stacks, label sets, samples) held so far.
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        (self.p.frames.len(), self.p.stacks.len(), self.p.label_sets.len(), self.p.samples.len())
    }

    pub fn sample_types(&self) -> &[SampleType] {
        &self.p.sample_types
    }

    pub fn set_period(&mut self, period: Period) {
        self.p.period = Some(period);
    }

    /// Recording start, nanoseconds since the Unix epoch.
    pub fn set_start_time_ns(&mut self, ns: u64) {
        self.p.start_time_ns = ns;
    }

    pub fn set_duration_ns(&mut self, ns: u64) {
        self.p.duration_ns = ns;
    }

    pub fn add_comment(&mut self, comment: impl Into<String>) {
        self.p.comments.push(comment.into());
    }

    pub fn add_marker(&mut self, marker: Marker) {
        self.p.markers.push(marker);
    }

    pub fn intern_frame(&mut self, frame: Frame) -> Result<FrameId, ProfileError> {
        if let Some(&id) = self.frame_ids.get(&frame) {
            return Ok(id);
        }
        let id = FrameId(next_id(self.p.frames.len(), "frames")?);
        let mut frame = frame;
        self.strings.share_frame(&mut frame);
        self.p.frames.push(frame.clone());
        self.frame_ids.insert(frame, id);
        Ok(id)
    }

    /// Intern a stack given **root first**. Every id must come from this builder.
    pub fn intern_stack(&mut self, frames: &[FrameId]) -> Result<StackId, ProfileError> {
        if let Some(&id) = self.stack_ids.get(frames) {
            return Ok(id);
        }
        if let Some(bad) = frames.iter().find(|f| f.index() >= self.p.frames.len()) {
            return Err(ProfileError::UnknownId { what: "frame", id: bad.0 });
        }
        let id = StackId(next_id(self.p.stacks.len(), "stacks")?);
        let stack: Arc<[FrameId]> = Arc::from(frames);
        self.p.stacks.push(stack.clone());
        self.stack_ids.insert(stack, id);
        Ok(id)
    }

    pub fn intern_labels(&mut self, labels: LabelSet) -> Result<LabelSetId, ProfileError> {
        if let Some(&id) = self.label_ids.get(&labels) {
            return Ok(id);
        }
        let id = LabelSetId(next_id(self.p.label_sets.len(), "label sets")?);
        let mut labels = labels;
        self.strings.share_labels(&mut labels);
        self.p.label_sets.push(labels.clone());
        self.label_ids.insert(labels, id);
        Ok(id)
    }

    fn check(&self, stack: StackId, labels: LabelSetId, values: &[i64]) -> Result<(), ProfileError> {
        if values.len() != self.p.sample_types.len() {
            return Err(ProfileError::ValueCount { expected: self.p.sample_types.len(), got: values.len() });
        }
        if stack.index() >= self.p.stacks.len() {
            return Err(ProfileError::UnknownId { what: "stack", id: stack.0 });
        }
        if labels.index() >= self.p.label_sets.len() {
            return Err(ProfileError::UnknownId { what: "label set", id: labels.0 });
        }
        Ok(())
    }

    fn push(&mut self, rec: SampleRec, values: &[i64]) -> Result<u32, ProfileError> {
        let idx = next_id(self.p.samples.len(), "samples")?;
        self.p.samples.push(rec);
        self.p.values.extend_from_slice(values);
        Ok(idx)
    }

    /// Add (or aggregate into) the sample for `(stack, labels)`; `values` has one entry per
    /// sample type.
    pub fn add_sample(&mut self, stack: StackId, values: &[i64], labels: LabelSetId) -> Result<(), ProfileError> {
        self.check(stack, labels, values)?;
        if let Some(&i) = self.aggregated.get(&(stack, labels)) {
            let n = values.len();
            let start = i as usize * n;
            for (acc, v) in self.p.values[start..start + n].iter_mut().zip(values) {
                *acc = acc.saturating_add(*v);
            }
            return Ok(());
        }
        let idx = self.push(SampleRec { stack, labels, timestamp_ns: None }, values)?;
        self.aggregated.insert((stack, labels), idx);
        Ok(())
    }

    /// Add a sample that keeps its timestamp (nanoseconds since the profile start).
    pub fn add_timed_sample(
        &mut self,
        stack: StackId,
        values: &[i64],
        labels: LabelSetId,
        timestamp_ns: u64,
    ) -> Result<(), ProfileError> {
        self.check(stack, labels, values)?;
        self.push(SampleRec { stack, labels, timestamp_ns: Some(timestamp_ns) }, values)?;
        Ok(())
    }

    /// Merge `other` into this profile. Sample types are matched by kind (units must agree);
    /// kinds only `other` has are appended, with 0 for the samples already here. Timestamps
    /// and markers of `other` are shifted onto this profile's clock (if this profile has no
    /// start time yet, it takes `other`'s).
    pub fn merge(&mut self, other: &Profile) -> Result<(), ProfileError> {
        // Sample type mapping, widening our value rows if `other` brings new kinds.
        let mut column = Vec::with_capacity(other.sample_types.len());
        for t in &other.sample_types {
            match self.p.sample_types.iter().position(|m| m.kind == t.kind) {
                Some(i) if self.p.sample_types[i].unit != t.unit => {
                    return Err(ProfileError::UnitMismatch {
                        kind: t.kind.clone(),
                        left: self.p.sample_types[i].unit.clone(),
                        right: t.unit.clone(),
                    });
                }
                Some(i) => column.push(i),
                None => {
                    column.push(self.p.sample_types.len());
                    self.p.sample_types.push(t.clone());
                }
            }
        }
        self.widen_values();
        if self.p.period.is_none() {
            self.p.period = other.period.clone();
        }
        let (shift, new_start, other_offset) = clock_shift(self.p.start_time_ns, other.start_time_ns);
        if shift != 0 {
            self.shift_own_times(shift);
        }
        // Durations on the merged clock: each profile ends at its offset + its duration.
        self.p.duration_ns = shift
            .saturating_add(self.p.duration_ns)
            .max(other_offset.saturating_add(other.duration_ns));
        self.p.start_time_ns = new_start;

        let frame_map = other.frames.iter().map(|f| self.intern_frame(f.clone())).collect::<Result<Vec<_>, _>>()?;
        let mut stack_map = Vec::with_capacity(other.stacks.len());
        let mut buf = Vec::new();
        for s in &other.stacks {
            buf.clear();
            buf.extend(s.iter().map(|f| frame_map[f.index()]));
            stack_map.push(self.intern_stack(&buf)?);
        }
        let label_map =
            other.label_sets.iter().map(|l| self.intern_labels(l.clone())).collect::<Result<Vec<_>, _>>()?;
        let width = self.p.sample_types.len();
        let mut row = vec![0i64; width];
        for s in other.samples() {
            row.iter_mut().for_each(|v| *v = 0);
            for (j, v) in s.values.iter().enumerate() {
                row[column[j]] = *v;
            }
            let stack = stack_map[s.stack.index()];
            let labels = label_map[s.labels.index()];
            match s.timestamp_ns {
                None => self.add_sample(stack, &row, labels)?,
                Some(t) => self.add_timed_sample(stack, &row, labels, t.saturating_add(other_offset))?,
            }
        }
        for m in &other.markers {
            let mut m = m.clone();
            m.start_ns = m.start_ns.saturating_add(other_offset);
            m.end_ns = m.end_ns.saturating_add(other_offset);
            self.p.markers.push(m);
        }
        for c in &other.comments {
            if !self.p.comments.contains(c) {
                self.p.comments.push(c.clone());
            }
        }
        Ok(())
    }

    fn widen_values(&mut self) {
        let n = self.p.samples.len();
        if n == 0 {
            return;
        }
        let old = self.p.values.len() / n;
        let new = self.p.sample_types.len();
        if old == new {
            return;
        }
        let mut values = Vec::with_capacity(n * new);
        for row in self.p.values.chunks_exact(old) {
            values.extend_from_slice(row);
            values.extend(std::iter::repeat_n(0, new - old));
        }
        self.p.values = values;
    }

    fn shift_own_times(&mut self, by: u64) {
        for s in &mut self.p.samples {
            if let Some(t) = &mut s.timestamp_ns {
                *t = t.saturating_add(by);
            }
        }
        for m in &mut self.p.markers {
            m.start_ns = m.start_ns.saturating_add(by);
            m.end_ns = m.end_ns.saturating_add(by);
        }
    }

    /// Frames interned so far.
    pub fn frame(&self, id: FrameId) -> Option<&Frame> {
        self.p.frame(id)
    }

    pub fn build(self) -> Profile {
        self.p
    }
}

/// Returns (how far to shift our relative times later, the merged start time, the offset to
/// add to the other profile's relative times). A start of 0 means "unknown clock": such a
/// profile is laid on the other's clock unshifted.
fn clock_shift(ours: u64, theirs: u64) -> (u64, u64, u64) {
    match (ours, theirs) {
        (0, t) => (0, t, 0),
        (o, 0) => (0, o, 0),
        (o, t) if t < o => (o - t, t, 0),
        (o, t) => (0, o, t - o),
    }
}
