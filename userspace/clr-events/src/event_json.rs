//! Decoded runtime events as JSON fields (see [`crate::json`]): [`ClrEvent::name`] and
//! [`ClrEvent::write_fields`].
//!
//! Addresses and runtime handles (`MethodID`, `TypeID`, `Address`…) are written as `"0x…"`
//! strings, other integers as numbers.
//!
//! ```
//! use clr_events::{ClrEvent, RawEvent, decode, ids, providers, json::Style};
//!
//! let mut payload = Vec::new();
//! for v in [7u32, 2, 1, 0] {
//!     payload.extend_from_slice(&v.to_le_bytes());
//! }
//! payload.extend_from_slice(&3u16.to_le_bytes());
//! payload.extend_from_slice(&0u64.to_le_bytes());
//! let raw = RawEvent {
//!     provider: providers::RUNTIME,
//!     event_id: ids::runtime::GC_START,
//!     version: 2,
//!     payload: &payload,
//!     pointer_size: 8,
//! };
//! let ev = decode(&raw)?;
//! let mut out = Vec::new();
//! ev.write_fields(&mut out, Style::Json);
//! assert_eq!(ev.name(), "GCStart");
//! assert_eq!(
//!     String::from_utf8(out).unwrap(),
//!     r#"{"Count":7,"Depth":2,"Reason":"Induced","Type":"NonConcurrentGC","ClrInstanceID":3,"ClientSequenceNumber":0}"#
//! );
//! # Ok::<(), clr_events::DecodeError>(())
//! ```

use crate::ClrEvent;
use crate::alloc::{AllocationSampled, AllocationTick, HeapKind, SampledObjectAllocation};
use crate::contention::{ContentionKind, ContentionLockCreated, ContentionStart, ContentionStop};
use crate::exceptions::{ExceptionHandling, ExceptionThrown};
use crate::gc::{GcEnd, GcHeapStats, GcStart, GcSuspendEeBegin, GcTriggered};
use crate::gc_enums::{GcReason, GcType, SuspendReason};
use crate::gc_history::{GcGlobalHeapHistory, GcPerHeapHistory, GenerationData};
use crate::json::{Fields, Key, Style, ToJson};
use crate::key;
use crate::methods::MethodInfo;
use crate::modules::{ModuleInfo, PdbInfo};
use crate::threads::{SampleType, ThreadInfo, ThreadSample};

/// An address or runtime handle, written as a `"0x…"` string (exact in every JSON reader).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hex(pub u64);

impl ToJson for Hex {
    #[inline(always)]
    fn write_json(&self, out: &mut Vec<u8>) {
        crate::json::put_hex_string(out, self.0);
    }
}

fn hex(v: Option<u64>) -> Option<Hex> {
    v.map(Hex)
}

macro_rules! named_json {
    ($($t:ident),*) => {$(
        impl ToJson for $t {
            /// The value's name; a value the map does not know, as its number.
            fn write_json(&self, out: &mut Vec<u8>) {
                match self {
                    $t::Other(v) => v.write_json(out),
                    known => crate::json::write_plain(known.name(), out),
                }
            }
        }
    )*};
}
named_json!(GcReason, GcType, SuspendReason, HeapKind);

impl ToJson for ContentionKind {
    fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            ContentionKind::Managed => crate::json::write_plain("Managed", out),
            ContentionKind::Native => crate::json::write_plain("Native", out),
            ContentionKind::Other(v) => v.write_json(out),
        }
    }
}

impl ToJson for SampleType {
    fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            SampleType::Error => crate::json::write_plain("Error", out),
            SampleType::External => crate::json::write_plain("External", out),
            SampleType::Managed => crate::json::write_plain("Managed", out),
            SampleType::Other(v) => v.write_json(out),
        }
    }
}

impl ToJson for GenerationData {
    fn write_json(&self, out: &mut Vec<u8>) {
        let mut f = Fields::begin(out, Style::Json);
        f.field(&key!("SizeBefore"), &self.size_before)
            .field(&key!("FreeListBefore"), &self.free_list_before)
            .field(&key!("FreeObjBefore"), &self.free_obj_before)
            .field(&key!("SizeAfter"), &self.size_after)
            .field(&key!("FreeListAfter"), &self.free_list_after)
            .field(&key!("FreeObjAfter"), &self.free_obj_after)
            .field(&key!("In"), &self.in_bytes)
            .field(&key!("PinnedSurv"), &self.pinned_surv)
            .field(&key!("NonPinnedSurv"), &self.non_pinned_surv)
            .field(&key!("NewAllocation"), &self.new_allocation);
        f.end();
    }
}

impl ClrEvent<'_> {
    /// The manifest's name of the event ("GCStart", "GCAllocationTick", "MethodDCEndVerbose");
    /// empty for [`ClrEvent::Unknown`].
    pub fn name(&self) -> &'static str {
        use ClrEvent as E;
        match self {
            E::GcStart(_) => "GCStart",
            E::GcEnd(_) => "GCEnd",
            E::GcHeapStats(_) => "GCHeapStats",
            E::GcSuspendEeBegin(_) => "GCSuspendEEBegin",
            E::GcSuspendEeEnd { .. } => "GCSuspendEEEnd",
            E::GcRestartEeBegin { .. } => "GCRestartEEBegin",
            E::GcRestartEeEnd { .. } => "GCRestartEEEnd",
            E::GcTriggered(_) => "GCTriggered",
            E::GcPerHeapHistory(_) => "GCPerHeapHistory",
            E::GcGlobalHeapHistory(_) => "GCGlobalHeapHistory",
            E::AllocationTick(_) => "GCAllocationTick",
            E::AllocationSampled(_) => "AllocationSampled",
            E::SampledObjectAllocationHigh(_) => "GCSampledObjectAllocationHigh",
            E::SampledObjectAllocationLow(_) => "GCSampledObjectAllocationLow",
            E::ExceptionThrown(_) => "ExceptionThrown",
            E::ExceptionThrownStop => "ExceptionThrownStop",
            E::ExceptionCatchStart(_) => "ExceptionCatchStart",
            E::ExceptionCatchStop => "ExceptionCatchStop",
            E::ExceptionFinallyStart(_) => "ExceptionFinallyStart",
            E::ExceptionFinallyStop => "ExceptionFinallyStop",
            E::ExceptionFilterStart(_) => "ExceptionFilterStart",
            E::ExceptionFilterStop => "ExceptionFilterStop",
            E::ContentionStart(_) => "ContentionStart",
            E::ContentionStop(_) => "ContentionStop",
            E::ContentionLockCreated(_) => "ContentionLockCreated",
            E::MethodLoad(_) => "MethodLoad",
            E::MethodUnload(_) => "MethodUnload",
            E::MethodLoadVerbose(_) => "MethodLoadVerbose",
            E::MethodUnloadVerbose(_) => "MethodUnloadVerbose",
            E::MethodDcStart(_) => "MethodDCStart",
            E::MethodDcEnd(_) => "MethodDCEnd",
            E::MethodDcStartVerbose(_) => "MethodDCStartVerbose",
            E::MethodDcEndVerbose(_) => "MethodDCEndVerbose",
            E::ModuleLoad(_) => "ModuleLoad",
            E::ModuleUnload(_) => "ModuleUnload",
            E::ModuleDcStart(_) => "ModuleDCStart",
            E::ModuleDcEnd(_) => "ModuleDCEnd",
            E::ThreadCreated(_) => "ThreadCreated",
            E::ThreadDcEnd(_) => "ThreadDC",
            E::DcStartInit { .. } => "DCStartInit",
            E::DcStartComplete { .. } => "DCStartComplete",
            E::DcEndInit { .. } => "DCEndInit",
            E::DcEndComplete { .. } => "DCEndComplete",
            E::ThreadSample(_) => "ThreadSample",
            E::Unknown => "",
        }
    }

    /// Writes the event's payload fields: a JSON object (`Style::Json`) or `Name=value`
    /// pairs (`Style::Text`). [`ClrEvent::Unknown`] has no fields.
    pub fn write_fields(&self, out: &mut Vec<u8>, style: Style) {
        use ClrEvent as E;
        let mut f = Fields::begin(out, style);
        match self {
            E::GcStart(e) => gc_start(&mut f, e),
            E::GcEnd(e) => gc_end(&mut f, e),
            E::GcHeapStats(e) => heap_stats(&mut f, e),
            E::GcSuspendEeBegin(e) => suspend_begin(&mut f, e),
            E::GcSuspendEeEnd { clr_instance_id }
            | E::GcRestartEeBegin { clr_instance_id }
            | E::GcRestartEeEnd { clr_instance_id }
            | E::DcStartInit { clr_instance_id }
            | E::DcStartComplete { clr_instance_id }
            | E::DcEndInit { clr_instance_id }
            | E::DcEndComplete { clr_instance_id } => {
                f.opt(&key!("ClrInstanceID"), clr_instance_id);
            }
            E::GcTriggered(e) => gc_triggered(&mut f, e),
            E::GcPerHeapHistory(e) => per_heap(&mut f, e),
            E::GcGlobalHeapHistory(e) => global_heap(&mut f, e),
            E::AllocationTick(e) => allocation_tick(&mut f, e),
            E::AllocationSampled(e) => allocation_sampled(&mut f, e),
            E::SampledObjectAllocationHigh(e) | E::SampledObjectAllocationLow(e) => {
                sampled_object(&mut f, e)
            }
            E::ExceptionThrown(e) => exception_thrown(&mut f, e),
            E::ExceptionCatchStart(e)
            | E::ExceptionFinallyStart(e)
            | E::ExceptionFilterStart(e) => exception_handling(&mut f, e),
            E::ExceptionThrownStop
            | E::ExceptionCatchStop
            | E::ExceptionFinallyStop
            | E::ExceptionFilterStop
            | E::Unknown => {}
            E::ContentionStart(e) => contention_start(&mut f, e),
            E::ContentionStop(e) => contention_stop(&mut f, e),
            E::ContentionLockCreated(e) => lock_created(&mut f, e),
            E::MethodLoad(e)
            | E::MethodUnload(e)
            | E::MethodLoadVerbose(e)
            | E::MethodUnloadVerbose(e)
            | E::MethodDcStart(e)
            | E::MethodDcEnd(e)
            | E::MethodDcStartVerbose(e)
            | E::MethodDcEndVerbose(e) => method(&mut f, e),
            E::ModuleLoad(e) | E::ModuleUnload(e) | E::ModuleDcStart(e) | E::ModuleDcEnd(e) => {
                module(&mut f, e)
            }
            E::ThreadCreated(e) | E::ThreadDcEnd(e) => thread(&mut f, e),
            E::ThreadSample(e) => thread_sample(&mut f, e),
        }
        f.end();
    }
}

fn gc_start(f: &mut Fields<'_>, e: &GcStart) {
    f.field(&key!("Count"), &e.count)
        .opt(&key!("Depth"), &e.depth)
        .field(&key!("Reason"), &e.reason)
        .opt(&key!("Type"), &e.gc_type)
        .opt(&key!("ClrInstanceID"), &e.clr_instance_id)
        .opt(&key!("ClientSequenceNumber"), &e.client_sequence_number);
}

fn gc_end(f: &mut Fields<'_>, e: &GcEnd) {
    f.field(&key!("Count"), &e.count)
        .field(&key!("Depth"), &e.depth)
        .opt(&key!("ClrInstanceID"), &e.clr_instance_id);
}

fn heap_stats(f: &mut Fields<'_>, e: &GcHeapStats) {
    const SIZE: [Key; 4] = [
        key!("GenerationSize0"),
        key!("GenerationSize1"),
        key!("GenerationSize2"),
        key!("GenerationSize3"),
    ];
    const PROMOTED: [Key; 4] = [
        key!("TotalPromotedSize0"),
        key!("TotalPromotedSize1"),
        key!("TotalPromotedSize2"),
        key!("TotalPromotedSize3"),
    ];
    for i in 0..4 {
        f.field(&SIZE[i], &e.generation_size[i])
            .field(&PROMOTED[i], &e.total_promoted_size[i]);
    }
    f.field(&key!("FinalizationPromotedSize"), &e.finalization_promoted_size)
        .field(&key!("FinalizationPromotedCount"), &e.finalization_promoted_count)
        .field(&key!("PinnedObjectCount"), &e.pinned_object_count)
        .field(&key!("SinkBlockCount"), &e.sink_block_count)
        .field(&key!("GCHandleCount"), &e.gc_handle_count)
        .opt(&key!("ClrInstanceID"), &e.clr_instance_id)
        .opt(&key!("GenerationSize4"), &e.poh_size)
        .opt(&key!("TotalPromotedSize4"), &e.poh_promoted_size);
}

fn suspend_begin(f: &mut Fields<'_>, e: &GcSuspendEeBegin) {
    f.field(&key!("Reason"), &e.reason)
        .opt(&key!("Count"), &e.count)
        .opt(&key!("ClrInstanceID"), &e.clr_instance_id);
}

fn gc_triggered(f: &mut Fields<'_>, e: &GcTriggered) {
    f.field(&key!("Reason"), &e.reason)
        .field(&key!("ClrInstanceID"), &e.clr_instance_id);
}

fn per_heap(f: &mut Fields<'_>, e: &GcPerHeapHistory) {
    f.field(&key!("FreeListAllocated"), &e.free_list_allocated)
        .field(&key!("FreeListRejected"), &e.free_list_rejected)
        .field(&key!("EndOfSegAllocated"), &e.end_of_seg_allocated)
        .field(&key!("CondemnedAllocated"), &e.condemned_allocated)
        .field(&key!("PinnedAllocated"), &e.pinned_allocated)
        .field(&key!("PinnedAllocatedAdvance"), &e.pinned_allocated_advance)
        .field(&key!("RunningFreeListEfficiency"), &e.running_free_list_efficiency)
        .field(&key!("CondemnReasons0"), &e.condemn_reasons.generations)
        .field(&key!("CondemnReasons1"), &e.condemn_reasons.conditions)
        .field(&key!("CompactMechanisms"), &e.compact_mechanisms)
        .field(&key!("ExpandMechanisms"), &e.expand_mechanisms)
        .field(&key!("HeapIndex"), &e.heap_index)
        .field(&key!("ExtraGen0Commit"), &e.extra_gen0_commit)
        .field(&key!("Values"), &e.generations)
        .field(&key!("ClrInstanceID"), &e.clr_instance_id);
}

fn global_heap(f: &mut Fields<'_>, e: &GcGlobalHeapHistory) {
    f.field(&key!("FinalYoungestDesired"), &e.final_youngest_desired)
        .field(&key!("NumHeaps"), &e.num_heaps)
        .field(&key!("CondemnedGeneration"), &e.condemned_generation)
        .field(&key!("Gen0ReductionCount"), &e.gen0_reduction_count)
        .field(&key!("Reason"), &e.reason)
        .field(&key!("GlobalMechanisms"), &e.global_mechanisms)
        .field(&key!("ClrInstanceID"), &e.clr_instance_id)
        .opt(&key!("PauseMode"), &e.pause_mode)
        .opt(&key!("MemoryPressure"), &e.memory_pressure)
        .opt(&key!("CondemnReasons0"), &e.condemn_reasons.map(|c| c.generations))
        .opt(&key!("CondemnReasons1"), &e.condemn_reasons.map(|c| c.conditions))
        .opt(&key!("Times"), &e.times);
}

fn allocation_tick(f: &mut Fields<'_>, e: &AllocationTick<'_>) {
    f.field(&key!("AllocationAmount"), &e.allocation_amount)
        .field(&key!("AllocationKind"), &e.kind)
        .opt(&key!("ClrInstanceID"), &e.clr_instance_id)
        .opt(&key!("AllocationAmount64"), &e.allocation_amount64)
        .opt(&key!("TypeID"), &hex(e.type_id))
        .opt(&key!("TypeName"), &e.type_name)
        .opt(&key!("HeapIndex"), &e.heap_index)
        .opt(&key!("Address"), &hex(e.address))
        .opt(&key!("ObjectSize"), &e.object_size);
}

fn allocation_sampled(f: &mut Fields<'_>, e: &AllocationSampled<'_>) {
    f.field(&key!("AllocationKind"), &e.kind)
        .field(&key!("ClrInstanceID"), &e.clr_instance_id)
        .field(&key!("TypeID"), &Hex(e.type_id))
        .field(&key!("TypeName"), &e.type_name)
        .field(&key!("Address"), &Hex(e.address))
        .field(&key!("ObjectSize"), &e.object_size)
        .field(&key!("SampledByteOffset"), &e.sampled_byte_offset);
}

fn sampled_object(f: &mut Fields<'_>, e: &SampledObjectAllocation) {
    f.field(&key!("Address"), &Hex(e.address))
        .field(&key!("TypeID"), &Hex(e.type_id))
        .field(&key!("ObjectCountForTypeSample"), &e.object_count_for_type_sample)
        .field(&key!("TotalSizeForTypeSample"), &e.total_size_for_type_sample)
        .field(&key!("ClrInstanceID"), &e.clr_instance_id);
}

fn exception_thrown(f: &mut Fields<'_>, e: &ExceptionThrown<'_>) {
    f.field(&key!("ExceptionType"), &e.exception_type)
        .field(&key!("ExceptionMessage"), &e.message)
        .field(&key!("ExceptionEIP"), &Hex(e.eip))
        .field(&key!("ExceptionHRESULT"), &Hex(u64::from(e.hresult)))
        .field(&key!("ExceptionFlags"), &e.flags.0)
        .field(&key!("ClrInstanceID"), &e.clr_instance_id);
}

fn exception_handling(f: &mut Fields<'_>, e: &ExceptionHandling<'_>) {
    f.field(&key!("EntryEIP"), &Hex(e.entry_eip))
        .field(&key!("MethodID"), &Hex(e.method_id))
        .field(&key!("MethodName"), &e.method_name)
        .field(&key!("ClrInstanceID"), &e.clr_instance_id);
}

fn contention_start(f: &mut Fields<'_>, e: &ContentionStart) {
    f.field(&key!("ContentionFlags"), &e.kind)
        .opt(&key!("ClrInstanceID"), &e.clr_instance_id)
        .opt(&key!("LockID"), &hex(e.lock_id))
        .opt(&key!("AssociatedObjectID"), &hex(e.associated_object_id))
        .opt(&key!("LockOwnerThreadID"), &e.lock_owner_thread_id);
}

fn contention_stop(f: &mut Fields<'_>, e: &ContentionStop) {
    f.field(&key!("ContentionFlags"), &e.kind)
        .field(&key!("ClrInstanceID"), &e.clr_instance_id)
        .opt(&key!("DurationNs"), &e.duration_ns);
}

fn lock_created(f: &mut Fields<'_>, e: &ContentionLockCreated) {
    f.field(&key!("LockID"), &Hex(e.lock_id))
        .field(&key!("AssociatedObjectID"), &Hex(e.associated_object_id))
        .field(&key!("ClrInstanceID"), &e.clr_instance_id);
}

fn method(f: &mut Fields<'_>, e: &MethodInfo<'_>) {
    f.field(&key!("MethodID"), &Hex(e.method_id))
        .field(&key!("ModuleID"), &Hex(e.module_id))
        .field(&key!("MethodStartAddress"), &Hex(e.start_address))
        .field(&key!("MethodSize"), &e.size)
        .field(&key!("MethodToken"), &e.token)
        .field(&key!("MethodFlags"), &e.flags.0)
        .opt(&key!("MethodNamespace"), &e.namespace)
        .opt(&key!("MethodName"), &e.name)
        .opt(&key!("MethodSignature"), &e.signature)
        .opt(&key!("ClrInstanceID"), &e.clr_instance_id)
        .opt(&key!("ReJITID"), &e.rejit_id);
}

fn pdb(f: &mut Fields<'_>, names: [Key; 3], p: &Option<PdbInfo<'_>>) {
    if let Some(p) = p {
        f.field(&names[0], &p.signature)
            .field(&names[1], &p.age)
            .field(&names[2], &p.build_path);
    }
}

fn module(f: &mut Fields<'_>, e: &ModuleInfo<'_>) {
    f.field(&key!("ModuleID"), &Hex(e.module_id))
        .field(&key!("AssemblyID"), &Hex(e.assembly_id))
        .field(&key!("ModuleFlags"), &e.flags.0)
        .field(&key!("ModuleILPath"), &e.il_path)
        .field(&key!("ModuleNativePath"), &e.native_path)
        .opt(&key!("ClrInstanceID"), &e.clr_instance_id);
    pdb(
        f,
        [
            key!("ManagedPdbSignature"),
            key!("ManagedPdbAge"),
            key!("ManagedPdbBuildPath"),
        ],
        &e.managed_pdb,
    );
    pdb(
        f,
        [key!("NativePdbSignature"), key!("NativePdbAge"), key!("NativePdbBuildPath")],
        &e.native_pdb,
    );
}

fn thread(f: &mut Fields<'_>, e: &ThreadInfo) {
    f.field(&key!("ManagedThreadID"), &Hex(e.managed_thread_id))
        .field(&key!("AppDomainID"), &Hex(e.app_domain_id))
        .field(&key!("Flags"), &e.flags.0)
        .field(&key!("ManagedThreadIndex"), &e.managed_thread_index)
        .field(&key!("OSThreadID"), &e.os_thread_id)
        .field(&key!("ClrInstanceID"), &e.clr_instance_id);
}

fn thread_sample(f: &mut Fields<'_>, e: &ThreadSample) {
    f.field(&key!("Type"), &e.sample_type);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Utf16Str;
    use crate::exceptions::ExceptionFlags;

    fn fields(ev: &ClrEvent<'_>, style: Style) -> String {
        let mut out = Vec::new();
        ev.write_fields(&mut out, style);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn exception_fields_are_json_values() {
        let ty: Vec<u8> = "System.Invalid\"Op"
            .encode_utf16()
            .flat_map(|u| u.to_le_bytes())
            .collect();
        let msg: Vec<u8> = "line1\nline2 é"
            .encode_utf16()
            .flat_map(|u| u.to_le_bytes())
            .collect();
        let ev = ClrEvent::ExceptionThrown(ExceptionThrown {
            exception_type: Utf16Str::from_raw(&ty),
            message: Utf16Str::from_raw(&msg),
            eip: 0x7f00_dead_beef,
            hresult: 0x8013_1509,
            flags: ExceptionFlags(0x10),
            clr_instance_id: 9,
        });
        assert_eq!(ev.name(), "ExceptionThrown");
        assert_eq!(
            fields(&ev, Style::Json),
            r#"{"ExceptionType":"System.Invalid\"Op","ExceptionMessage":"line1\nline2 é","ExceptionEIP":"0x7f00deadbeef","ExceptionHRESULT":"0x80131509","ExceptionFlags":16,"ClrInstanceID":9}"#
        );
        assert_eq!(
            fields(&ev, Style::Text),
            r#"ExceptionType="System.Invalid\"Op" ExceptionMessage="line1\nline2 é" ExceptionEIP="0x7f00deadbeef" ExceptionHRESULT="0x80131509" ExceptionFlags=16 ClrInstanceID=9"#
        );
    }

    #[test]
    fn unknown_values_and_missing_fields() {
        let ev = ClrEvent::GcStart(GcStart {
            count: 1,
            depth: None,
            reason: GcReason::Other(99),
            gc_type: None,
            clr_instance_id: None,
            client_sequence_number: None,
        });
        assert_eq!(fields(&ev, Style::Json), r#"{"Count":1,"Reason":99}"#);
        assert_eq!(fields(&ClrEvent::ExceptionCatchStop, Style::Json), "{}");
        assert_eq!(fields(&ClrEvent::ExceptionCatchStop, Style::Text), "");
        let mut out = Vec::new();
        Hex(0).write_json(&mut out);
        Hex(u64::MAX).write_json(&mut out);
        assert_eq!(out, b"\"0x0\"\"0xffffffffffffffff\"");
    }
}
