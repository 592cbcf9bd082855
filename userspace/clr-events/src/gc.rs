//! GC lifecycle events: GCStart, GCEnd, GCHeapStats, SuspendEE/RestartEE, GCTriggered.
//!
//! Version handling everywhere in this crate: fields that a version lacks are `None`; a
//! version newer than the newest known one is decoded with the newest known layout (later
//! versions only append fields), and bytes past the layout are ignored.

use crate::error::DecodeError;
use crate::gc_enums::{GcReason, GcType, SuspendReason};
use crate::reader::Cursor;

/// GCStart (id 1), versions 0–2.
#[derive(Debug, Clone, PartialEq)]
pub struct GcStart {
    pub count: u32,
    /// Generation being collected (V1+).
    pub depth: Option<u32>,
    pub reason: GcReason,
    pub gc_type: Option<GcType>,
    pub clr_instance_id: Option<u16>,
    pub client_sequence_number: Option<u64>,
}

impl GcStart {
    pub fn decode(payload: &[u8], version: u8, pointer_size: u8) -> Result<Self, DecodeError> {
        let name = match version {
            0 => "GCStart",
            1 => "GCStart_V1",
            _ => "GCStart_V2",
        };
        let mut c = Cursor::new(payload, pointer_size, name)?;
        let count = c.u32("Count")?;
        if version == 0 {
            let reason = GcReason::from_u32(c.u32("Reason")?);
            return Ok(GcStart {
                count,
                depth: None,
                reason,
                gc_type: None,
                clr_instance_id: None,
                client_sequence_number: None,
            });
        }
        let depth = c.u32("Depth")?;
        let reason = GcReason::from_u32(c.u32("Reason")?);
        let gc_type = GcType::from_u32(c.u32("Type")?);
        let clr_instance_id = c.u16("ClrInstanceID")?;
        let client_sequence_number = if version >= 2 {
            Some(c.u64("ClientSequenceNumber")?)
        } else {
            None
        };
        Ok(GcStart {
            count,
            depth: Some(depth),
            reason,
            gc_type: Some(gc_type),
            clr_instance_id: Some(clr_instance_id),
            client_sequence_number,
        })
    }
}

/// GCEnd (id 2), versions 0–1.
#[derive(Debug, Clone, PartialEq)]
pub struct GcEnd {
    pub count: u32,
    pub depth: u32,
    pub clr_instance_id: Option<u16>,
}

impl GcEnd {
    pub fn decode(payload: &[u8], version: u8, pointer_size: u8) -> Result<Self, DecodeError> {
        if version == 0 {
            let mut c = Cursor::new(payload, pointer_size, "GCEnd")?;
            let count = c.u32("Count")?;
            let depth = u32::from(c.u16("Depth")?);
            return Ok(GcEnd {
                count,
                depth,
                clr_instance_id: None,
            });
        }
        let mut c = Cursor::new(payload, pointer_size, "GCEnd_V1")?;
        Ok(GcEnd {
            count: c.u32("Count")?,
            depth: c.u32("Depth")?,
            clr_instance_id: Some(c.u16("ClrInstanceID")?),
        })
    }
}

/// GCHeapStats (id 4), versions 0–2. Index 0..=3 = gen0, gen1, gen2, LOH.
#[derive(Debug, Clone, PartialEq)]
pub struct GcHeapStats {
    pub generation_size: [u64; 4],
    pub total_promoted_size: [u64; 4],
    pub finalization_promoted_size: u64,
    pub finalization_promoted_count: u64,
    pub pinned_object_count: u32,
    pub sink_block_count: u32,
    pub gc_handle_count: u32,
    pub clr_instance_id: Option<u16>,
    /// Pinned object heap size (V2+).
    pub poh_size: Option<u64>,
    pub poh_promoted_size: Option<u64>,
}

impl GcHeapStats {
    pub fn decode(payload: &[u8], version: u8, pointer_size: u8) -> Result<Self, DecodeError> {
        let name = match version {
            0 => "GCHeapStats",
            1 => "GCHeapStats_V1",
            _ => "GCHeapStats_V2",
        };
        let mut c = Cursor::new(payload, pointer_size, name)?;
        const SIZE: [&str; 4] = [
            "GenerationSize0",
            "GenerationSize1",
            "GenerationSize2",
            "GenerationSize3",
        ];
        const PROMO: [&str; 4] = [
            "TotalPromotedSize0",
            "TotalPromotedSize1",
            "TotalPromotedSize2",
            "TotalPromotedSize3",
        ];
        let mut generation_size = [0u64; 4];
        let mut total_promoted_size = [0u64; 4];
        for g in 0..4 {
            generation_size[g] = c.u64(SIZE[g])?;
            total_promoted_size[g] = c.u64(PROMO[g])?;
        }
        let finalization_promoted_size = c.u64("FinalizationPromotedSize")?;
        let finalization_promoted_count = c.u64("FinalizationPromotedCount")?;
        let pinned_object_count = c.u32("PinnedObjectCount")?;
        let sink_block_count = c.u32("SinkBlockCount")?;
        let gc_handle_count = c.u32("GCHandleCount")?;
        let clr_instance_id = if version >= 1 {
            Some(c.u16("ClrInstanceID")?)
        } else {
            None
        };
        let (poh_size, poh_promoted_size) = if version >= 2 {
            (
                Some(c.u64("GenerationSize4")?),
                Some(c.u64("TotalPromotedSize4")?),
            )
        } else {
            (None, None)
        };
        Ok(GcHeapStats {
            generation_size,
            total_promoted_size,
            finalization_promoted_size,
            finalization_promoted_count,
            pinned_object_count,
            sink_block_count,
            gc_handle_count,
            clr_instance_id,
            poh_size,
            poh_promoted_size,
        })
    }

    /// Sum of all generation sizes (including POH when present).
    pub fn total_heap_size(&self) -> u64 {
        self.generation_size
            .iter()
            .fold(0u64, |a, b| a.saturating_add(*b))
            .saturating_add(self.poh_size.unwrap_or(0))
    }
}

/// GCSuspendEEBegin (id 9), versions 0–1.
#[derive(Debug, Clone, PartialEq)]
pub struct GcSuspendEeBegin {
    pub reason: SuspendReason,
    /// GC count; 0xFFFFFFFF when the suspension is not for a GC (V1+).
    pub count: Option<u32>,
    pub clr_instance_id: Option<u16>,
}

impl GcSuspendEeBegin {
    pub fn decode(payload: &[u8], version: u8, pointer_size: u8) -> Result<Self, DecodeError> {
        if version == 0 {
            let mut c = Cursor::new(payload, pointer_size, "GCSuspendEEBegin")?;
            let reason = SuspendReason::from_u32(u32::from(c.u16("Reason")?));
            return Ok(GcSuspendEeBegin {
                reason,
                count: None,
                clr_instance_id: None,
            });
        }
        let mut c = Cursor::new(payload, pointer_size, "GCSuspendEEBegin_V1")?;
        Ok(GcSuspendEeBegin {
            reason: SuspendReason::from_u32(c.u32("Reason")?),
            count: Some(c.u32("Count")?),
            clr_instance_id: Some(c.u16("ClrInstanceID")?),
        })
    }
}

/// The GCNoUserData / DCStartEnd templates (GCSuspendEEEnd, GCRestartEEBegin, GCRestartEEEnd,
/// rundown DC*Init/Complete): V0 is empty, V1 carries the ClrInstanceID.
pub fn decode_clr_instance_only(
    payload: &[u8],
    version: u8,
    pointer_size: u8,
    name: &'static str,
) -> Result<Option<u16>, DecodeError> {
    let mut c = Cursor::new(payload, pointer_size, name)?;
    if version == 0 {
        Ok(None)
    } else {
        Ok(Some(c.u16("ClrInstanceID")?))
    }
}

/// GCTriggered (id 35), version 0.
#[derive(Debug, Clone, PartialEq)]
pub struct GcTriggered {
    pub reason: GcReason,
    pub clr_instance_id: u16,
}

impl GcTriggered {
    pub fn decode(payload: &[u8], pointer_size: u8) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, "GCTriggered")?;
        Ok(GcTriggered {
            reason: GcReason::from_u32(c.u32("Reason")?),
            clr_instance_id: c.u16("ClrInstanceID")?,
        })
    }
}
