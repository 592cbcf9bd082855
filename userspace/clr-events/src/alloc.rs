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

/// `N` bytes of `b` at `at`, if there are.
#[inline]
fn le_at<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// A `win:Pointer` of `size` bytes (4 or 8) at `at`, widened.
#[inline]
fn pointer_at(b: &[u8], at: usize, size: usize) -> Option<u64> {
    if size == 4 {
        le_at(b, at).map(|a| u64::from(u32::from_le_bytes(a)))
    } else {
        le_at(b, at).map(u64::from_le_bytes)
    }
}

impl<'a> AllocationTick<'a> {
    pub fn decode(payload: &'a [u8], version: u8, pointer_size: u8) -> Result<Self, DecodeError> {
        match Self::decode_whole(payload, version, pointer_size) {
            Some(t) => Ok(t),
            None => Self::decode_fields(payload, version, pointer_size),
        }
    }

    /// V2 and later with every field of the version present, read at their offsets: the
    /// runtimes of today send nothing else (the field-by-field cursor was half of an
    /// allocation event's decoding). None otherwise: [`AllocationTick::decode_fields`] reads
    /// it and says what is wrong.
    #[inline]
    fn decode_whole(payload: &'a [u8], version: u8, pointer_size: u8) -> Option<Self> {
        let p = usize::from(pointer_size);
        if version < 2 || (p != 4 && p != 8) {
            return None;
        }
        let name_at = 18 + p;
        let mut c = Cursor::new(payload.get(name_at..)?, pointer_size, "GCAllocationTick").ok()?;
        let type_name = c.utf16z("TypeName").ok()?;
        let tail = name_at + c.position();
        Some(AllocationTick {
            allocation_amount: u32::from_le_bytes(le_at(payload, 0)?),
            kind: HeapKind::from_allocation_kind(u32::from_le_bytes(le_at(payload, 4)?)),
            clr_instance_id: Some(u16::from_le_bytes(le_at(payload, 8)?)),
            allocation_amount64: Some(u64::from_le_bytes(le_at(payload, 10)?)),
            type_id: Some(pointer_at(payload, 18, p)?),
            type_name: Some(type_name),
            heap_index: Some(u32::from_le_bytes(le_at(payload, tail)?)),
            address: if version >= 3 { Some(pointer_at(payload, tail + 4, p)?) } else { None },
            object_size: if version >= 4 { Some(u64::from_le_bytes(le_at(payload, tail + 4 + p)?)) } else { None },
        })
    }

    /// Field by field, any version (a short payload: which field ran out).
    fn decode_fields(payload: &'a [u8], version: u8, pointer_size: u8) -> Result<Self, DecodeError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A V`version` payload with `pointer_size`-byte pointers and a type name of `units`
    /// UTF-16 units.
    fn payload(version: u8, pointer_size: u8, units: usize) -> Vec<u8> {
        let p = usize::from(pointer_size);
        let mut b = Vec::new();
        b.extend(100_123u32.to_le_bytes());
        b.extend(1u32.to_le_bytes());
        if version >= 1 {
            b.extend(7u16.to_le_bytes());
        }
        if version >= 2 {
            b.extend(0x1_0000_0001u64.to_le_bytes());
            b.extend(&0x0807_0605_0403_0201u64.to_le_bytes()[..p]);
            for i in 0..units {
                b.extend((0x41 + (i % 26) as u16).to_le_bytes());
            }
            b.extend([0, 0]);
            b.extend(3u32.to_le_bytes());
        }
        if version >= 3 {
            b.extend(&0x1112_1314_1516_1718u64.to_le_bytes()[..p]);
        }
        if version >= 4 {
            b.extend(24u64.to_le_bytes());
        }
        b
    }

    #[test]
    fn read_in_place_as_field_by_field() {
        for version in 0..=5 {
            for pointer_size in [4, 8, 2] {
                for units in [0, 1, 17, 40] {
                    let whole = payload(version, pointer_size, units);
                    // Every length up to the whole and past it; odd bytes in the name's place too.
                    for len in 0..=whole.len() + 3 {
                        let mut b = whole.clone();
                        b.resize(len, 0xff);
                        let fast = AllocationTick::decode(&b, version, pointer_size);
                        let slow = AllocationTick::decode_fields(&b, version, pointer_size);
                        assert_eq!(fast, slow, "v{version} p{pointer_size} units {units} len {len}");
                        if len == whole.len() && pointer_size != 2 {
                            let t = fast.expect("a whole payload");
                            assert_eq!(t.amount(), if version >= 2 { 0x1_0000_0001 } else { 100_123 });
                            assert_eq!(t.kind, HeapKind::Loh);
                            assert_eq!(t.type_name.map(|n| n.len_units()), (version >= 2).then_some(units));
                            assert_eq!(t.object_size, (version >= 4).then_some(24));
                            assert_eq!(t.address.is_some(), version >= 3);
                        }
                    }
                }
            }
        }
        // Only V2 and later with every field are read in place.
        assert!(AllocationTick::decode_whole(&payload(1, 8, 0), 1, 8).is_none());
        assert!(AllocationTick::decode_whole(&payload(4, 8, 3), 4, 8).is_some());
    }
}
