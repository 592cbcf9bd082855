//! Allocation sampling events: GCAllocationTick (id 10, V0–V4), AllocationSampled (id 303,
//! .NET 10) and GCSampledObjectAllocationHigh/Low (ids 20/32).

use crate::error::DecodeError;
use crate::reader::Cursor;
use crate::utf16::Utf16Str;

/// Which heap an allocation went to (the manifest's AllocationKind map).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeapKind {
    /// Small object heap.
    Soh,
    /// Large object heap.
    Loh,
    /// Pinned object heap (.NET 5+).
    Poh,
    Other(u32),
}

impl HeapKind {
    pub fn from_allocation_kind(v: u32) -> Self {
        match v {
            0 => HeapKind::Soh,
            1 => HeapKind::Loh,
            2 => HeapKind::Poh,
            other => HeapKind::Other(other),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            HeapKind::Soh => "Small",
            HeapKind::Loh => "Large",
            HeapKind::Poh => "Pinned",
            HeapKind::Other(_) => "Unknown",
        }
    }
}

/// GCAllocationTick: emitted about every 100 KB allocated on a heap.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocationTick<'a> {
    /// Bytes allocated since the previous tick, truncated to 32 bits.
    pub allocation_amount: u32,
    pub kind: HeapKind,
    /// V1+.
    pub clr_instance_id: Option<u16>,
    /// V2+: the untruncated amount.
    pub allocation_amount64: Option<u64>,
    /// V2+: MethodTable of the object that crossed the threshold.
    pub type_id: Option<u64>,
    /// V2+.
    pub type_name: Option<Utf16Str<'a>>,
    /// V2+.
    pub heap_index: Option<u32>,
    /// V3+: address of the object.
    pub address: Option<u64>,
    /// V4+: size of the object.
    pub object_size: Option<u64>,
}

impl<'a> AllocationTick<'a> {
    pub fn decode(payload: &'a [u8], version: u8, pointer_size: u8) -> Result<Self, DecodeError> {
        let name = match version {
            0 => "GCAllocationTick",
            1 => "GCAllocationTick_V1",
            2 => "GCAllocationTick_V2",
            3 => "GCAllocationTick_V3",
            _ => "GCAllocationTick_V4",
        };
        let mut c = Cursor::new(payload, pointer_size, name)?;
        let allocation_amount = c.u32("AllocationAmount")?;
        let kind = HeapKind::from_allocation_kind(c.u32("AllocationKind")?);
        let mut out = AllocationTick {
            allocation_amount,
            kind,
            clr_instance_id: None,
            allocation_amount64: None,
            type_id: None,
            type_name: None,
            heap_index: None,
            address: None,
            object_size: None,
        };
        if version >= 1 {
            out.clr_instance_id = Some(c.u16("ClrInstanceID")?);
        }
        if version >= 2 {
            out.allocation_amount64 = Some(c.u64("AllocationAmount64")?);
            out.type_id = Some(c.pointer("TypeID")?);
            out.type_name = Some(c.utf16z("TypeName")?);
            out.heap_index = Some(c.u32("HeapIndex")?);
        }
        if version >= 3 {
            out.address = Some(c.pointer("Address")?);
        }
        if version >= 4 {
            out.object_size = Some(c.u64("ObjectSize")?);
        }
        Ok(out)
    }

    /// Bytes since the previous tick: the 64-bit amount when present.
    pub fn amount(&self) -> u64 {
        self.allocation_amount64
            .unwrap_or(u64::from(self.allocation_amount))
    }
}

/// AllocationSampled (id 303, .NET 10, keyword AllocationSampling): a randomly sampled
/// allocation.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocationSampled<'a> {
    pub kind: HeapKind,
    pub clr_instance_id: u16,
    pub type_id: u64,
    pub type_name: Utf16Str<'a>,
    pub address: u64,
    pub object_size: u64,
    /// Offset of the sampled byte inside the allocation context.
    pub sampled_byte_offset: u64,
}

impl<'a> AllocationSampled<'a> {
    pub fn decode(payload: &'a [u8], pointer_size: u8) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, "AllocationSampled")?;
        Ok(AllocationSampled {
            kind: HeapKind::from_allocation_kind(c.u32("AllocationKind")?),
            clr_instance_id: c.u16("ClrInstanceID")?,
            type_id: c.pointer("TypeID")?,
            type_name: c.utf16z("TypeName")?,
            address: c.pointer("Address")?,
            object_size: c.u64("ObjectSize")?,
            sampled_byte_offset: c.u64("SampledByteOffset")?,
        })
    }
}

/// GCSampledObjectAllocationHigh/Low (ids 20/32).
#[derive(Debug, Clone, PartialEq)]
pub struct SampledObjectAllocation {
    pub address: u64,
    pub type_id: u64,
    pub object_count_for_type_sample: u32,
    pub total_size_for_type_sample: u64,
    pub clr_instance_id: u16,
}

impl SampledObjectAllocation {
    pub fn decode(payload: &[u8], pointer_size: u8) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, "GCSampledObjectAllocation")?;
        Ok(SampledObjectAllocation {
            address: c.pointer("Address")?,
            type_id: c.pointer("TypeID")?,
            object_count_for_type_sample: c.u32("ObjectCountForTypeSample")?,
            total_size_for_type_sample: c.u64("TotalSizeForTypeSample")?,
            clr_instance_id: c.u16("ClrInstanceID")?,
        })
    }
}
