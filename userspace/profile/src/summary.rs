//! Text-report helpers: the heaviest functions of one sample type, self and inclusive.

use crate::error::ProfileError;
use crate::hash::FastMap;
use crate::model::{FrameKind, Profile, Str};

/// One function's share of a sample type. Frames that differ only in address or attributes
/// count as the same function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionTotal {
    pub name: Str,
    pub module: Str,
    pub kind: FrameKind,
    /// Value of samples whose leaf is this function.
    pub self_value: i64,
    /// Value of samples with this function anywhere on the stack (counted once per sample,
    /// however often recursion repeats it).
    pub total_value: i64,
}

/// Functions of sample type `index`, heaviest self value first (ties: heavier inclusive
/// value, then name), at most `limit` of them.
pub fn top_functions(p: &Profile, index: usize, limit: usize) -> Result<Vec<FunctionTotal>, ProfileError> {
    if index >= p.sample_types().len() {
        return Err(ProfileError::NoSuchSampleType { index, count: p.sample_types().len() });
    }
    // Frame id → function slot.
    let mut slot_of_name: FastMap<(&str, &str, FrameKind), usize> = FastMap::default();
    let mut slots: Vec<FunctionTotal> = Vec::new();
    let frame_slot: Vec<usize> = p
        .frames()
        .iter()
        .map(|f| {
            *slot_of_name.entry((&f.name, &f.module, f.kind)).or_insert_with(|| {
                slots.push(FunctionTotal {
                    name: f.name.clone(),
                    module: f.module.clone(),
                    kind: f.kind,
                    self_value: 0,
                    total_value: 0,
                });
                slots.len() - 1
            })
        })
        .collect();
    let mut seen = vec![usize::MAX; slots.len()];
    for (n, s) in p.samples().enumerate() {
        let v = s.values[index];
        if v == 0 {
            continue;
        }
        let stack = p.stack(s.stack).unwrap_or(&[]);
        for f in stack {
            let slot = frame_slot[f.index()];
            if seen[slot] != n {
                seen[slot] = n;
                slots[slot].total_value = slots[slot].total_value.saturating_add(v);
            }
        }
        if let Some(leaf) = stack.last() {
            let slot = frame_slot[leaf.index()];
            slots[slot].self_value = slots[slot].self_value.saturating_add(v);
        }
    }
    slots.retain(|s| s.total_value != 0);
    slots.sort_by(|a, b| {
        b.self_value.cmp(&a.self_value).then(b.total_value.cmp(&a.total_value)).then_with(|| a.name.cmp(&b.name))
    });
    slots.truncate(limit);
    Ok(slots)
}
