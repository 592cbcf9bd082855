//! Per-GC history events: GCPerHeapHistory (id 204, V3 layout) and GCGlobalHeapHistory
//! (id 205, V2–V4).

use crate::error::DecodeError;
use crate::gc_enums::{
    CompactReason, CondemnReasons, ExpandMechanism, GcReason, GlobalMechanisms, mechanism_index,
};
use crate::reader::Cursor;

/// Per-generation data of one heap (one `Values` element of GCPerHeapHistory_V3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GenerationData {
    pub size_before: u64,
    pub free_list_before: u64,
    pub free_obj_before: u64,
    pub size_after: u64,
    pub free_list_after: u64,
    pub free_obj_after: u64,
    pub in_bytes: u64,
    pub pinned_surv: u64,
    pub non_pinned_surv: u64,
    pub new_allocation: u64,
}

/// GCPerHeapHistory_V3 (id 204). Pointer-sized fields are widened to u64.
#[derive(Debug, Clone, PartialEq)]
pub struct GcPerHeapHistory {
    pub clr_instance_id: u16,
    pub free_list_allocated: u64,
    pub free_list_rejected: u64,
    pub end_of_seg_allocated: u64,
    pub condemned_allocated: u64,
    pub pinned_allocated: u64,
    pub pinned_allocated_advance: u64,
    pub running_free_list_efficiency: u32,
    pub condemn_reasons: CondemnReasons,
    /// Top bit set = compaction happened; the rest is the reason bit (runtime
    /// `gc_heap_compact_reason`).
    pub compact_mechanisms: u32,
    /// Top bit set = expansion happened; the rest is the mechanism bit.
    pub expand_mechanisms: u32,
    pub heap_index: u32,
    pub extra_gen0_commit: u64,
    /// One entry per generation (gen0, gen1, gen2, LOH[, POH]).
    pub generations: Vec<GenerationData>,
}

impl GcPerHeapHistory {
    /// Why this heap was compacted, if it was.
    pub fn compact_reason(&self) -> Option<CompactReason> {
        mechanism_index(self.compact_mechanisms).map(CompactReason::from_u32)
    }

    /// How this heap was expanded, if it was.
    pub fn expand_mechanism(&self) -> Option<ExpandMechanism> {
        mechanism_index(self.expand_mechanisms).map(ExpandMechanism::from_u32)
    }

    pub fn decode(payload: &[u8], pointer_size: u8) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, "GCPerHeapHistory_V3")?;
        let clr_instance_id = c.u16("ClrInstanceID")?;
        let free_list_allocated = c.pointer("FreeListAllocated")?;
        let free_list_rejected = c.pointer("FreeListRejected")?;
        let end_of_seg_allocated = c.pointer("EndOfSegAllocated")?;
        let condemned_allocated = c.pointer("CondemnedAllocated")?;
        let pinned_allocated = c.pointer("PinnedAllocated")?;
        let pinned_allocated_advance = c.pointer("PinnedAllocatedAdvance")?;
        let running_free_list_efficiency = c.u32("RunningFreeListEfficiency")?;
        let reasons_gen = c.u32("CondemnReasons0")?;
        let conditions = c.u32("CondemnReasons1")?;
        let compact_mechanisms = c.u32("CompactMechanisms")?;
        let expand_mechanisms = c.u32("ExpandMechanisms")?;
        let heap_index = c.u32("HeapIndex")?;
        let extra_gen0_commit = c.pointer("ExtraGen0Commit")?;
        let count = c.u32("Count")?;
        c.check_count(u64::from(count), 10 * u64::from(pointer_size), "Values")?;
        let mut generations = Vec::with_capacity(count as usize);
        for _ in 0..count {
            generations.push(GenerationData {
                size_before: c.pointer("Values.SizeBefore")?,
                free_list_before: c.pointer("Values.FreeListBefore")?,
                free_obj_before: c.pointer("Values.FreeObjBefore")?,
                size_after: c.pointer("Values.SizeAfter")?,
                free_list_after: c.pointer("Values.FreeListAfter")?,
                free_obj_after: c.pointer("Values.FreeObjAfter")?,
                in_bytes: c.pointer("Values.In")?,
                pinned_surv: c.pointer("Values.PinnedSurv")?,
                non_pinned_surv: c.pointer("Values.NonePinnedSurv")?,
                new_allocation: c.pointer("Values.NewAllocation")?,
            });
        }
        Ok(GcPerHeapHistory {
            clr_instance_id,
            free_list_allocated,
            free_list_rejected,
            end_of_seg_allocated,
            condemned_allocated,
            pinned_allocated,
            pinned_allocated_advance,
            running_free_list_efficiency,
            condemn_reasons: CondemnReasons {
                generations: reasons_gen,
                conditions,
            },
            compact_mechanisms,
            expand_mechanisms,
            heap_index,
            extra_gen0_commit,
            generations,
        })
    }
}

/// GCGlobalHeapHistory (id 205), versions 2–4 (a V0/V1 payload is read as the V2 prefix
/// ending at ClrInstanceID).
#[derive(Debug, Clone, PartialEq)]
pub struct GcGlobalHeapHistory {
    pub final_youngest_desired: u64,
    pub num_heaps: i32,
    pub condemned_generation: u32,
    pub gen0_reduction_count: u32,
    pub reason: GcReason,
    /// Bits: 0 concurrent, 1 compaction, 2 promotion, 3 demotion, 4 card bundles, 5 elevation.
    pub global_mechanisms: u32,
    pub clr_instance_id: u16,
    /// V2+.
    pub pause_mode: Option<u32>,
    /// V2+.
    pub memory_pressure: Option<u32>,
    /// V3+.
    pub condemn_reasons: Option<CondemnReasons>,
    /// V4+: the `Values.Time` array (per-phase times, in the runtime's units).
    pub times: Option<Vec<u32>>,
}

impl GcGlobalHeapHistory {
    pub fn mechanisms(&self) -> GlobalMechanisms {
        GlobalMechanisms(self.global_mechanisms)
    }

    pub fn decode(payload: &[u8], version: u8, pointer_size: u8) -> Result<Self, DecodeError> {
        let name = match version {
            0 | 1 => "GCGlobalHeapHistory_V1",
            2 => "GCGlobalHeapHistory_V2",
            3 => "GCGlobalHeapHistory_V3",
            _ => "GCGlobalHeapHistory_V4",
        };
        let mut c = Cursor::new(payload, pointer_size, name)?;
        let final_youngest_desired = c.u64("FinalYoungestDesired")?;
        let num_heaps = c.i32("NumHeaps")?;
        let condemned_generation = c.u32("CondemnedGeneration")?;
        let gen0_reduction_count = c.u32("Gen0ReductionCount")?;
        let reason = GcReason::from_u32(c.u32("Reason")?);
        let global_mechanisms = c.u32("GlobalMechanisms")?;
        let clr_instance_id = c.u16("ClrInstanceID")?;
        let (pause_mode, memory_pressure) = if version >= 2 {
            (Some(c.u32("PauseMode")?), Some(c.u32("MemoryPressure")?))
        } else {
            (None, None)
        };
        let condemn_reasons = if version >= 3 {
            let generations = c.u32("CondemnReasons0")?;
            let conditions = c.u32("CondemnReasons1")?;
            Some(CondemnReasons {
                generations,
                conditions,
            })
        } else {
            None
        };
        let times = if version >= 4 {
            let count = c.u32("Count")?;
            c.check_count(u64::from(count), 4, "Values")?;
            let mut v = Vec::with_capacity(count as usize);
            for _ in 0..count {
                v.push(c.u32("Values.Time")?);
            }
            Some(v)
        } else {
            None
        };
        Ok(GcGlobalHeapHistory {
            final_youngest_desired,
            num_heaps,
            condemned_generation,
            gen0_reduction_count,
            reason,
            global_mechanisms,
            clr_instance_id,
            pause_mode,
            memory_pressure,
            condemn_reasons,
            times,
        })
    }
}
