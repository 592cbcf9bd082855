//! Copying samples of one profile into another builder (a per-process or per-kind cut): each
//! frame, stack and label set of the source is interned once, not once per sample. A
//! host-wide minute holds ~50,000 timed samples on a few thousand stacks; cloning and hashing
//! every frame of every sample was most of the CPU a `record --all` stop took.
use crate::builder::ProfileBuilder;
use crate::error::ProfileError;
use crate::hash::FastMap;
use crate::model::{FrameId, LabelSetId, Profile, StackId};

/// Source ids → ids in one destination builder.
#[derive(Default)]
pub struct Remap {
    frames: FastMap<FrameId, FrameId>,
    stacks: FastMap<StackId, StackId>,
    labels: FastMap<LabelSetId, LabelSetId>,
    ids: Vec<FrameId>,
}

impl Remap {
    pub fn new() -> Self {
        Self::default()
    }

    /// The stack `id` of `src` in `b` (frames missing from `src` are left out).
    pub fn stack(&mut self, b: &mut ProfileBuilder, src: &Profile, id: StackId) -> Result<StackId, ProfileError> {
        if let Some(&s) = self.stacks.get(&id) {
            return Ok(s);
        }
        self.ids.clear();
        for &f in src.stack(id).unwrap_or(&[]) {
            let mapped = match self.frames.get(&f) {
                Some(&m) => m,
                None => {
                    let Some(frame) = src.frame(f) else { continue };
                    let m = b.intern_frame(frame.clone())?;
                    self.frames.insert(f, m);
                    m
                }
            };
            self.ids.push(mapped);
        }
        let s = b.intern_stack(&self.ids)?;
        self.stacks.insert(id, s);
        Ok(s)
    }

    /// The label set `id` of `src` in `b` (an empty one when `src` has none).
    pub fn labels(&mut self, b: &mut ProfileBuilder, src: &Profile, id: LabelSetId) -> Result<LabelSetId, ProfileError> {
        if let Some(&l) = self.labels.get(&id) {
            return Ok(l);
        }
        let l = b.intern_labels(src.labels(id).cloned().unwrap_or_default())?;
        self.labels.insert(id, l);
        Ok(l)
    }
}

#[cfg(test)]
mod tests {
    use super::Remap;
    use crate::{Frame, FrameKind, LabelSet, ProfileBuilder, SampleType};

    #[test]
    fn copies_stacks_and_labels_once_each() {
        let mut src = ProfileBuilder::new(vec![SampleType::new("cpu", "count")]);
        let f = |n: &str| Frame::new(n.to_string(), "m".to_string(), FrameKind::Native);
        let (a, b) = (src.intern_frame(f("a")).unwrap(), src.intern_frame(f("b")).unwrap());
        let s1 = src.intern_stack(&[a, b]).unwrap();
        let s2 = src.intern_stack(&[b]).unwrap();
        let l = src.intern_labels(LabelSet::thread(1, 2)).unwrap();
        for (s, t) in [(s1, 1), (s2, 2), (s1, 3)] {
            src.add_timed_sample(s, &[1], l, t).unwrap();
        }
        let src = src.build();
        let mut dst = ProfileBuilder::new(src.sample_types().to_vec());
        let mut r = Remap::new();
        for s in src.samples() {
            let (stack, labels) = (r.stack(&mut dst, &src, s.stack).unwrap(), r.labels(&mut dst, &src, s.labels).unwrap());
            dst.add_sample(stack, s.values, labels).unwrap();
        }
        let dst = dst.build();
        assert_eq!(dst.frames().len(), 2);
        assert_eq!(dst.samples().count(), 2, "aggregated per stack");
        let names: Vec<Vec<&str>> = dst.samples().map(|s| dst.stack(s.stack).unwrap().iter().map(|&f| dst.frame(f).unwrap().name.as_ref()).collect()).collect();
        assert_eq!(names, [vec!["a", "b"], vec!["b"]]);
        assert_eq!(dst.samples().map(|s| s.values[0]).collect::<Vec<_>>(), [2, 1]);
    }
}
