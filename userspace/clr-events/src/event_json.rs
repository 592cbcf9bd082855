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
use crate::json::{Fields, Style, ToJson};
use crate::methods::MethodInfo;
use crate::modules::{ModuleInfo, PdbInfo};
use crate::threads::{SampleType, ThreadInfo, ThreadSample};

/// An address or runtime handle, written as a `"0x…"` string (exact in every JSON reader).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hex(pub u64);

impl ToJson for Hex {
    fn write_json(&self, out: &mut Vec<u8>) {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut buf = [0u8; 16];
        let mut n = self.0;
        let mut i = buf.len();
        loop {
            i -= 1;
            buf[i] = DIGITS[(n & 15) as usize];
            n >>= 4;
            if n == 0 {
                break;
            }
        }
        out.extend_from_slice(b"\"0x");
        crate::json::put(out, &buf[i..]);
        out.push(b'"');
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
                    known => known.name().write_json(out),
                }
            }
        }
    )*};
}
named_json!(GcReason, GcType, SuspendReason, HeapKind);

impl ToJson for ContentionKind {
    fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            ContentionKind::Managed => "Managed".write_json(out),
            ContentionKind::Native => "Native".write_json(out),
            ContentionKind::Other(v) => v.write_json(out),
        }
    }
}

impl ToJson for SampleType {
    fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            SampleType::Error => "Error".write_json(out),
            SampleType::External => "External".write_json(out),
            SampleType::Managed => "Managed".write_json(out),
            SampleType::Other(v) => v.write_json(out),
        }
    }
}

impl ToJson for GenerationData {
    fn write_json(&self, out: &mut Vec<u8>) {
        let mut f = Fields::begin(out, Style::Json);
        f.field("SizeBefore", &self.size_before)
            .field("FreeListBefore", &self.free_list_before)
            .field("FreeObjBefore", &self.free_obj_before)
            .field("SizeAfter", &self.size_after)
            .field("FreeListAfter", &self.free_list_after)
            .field("FreeObjAfter", &self.free_obj_after)
            .field("In", &self.in_bytes)
            .field("PinnedSurv", &self.pinned_surv)
            .field("NonPinnedSurv", &self.non_pinned_surv)
            .field("NewAllocation", &self.new_allocation);
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
                f.opt("ClrInstanceID", clr_instance_id);
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
    f.field("Count", &e.count)
        .opt("Depth", &e.depth)
        .field("Reason", &e.reason)
        .opt("Type", &e.gc_type)
        .opt("ClrInstanceID", &e.clr_instance_id)
        .opt("ClientSequenceNumber", &e.client_sequence_number);
}

fn gc_end(f: &mut Fields<'_>, e: &GcEnd) {
    f.field("Count", &e.count)
        .field("Depth", &e.depth)
        .opt("ClrInstanceID", &e.clr_instance_id);
}

fn heap_stats(f: &mut Fields<'_>, e: &GcHeapStats) {
    const SIZE: [&str; 4] = [
        "GenerationSize0",
        "GenerationSize1",
        "GenerationSize2",
        "GenerationSize3",
    ];
    const PROMOTED: [&str; 4] = [
        "TotalPromotedSize0",
        "TotalPromotedSize1",
        "TotalPromotedSize2",
        "TotalPromotedSize3",
    ];
    for i in 0..4 {
        f.field(SIZE[i], &e.generation_size[i])
            .field(PROMOTED[i], &e.total_promoted_size[i]);
    }
    f.field("FinalizationPromotedSize", &e.finalization_promoted_size)
        .field("FinalizationPromotedCount", &e.finalization_promoted_count)
        .field("PinnedObjectCount", &e.pinned_object_count)
        .field("SinkBlockCount", &e.sink_block_count)
        .field("GCHandleCount", &e.gc_handle_count)
        .opt("ClrInstanceID", &e.clr_instance_id)
        .opt("GenerationSize4", &e.poh_size)
        .opt("TotalPromotedSize4", &e.poh_promoted_size);
}

fn suspend_begin(f: &mut Fields<'_>, e: &GcSuspendEeBegin) {
    f.field("Reason", &e.reason)
        .opt("Count", &e.count)
        .opt("ClrInstanceID", &e.clr_instance_id);
}

fn gc_triggered(f: &mut Fields<'_>, e: &GcTriggered) {
    f.field("Reason", &e.reason)
        .field("ClrInstanceID", &e.clr_instance_id);
}

fn per_heap(f: &mut Fields<'_>, e: &GcPerHeapHistory) {
    f.field("FreeListAllocated", &e.free_list_allocated)
        .field("FreeListRejected", &e.free_list_rejected)
        .field("EndOfSegAllocated", &e.end_of_seg_allocated)
        .field("CondemnedAllocated", &e.condemned_allocated)
        .field("PinnedAllocated", &e.pinned_allocated)
        .field("PinnedAllocatedAdvance", &e.pinned_allocated_advance)
        .field("RunningFreeListEfficiency", &e.running_free_list_efficiency)
        .field("CondemnReasons0", &e.condemn_reasons.generations)
        .field("CondemnReasons1", &e.condemn_reasons.conditions)
        .field("CompactMechanisms", &e.compact_mechanisms)
        .field("ExpandMechanisms", &e.expand_mechanisms)
        .field("HeapIndex", &e.heap_index)
        .field("ExtraGen0Commit", &e.extra_gen0_commit)
        .field("Values", &e.generations)
        .field("ClrInstanceID", &e.clr_instance_id);
}

fn global_heap(f: &mut Fields<'_>, e: &GcGlobalHeapHistory) {
    f.field("FinalYoungestDesired", &e.final_youngest_desired)
        .field("NumHeaps", &e.num_heaps)
        .field("CondemnedGeneration", &e.condemned_generation)
        .field("Gen0ReductionCount", &e.gen0_reduction_count)
        .field("Reason", &e.reason)
        .field("GlobalMechanisms", &e.global_mechanisms)
        .field("ClrInstanceID", &e.clr_instance_id)
        .opt("PauseMode", &e.pause_mode)
        .opt("MemoryPressure", &e.memory_pressure)
        .opt("CondemnReasons0", &e.condemn_reasons.map(|c| c.generations))
        .opt("CondemnReasons1", &e.condemn_reasons.map(|c| c.conditions))
        .opt("Times", &e.times);
}

fn allocation_tick(f: &mut Fields<'_>, e: &AllocationTick<'_>) {
    f.field("AllocationAmount", &e.allocation_amount)
        .field("AllocationKind", &e.kind)
        .opt("ClrInstanceID", &e.clr_instance_id)
        .opt("AllocationAmount64", &e.allocation_amount64)
        .opt("TypeID", &hex(e.type_id))
        .opt("TypeName", &e.type_name)
        .opt("HeapIndex", &e.heap_index)
        .opt("Address", &hex(e.address))
        .opt("ObjectSize", &e.object_size);
}

fn allocation_sampled(f: &mut Fields<'_>, e: &AllocationSampled<'_>) {
    f.field("AllocationKind", &e.kind)
        .field("ClrInstanceID", &e.clr_instance_id)
        .field("TypeID", &Hex(e.type_id))
        .field("TypeName", &e.type_name)
        .field("Address", &Hex(e.address))
        .field("ObjectSize", &e.object_size)
        .field("SampledByteOffset", &e.sampled_byte_offset);
}

fn sampled_object(f: &mut Fields<'_>, e: &SampledObjectAllocation) {
    f.field("Address", &Hex(e.address))
        .field("TypeID", &Hex(e.type_id))
        .field("ObjectCountForTypeSample", &e.object_count_for_type_sample)
        .field("TotalSizeForTypeSample", &e.total_size_for_type_sample)
        .field("ClrInstanceID", &e.clr_instance_id);
}

fn exception_thrown(f: &mut Fields<'_>, e: &ExceptionThrown<'_>) {
    f.field("ExceptionType", &e.exception_type)
        .field("ExceptionMessage", &e.message)
        .field("ExceptionEIP", &Hex(e.eip))
        .field("ExceptionHRESULT", &Hex(u64::from(e.hresult)))
        .field("ExceptionFlags", &e.flags.0)
        .field("ClrInstanceID", &e.clr_instance_id);
}

fn exception_handling(f: &mut Fields<'_>, e: &ExceptionHandling<'_>) {
    f.field("EntryEIP", &Hex(e.entry_eip))
        .field("MethodID", &Hex(e.method_id))
        .field("MethodName", &e.method_name)
        .field("ClrInstanceID", &e.clr_instance_id);
}

fn contention_start(f: &mut Fields<'_>, e: &ContentionStart) {
    f.field("ContentionFlags", &e.kind)
        .opt("ClrInstanceID", &e.clr_instance_id)
        .opt("LockID", &hex(e.lock_id))
        .opt("AssociatedObjectID", &hex(e.associated_object_id))
        .opt("LockOwnerThreadID", &e.lock_owner_thread_id);
}

fn contention_stop(f: &mut Fields<'_>, e: &ContentionStop) {
    f.field("ContentionFlags", &e.kind)
        .field("ClrInstanceID", &e.clr_instance_id)
        .opt("DurationNs", &e.duration_ns);
}

fn lock_created(f: &mut Fields<'_>, e: &ContentionLockCreated) {
    f.field("LockID", &Hex(e.lock_id))
        .field("AssociatedObjectID", &Hex(e.associated_object_id))
        .field("ClrInstanceID", &e.clr_instance_id);
}

fn method(f: &mut Fields<'_>, e: &MethodInfo<'_>) {
    f.field("MethodID", &Hex(e.method_id))
        .field("ModuleID", &Hex(e.module_id))
        .field("MethodStartAddress", &Hex(e.start_address))
        .field("MethodSize", &e.size)
        .field("MethodToken", &e.token)
        .field("MethodFlags", &e.flags.0)
        .opt("MethodNamespace", &e.namespace)
        .opt("MethodName", &e.name)
        .opt("MethodSignature", &e.signature)
        .opt("ClrInstanceID", &e.clr_instance_id)
        .opt("ReJITID", &e.rejit_id);
}

fn pdb(f: &mut Fields<'_>, names: [&str; 3], p: &Option<PdbInfo<'_>>) {
    if let Some(p) = p {
        f.field(names[0], &p.signature)
            .field(names[1], &p.age)
            .field(names[2], &p.build_path);
    }
}

fn module(f: &mut Fields<'_>, e: &ModuleInfo<'_>) {
    f.field("ModuleID", &Hex(e.module_id))
        .field("AssemblyID", &Hex(e.assembly_id))
        .field("ModuleFlags", &e.flags.0)
        .field("ModuleILPath", &e.il_path)
        .field("ModuleNativePath", &e.native_path)
        .opt("ClrInstanceID", &e.clr_instance_id);
    pdb(
        f,
        [
            "ManagedPdbSignature",
            "ManagedPdbAge",
            "ManagedPdbBuildPath",
        ],
        &e.managed_pdb,
    );
    pdb(
        f,
        ["NativePdbSignature", "NativePdbAge", "NativePdbBuildPath"],
        &e.native_pdb,
    );
}

fn thread(f: &mut Fields<'_>, e: &ThreadInfo) {
    f.field("ManagedThreadID", &Hex(e.managed_thread_id))
        .field("AppDomainID", &Hex(e.app_domain_id))
        .field("Flags", &e.flags.0)
        .field("ManagedThreadIndex", &e.managed_thread_index)
        .field("OSThreadID", &e.os_thread_id)
        .field("ClrInstanceID", &e.clr_instance_id);
}

fn thread_sample(f: &mut Fields<'_>, e: &ThreadSample) {
    f.field("Type", &e.sample_type);
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
