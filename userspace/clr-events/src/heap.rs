//! The GC heap dump events: what the runtime streams while it walks its heap during a GC when
//! the GCHeapDump keyword is on (BulkNode, BulkEdge, BulkRootEdge, …), and the BulkType events
//! that name the types the walk mentions (Type keyword; names need GCHeapAndTypeNames).
//!
//! These events are bulk arrays: a header (Index, Count, ClrInstanceID) and `Count` packed
//! structs. Decoding checks the whole array fits and borrows it; iterating reads one element at a
//! time, so a heap of millions of objects is never copied into per-event vectors. Types and
//! static roots carry strings (variable-size elements) and are decoded into a vector.
//!
//! They are decoded by [`decode_heap`], apart from [`crate::decode`]: only a heap snapshot needs
//! them, and keeping them out of [`crate::ClrEvent`] keeps every other consumer unchanged.

use crate::error::DecodeError;
use crate::reader::Cursor;
use crate::utf16::Utf16Str;
use crate::{RawEvent, providers};

/// Event ids of the heap dump events (Microsoft-Windows-DotNETRuntime, all version 0).
pub mod ids {
    pub const BULK_TYPE: u16 = 15;
    pub const GC_BULK_ROOT_EDGE: u16 = 16;
    pub const GC_BULK_ROOT_CWT_ELEMENT_EDGE: u16 = 17;
    pub const GC_BULK_NODE: u16 = 18;
    pub const GC_BULK_EDGE: u16 = 19;
    pub const GC_BULK_ROOT_CCW: u16 = 36;
    pub const GC_BULK_RCW: u16 = 37;
    pub const GC_BULK_ROOT_STATIC_VAR: u16 = 38;
}

/// The runtime keywords that make the runtime collect and stream a heap dump when a session
/// starts (what TraceEvent calls GCHeapSnapshot): GC | GCHeapCollect | GCHeapDump |
/// GCHeapAndTypeNames | Type.
pub const HEAP_SNAPSHOT_KEYWORDS: u64 = crate::keywords::runtime::GC
    | crate::keywords::runtime::GC_HEAP_COLLECT
    | crate::keywords::runtime::GC_HEAP_DUMP
    | crate::keywords::runtime::GC_HEAP_AND_TYPE_NAMES
    | crate::keywords::runtime::TYPE;

/// A decoded heap dump event.
#[derive(Debug, Clone, PartialEq)]
pub enum HeapEvent<'a> {
    BulkType(Vec<TypeDesc<'a>>),
    BulkNode(Bulk<'a, Node>),
    BulkEdge(Bulk<'a, Edge>),
    BulkRootEdge(Bulk<'a, RootEdge>),
    BulkRootCwtElementEdge(Bulk<'a, CwtEdge>),
    BulkRootStaticVar(Vec<StaticRoot<'a>>),
    BulkRootCcw(Bulk<'a, CcwRoot>),
    BulkRcw(Bulk<'a, Rcw>),
}

/// Decodes a heap dump event; `Ok(None)` for any other event.
pub fn decode_heap<'a>(ev: &RawEvent<'a>) -> Result<Option<HeapEvent<'a>>, DecodeError> {
    if !ev.provider.eq_ignore_ascii_case(providers::RUNTIME) {
        return Ok(None);
    }
    let (p, ps) = (ev.payload, ev.pointer_size);
    Ok(Some(match ev.event_id {
        ids::BULK_TYPE => HeapEvent::BulkType(TypeDesc::decode_bulk(p, ps)?),
        ids::GC_BULK_NODE => HeapEvent::BulkNode(Bulk::decode(p, ps, "GCBulkNode", true)?),
        ids::GC_BULK_EDGE => HeapEvent::BulkEdge(Bulk::decode(p, ps, "GCBulkEdge", true)?),
        ids::GC_BULK_ROOT_EDGE => {
            HeapEvent::BulkRootEdge(Bulk::decode(p, ps, "GCBulkRootEdge", true)?)
        }
        ids::GC_BULK_ROOT_CWT_ELEMENT_EDGE => HeapEvent::BulkRootCwtElementEdge(Bulk::decode(
            p,
            ps,
            "GCBulkRootConditionalWeakTableElementEdge",
            true,
        )?),
        ids::GC_BULK_ROOT_STATIC_VAR => {
            HeapEvent::BulkRootStaticVar(StaticRoot::decode_bulk(p, ps)?)
        }
        ids::GC_BULK_ROOT_CCW => {
            HeapEvent::BulkRootCcw(Bulk::decode(p, ps, "GCBulkRootCCW", false)?)
        }
        ids::GC_BULK_RCW => HeapEvent::BulkRcw(Bulk::decode(p, ps, "GCBulkRCW", false)?),
        _ => return Ok(None),
    }))
}

/// One fixed-size element of a bulk array.
pub trait BulkValue: Sized {
    /// Size in bytes for the target's pointer size.
    fn size(pointer_size: u8) -> usize;
    /// Reads one element; `c` holds at least `size` bytes.
    fn read(c: &mut Cursor<'_>) -> Result<Self, DecodeError>;
}

/// A bulk array event: its sequence index (per kind, from 0 within one walk) and the borrowed
/// elements.
#[derive(Debug, Clone, PartialEq)]
pub struct Bulk<'a, T> {
    /// Index of this event among the events of its kind in the walk (absent for CCW/RCW).
    pub index: Option<u32>,
    pub count: u32,
    pub clr_instance_id: u16,
    values: &'a [u8],
    pointer_size: u8,
    event: &'static str,
    _t: std::marker::PhantomData<T>,
}

impl<'a, T: BulkValue> Bulk<'a, T> {
    fn decode(
        payload: &'a [u8],
        pointer_size: u8,
        event: &'static str,
        indexed: bool,
    ) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, event)?;
        let index = if indexed { Some(c.u32("Index")?) } else { None };
        let count = c.u32("Count")?;
        let clr_instance_id = c.u16("ClrInstanceID")?;
        let size = T::size(pointer_size) as u64;
        c.check_count(u64::from(count), size, "Values")?;
        let values = c.bytes((u64::from(count) * size) as usize, "Values")?;
        Ok(Bulk {
            index,
            count,
            clr_instance_id,
            values,
            pointer_size,
            event,
            _t: std::marker::PhantomData,
        })
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The elements, in payload order.
    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        let size = T::size(self.pointer_size);
        self.values.chunks_exact(size).filter_map(move |chunk| {
            // The length was checked at decode time: a read cannot fail.
            let mut c = Cursor::new(chunk, self.pointer_size, self.event).ok()?;
            T::read(&mut c).ok()
        })
    }
}

/// GCBulkNode element: one live object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    pub address: u64,
    pub size: u64,
    /// The MethodTable; named by a BulkType element with this TypeID.
    pub type_id: u64,
    /// How many of the following GCBulkEdge elements are this object's references.
    pub edge_count: u64,
}

impl BulkValue for Node {
    fn size(ps: u8) -> usize {
        usize::from(ps) + 24
    }
    fn read(c: &mut Cursor<'_>) -> Result<Self, DecodeError> {
        Ok(Node {
            address: c.pointer("Address")?,
            size: c.u64("Size")?,
            type_id: c.u64("TypeID")?,
            edge_count: c.u64("EdgeCount")?,
        })
    }
}

/// GCBulkEdge element: one reference, from the object whose edges are being listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    /// Address of the referenced object.
    pub target: u64,
    pub referencing_field_id: u32,
}

impl BulkValue for Edge {
    fn size(ps: u8) -> usize {
        usize::from(ps) + 4
    }
    fn read(c: &mut Cursor<'_>) -> Result<Self, DecodeError> {
        Ok(Edge {
            target: c.pointer("Value")?,
            referencing_field_id: c.u32("ReferencingFieldID")?,
        })
    }
}

/// GCRootKind of a GCBulkRootEdge element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RootKind {
    Stack,
    Finalizer,
    Handle,
    Other,
    Unknown(u8),
}

impl RootKind {
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => RootKind::Stack,
            1 => RootKind::Finalizer,
            2 => RootKind::Handle,
            3 => RootKind::Other,
            v => RootKind::Unknown(v),
        }
    }
}

/// GCRootFlags bits.
pub mod root_flags {
    pub const PINNING: u32 = 0x1;
    pub const WEAK_REF: u32 = 0x2;
    pub const INTERIOR: u32 = 0x4;
    pub const REF_COUNTED: u32 = 0x8;
}

/// GCBulkRootEdge element: a root (stack slot, handle, finalizer queue entry…) and the object it
/// holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RootEdge {
    pub object: u64,
    pub kind: RootKind,
    /// [`root_flags`] bits.
    pub flags: u32,
    /// The handle or stack slot address (kind-specific).
    pub root_id: u64,
}

impl RootEdge {
    /// A weak handle does not keep its object alive.
    pub fn is_weak(&self) -> bool {
        self.flags & root_flags::WEAK_REF != 0
    }
}

impl BulkValue for RootEdge {
    fn size(ps: u8) -> usize {
        2 * usize::from(ps) + 5
    }
    fn read(c: &mut Cursor<'_>) -> Result<Self, DecodeError> {
        Ok(RootEdge {
            object: c.pointer("RootedNodeAddress")?,
            kind: RootKind::from_u8(c.u8("GCRootKind")?),
            flags: c.u32("GCRootFlag")?,
            root_id: c.pointer("GCRootID")?,
        })
    }
}

/// GCBulkRootConditionalWeakTableElementEdge element: a dependent handle; the value lives as
/// long as the key does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CwtEdge {
    pub key: u64,
    pub value: u64,
    pub root_id: u64,
}

impl BulkValue for CwtEdge {
    fn size(ps: u8) -> usize {
        3 * usize::from(ps)
    }
    fn read(c: &mut Cursor<'_>) -> Result<Self, DecodeError> {
        Ok(CwtEdge {
            key: c.pointer("GCKeyNodeID")?,
            value: c.pointer("GCValueNodeID")?,
            root_id: c.pointer("GCRootID")?,
        })
    }
}

/// GCBulkRootCCW element: a COM-callable wrapper keeping a managed object alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcwRoot {
    pub root_id: u64,
    pub object: u64,
    pub type_id: u64,
    pub iunknown: u64,
    pub ref_count: u32,
    pub pegged_ref_count: u32,
    /// 1 = Strong, 2 = Pegged.
    pub flags: u32,
}

impl BulkValue for CcwRoot {
    fn size(_: u8) -> usize {
        44
    }
    fn read(c: &mut Cursor<'_>) -> Result<Self, DecodeError> {
        Ok(CcwRoot {
            root_id: c.u64("GCRootID")?,
            object: c.u64("ObjectID")?,
            type_id: c.u64("TypeID")?,
            iunknown: c.u64("IUnknown")?,
            ref_count: c.u32("RefCount")?,
            pegged_ref_count: c.u32("PeggedRefCount")?,
            flags: c.u32("Flags")?,
        })
    }
}

/// GCBulkRCW element: a runtime-callable wrapper (a managed object wrapping a COM object).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rcw {
    pub object: u64,
    pub type_id: u64,
    pub iunknown: u64,
    pub vtable: u64,
    pub ref_count: u32,
    pub flags: u32,
}

impl BulkValue for Rcw {
    fn size(_: u8) -> usize {
        40
    }
    fn read(c: &mut Cursor<'_>) -> Result<Self, DecodeError> {
        Ok(Rcw {
            object: c.u64("ObjectID")?,
            type_id: c.u64("TypeID")?,
            iunknown: c.u64("IUnknown")?,
            vtable: c.u64("VTable")?,
            ref_count: c.u32("RefCount")?,
            flags: c.u32("Flags")?,
        })
    }
}

/// TypeFlags bits of a BulkType element.
pub mod type_flags {
    pub const DELEGATE: u32 = 0x1;
    pub const FINALIZABLE: u32 = 0x2;
    pub const EXTERNALLY_IMPLEMENTED_COM_OBJECT: u32 = 0x4;
    pub const ARRAY: u32 = 0x8;
}

/// One BulkType element: a type's id (its MethodTable) and name.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeDesc<'a> {
    pub type_id: u64,
    pub module_id: u64,
    pub type_name_id: u32,
    /// [`type_flags`] bits.
    pub flags: u32,
    pub cor_element_type: u8,
    /// Full name (empty without the GCHeapAndTypeNames keyword).
    pub name: Utf16Str<'a>,
    /// Type ids of the generic arguments (or an array's element type).
    pub type_parameters: Vec<u64>,
}

impl<'a> TypeDesc<'a> {
    fn decode_bulk(payload: &'a [u8], pointer_size: u8) -> Result<Vec<Self>, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, "BulkType")?;
        let count = c.u32("Count")?;
        let _clr_instance_id = c.u16("ClrInstanceID")?;
        // Smallest element: 29 fixed bytes, an empty string (2) and the parameter count (4).
        c.check_count(u64::from(count), 35, "Values")?;
        let mut out = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let type_id = c.u64("TypeID")?;
            let module_id = c.u64("ModuleID")?;
            let type_name_id = c.u32("TypeNameID")?;
            let flags = c.u32("Flags")?;
            let cor_element_type = c.u8("CorElementType")?;
            let name = c.utf16z("Name")?;
            let n = c.u32("TypeParameterCount")?;
            c.check_count(u64::from(n), 8, "TypeParameters")?;
            let mut type_parameters = Vec::with_capacity(n as usize);
            for _ in 0..n {
                type_parameters.push(c.u64("TypeParameters")?);
            }
            out.push(TypeDesc {
                type_id,
                module_id,
                type_name_id,
                flags,
                cor_element_type,
                name,
                type_parameters,
            });
        }
        Ok(out)
    }
}

/// GCRootStaticVarFlags bits.
pub mod static_var_flags {
    pub const THREAD_LOCAL: u32 = 0x1;
}

/// One GCBulkRootStaticVar element: a static field holding an object.
#[derive(Debug, Clone, PartialEq)]
pub struct StaticRoot<'a> {
    /// Address of the static's storage.
    pub root_id: u64,
    pub object: u64,
    /// The type declaring the field.
    pub type_id: u64,
    pub flags: u32,
    pub field_name: Utf16Str<'a>,
}

impl<'a> StaticRoot<'a> {
    fn decode_bulk(payload: &'a [u8], pointer_size: u8) -> Result<Vec<Self>, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, "GCBulkRootStaticVar")?;
        let count = c.u32("Count")?;
        let _app_domain = c.u64("AppDomainID")?;
        let _clr_instance_id = c.u16("ClrInstanceID")?;
        c.check_count(u64::from(count), 30, "Values")?;
        let mut out = Vec::with_capacity(count as usize);
        for _ in 0..count {
            out.push(StaticRoot {
                root_id: c.u64("GCRootID")?,
                object: c.u64("ObjectID")?,
                type_id: c.u64("TypeID")?,
                flags: c.u32("Flags")?,
                field_name: c.utf16z("FieldName")?,
            });
        }
        Ok(out)
    }
}
