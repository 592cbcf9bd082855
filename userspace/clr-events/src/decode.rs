//! Dispatch of a [`RawEvent`] to its typed decoder by (provider, event id, version).

use crate::RawEvent;
use crate::alloc::{AllocationSampled, AllocationTick, SampledObjectAllocation};
use crate::contention::{ContentionLockCreated, ContentionStart, ContentionStop};
use crate::error::DecodeError;
use crate::exceptions::{ExceptionHandling, ExceptionThrown};
use crate::gc::{
    GcEnd, GcHeapStats, GcStart, GcSuspendEeBegin, GcTriggered, decode_clr_instance_only,
};
use crate::gc_history::{GcGlobalHeapHistory, GcPerHeapHistory};
use crate::ids;
use crate::methods::MethodInfo;
use crate::modules::ModuleInfo;
use crate::providers;
use crate::threads::{ThreadInfo, ThreadSample};

/// Static layout names for error messages ("MethodLoadVerbose_V2" etc.): the V0, V1 and V2+
/// spellings, picked by index (no string compares per event).
macro_rules! versioned {
    ($b:literal) => {
        [$b, concat!($b, "_V1"), concat!($b, "_V2")]
    };
}

/// A decoded runtime event. Strings borrow the payload (see [`crate::Utf16Str`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ClrEvent<'a> {
    GcStart(GcStart),
    GcEnd(GcEnd),
    GcHeapStats(GcHeapStats),
    GcSuspendEeBegin(GcSuspendEeBegin),
    GcSuspendEeEnd {
        clr_instance_id: Option<u16>,
    },
    GcRestartEeBegin {
        clr_instance_id: Option<u16>,
    },
    GcRestartEeEnd {
        clr_instance_id: Option<u16>,
    },
    GcTriggered(GcTriggered),
    GcPerHeapHistory(GcPerHeapHistory),
    GcGlobalHeapHistory(GcGlobalHeapHistory),
    AllocationTick(AllocationTick<'a>),
    AllocationSampled(AllocationSampled<'a>),
    SampledObjectAllocationHigh(SampledObjectAllocation),
    SampledObjectAllocationLow(SampledObjectAllocation),
    ExceptionThrown(ExceptionThrown<'a>),
    ExceptionThrownStop,
    ExceptionCatchStart(ExceptionHandling<'a>),
    ExceptionCatchStop,
    ExceptionFinallyStart(ExceptionHandling<'a>),
    ExceptionFinallyStop,
    ExceptionFilterStart(ExceptionHandling<'a>),
    ExceptionFilterStop,
    ContentionStart(ContentionStart),
    ContentionStop(ContentionStop),
    ContentionLockCreated(ContentionLockCreated),
    /// Runtime MethodLoad (141): no names.
    MethodLoad(MethodInfo<'a>),
    /// Runtime MethodUnload (142): no names.
    MethodUnload(MethodInfo<'a>),
    /// Runtime MethodLoadVerbose (143).
    MethodLoadVerbose(MethodInfo<'a>),
    /// Runtime MethodUnloadVerbose (144).
    MethodUnloadVerbose(MethodInfo<'a>),
    /// Rundown MethodDCStart (141).
    MethodDcStart(MethodInfo<'a>),
    /// Rundown MethodDCEnd (142).
    MethodDcEnd(MethodInfo<'a>),
    /// Rundown MethodDCStartVerbose (143).
    MethodDcStartVerbose(MethodInfo<'a>),
    /// Rundown MethodDCEndVerbose (144).
    MethodDcEndVerbose(MethodInfo<'a>),
    ModuleLoad(ModuleInfo<'a>),
    ModuleUnload(ModuleInfo<'a>),
    ModuleDcStart(ModuleInfo<'a>),
    ModuleDcEnd(ModuleInfo<'a>),
    ThreadCreated(ThreadInfo),
    /// Rundown ThreadDC (159): a thread alive at rundown.
    ThreadDcEnd(ThreadInfo),
    /// Rundown DCStartInit (147): rundown of live methods begins (V1 carries the ClrInstanceID).
    DcStartInit {
        clr_instance_id: Option<u16>,
    },
    /// Rundown DCStartComplete (145).
    DcStartComplete {
        clr_instance_id: Option<u16>,
    },
    /// Rundown DCEndInit (148): end-rundown begins.
    DcEndInit {
        clr_instance_id: Option<u16>,
    },
    /// Rundown DCEndComplete (146): end-rundown finished; no more rundown events follow.
    DcEndComplete {
        clr_instance_id: Option<u16>,
    },
    ThreadSample(ThreadSample),
    /// An event (or an old payload-less version) this crate does not decode.
    Unknown,
}

#[inline]
fn provider_is(provider: &str, name: &str) -> bool {
    // The exact spelling first (a plain compare): streams name providers as the runtime does.
    provider == name || provider.eq_ignore_ascii_case(name)
}

/// Which typed decoders a provider has. Found once per provider name ([`Family::of`]), so a
/// caller that decodes many events of one metadata compares no provider names per event
/// ([`decode_as`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Runtime,
    Rundown,
    SampleProfiler,
    /// A provider this crate has no decoders for: every event is [`ClrEvent::Unknown`].
    Other,
}

impl Family {
    pub fn of(provider: &str) -> Family {
        if provider_is(provider, providers::RUNTIME) {
            Family::Runtime
        } else if provider_is(provider, providers::RUNDOWN) {
            Family::Rundown
        } else if provider_is(provider, providers::SAMPLE_PROFILER) {
            Family::SampleProfiler
        } else {
            Family::Other
        }
    }
}

/// Decodes one event. Unknown (provider, id) pairs give `Ok(ClrEvent::Unknown)`; a payload
/// shorter than its layout, or otherwise corrupt, gives a [`DecodeError`]; bytes beyond the
/// layout are ignored.
pub fn decode<'a>(ev: &RawEvent<'a>) -> Result<ClrEvent<'a>, DecodeError> {
    decode_as(Family::of(ev.provider), ev)
}

/// [`decode`] with the provider's [`Family`] already known (`ev.provider` is not looked at).
#[inline]
pub fn decode_as<'a>(family: Family, ev: &RawEvent<'a>) -> Result<ClrEvent<'a>, DecodeError> {
    match family {
        Family::Runtime => decode_runtime(ev),
        Family::Rundown => decode_rundown(ev),
        Family::SampleProfiler => match ev.event_id {
            ids::sample_profiler::THREAD_SAMPLE => Ok(ClrEvent::ThreadSample(
                ThreadSample::decode(ev.payload, ev.pointer_size)?,
            )),
            _ => Ok(ClrEvent::Unknown),
        },
        Family::Other => Ok(ClrEvent::Unknown),
    }
}

fn decode_runtime<'a>(ev: &RawEvent<'a>) -> Result<ClrEvent<'a>, DecodeError> {
    use ids::runtime as id;
    let (p, v, ps) = (ev.payload, ev.version, ev.pointer_size);
    Ok(match ev.event_id {
        id::GC_START => ClrEvent::GcStart(GcStart::decode(p, v, ps)?),
        id::GC_END => ClrEvent::GcEnd(GcEnd::decode(p, v, ps)?),
        id::GC_HEAP_STATS => ClrEvent::GcHeapStats(GcHeapStats::decode(p, v, ps)?),
        id::GC_SUSPEND_EE_BEGIN => ClrEvent::GcSuspendEeBegin(GcSuspendEeBegin::decode(p, v, ps)?),
        id::GC_SUSPEND_EE_END => ClrEvent::GcSuspendEeEnd {
            clr_instance_id: decode_clr_instance_only(p, v, ps, "GCSuspendEEEnd")?,
        },
        id::GC_RESTART_EE_BEGIN => ClrEvent::GcRestartEeBegin {
            clr_instance_id: decode_clr_instance_only(p, v, ps, "GCRestartEEBegin")?,
        },
        id::GC_RESTART_EE_END => ClrEvent::GcRestartEeEnd {
            clr_instance_id: decode_clr_instance_only(p, v, ps, "GCRestartEEEnd")?,
        },
        id::GC_TRIGGERED => ClrEvent::GcTriggered(GcTriggered::decode(p, ps)?),
        id::GC_PER_HEAP_HISTORY if v >= 3 => {
            ClrEvent::GcPerHeapHistory(GcPerHeapHistory::decode(p, ps)?)
        }
        id::GC_GLOBAL_HEAP_HISTORY => {
            ClrEvent::GcGlobalHeapHistory(GcGlobalHeapHistory::decode(p, v, ps)?)
        }
        id::GC_ALLOCATION_TICK => ClrEvent::AllocationTick(AllocationTick::decode(p, v, ps)?),
        id::ALLOCATION_SAMPLED => ClrEvent::AllocationSampled(AllocationSampled::decode(p, ps)?),
        id::GC_SAMPLED_OBJECT_ALLOCATION_HIGH => {
            ClrEvent::SampledObjectAllocationHigh(SampledObjectAllocation::decode(p, ps)?)
        }
        id::GC_SAMPLED_OBJECT_ALLOCATION_LOW => {
            ClrEvent::SampledObjectAllocationLow(SampledObjectAllocation::decode(p, ps)?)
        }
        id::EXCEPTION_THROWN if v >= 1 => {
            ClrEvent::ExceptionThrown(ExceptionThrown::decode(p, ps)?)
        }
        id::EXCEPTION_THROWN_STOP => ClrEvent::ExceptionThrownStop,
        id::EXCEPTION_CATCH_START => {
            ClrEvent::ExceptionCatchStart(ExceptionHandling::decode(p, ps, "ExceptionCatchStart")?)
        }
        id::EXCEPTION_CATCH_STOP => ClrEvent::ExceptionCatchStop,
        id::EXCEPTION_FINALLY_START => ClrEvent::ExceptionFinallyStart(ExceptionHandling::decode(
            p,
            ps,
            "ExceptionFinallyStart",
        )?),
        id::EXCEPTION_FINALLY_STOP => ClrEvent::ExceptionFinallyStop,
        id::EXCEPTION_FILTER_START => ClrEvent::ExceptionFilterStart(ExceptionHandling::decode(
            p,
            ps,
            "ExceptionFilterStart",
        )?),
        id::EXCEPTION_FILTER_STOP => ClrEvent::ExceptionFilterStop,
        id::CONTENTION_START => ClrEvent::ContentionStart(ContentionStart::decode(p, v, ps)?),
        id::CONTENTION_STOP => ClrEvent::ContentionStop(ContentionStop::decode(p, v, ps)?),
        id::CONTENTION_LOCK_CREATED => {
            ClrEvent::ContentionLockCreated(ContentionLockCreated::decode(p, ps)?)
        }
        id::METHOD_LOAD => ClrEvent::MethodLoad(MethodInfo::decode(
            p,
            v,
            ps,
            false,
            layout_name(v, versioned!("MethodLoad")),
        )?),
        id::METHOD_UNLOAD => ClrEvent::MethodUnload(MethodInfo::decode(
            p,
            v,
            ps,
            false,
            layout_name(v, versioned!("MethodUnload")),
        )?),
        id::METHOD_LOAD_VERBOSE => ClrEvent::MethodLoadVerbose(MethodInfo::decode(
            p,
            v,
            ps,
            true,
            layout_name(v, versioned!("MethodLoadVerbose")),
        )?),
        id::METHOD_UNLOAD_VERBOSE => ClrEvent::MethodUnloadVerbose(MethodInfo::decode(
            p,
            v,
            ps,
            true,
            layout_name(v, versioned!("MethodUnloadVerbose")),
        )?),
        id::MODULE_LOAD => {
            ClrEvent::ModuleLoad(ModuleInfo::decode(p, v, ps, layout_name(v, versioned!("ModuleLoad")))?)
        }
        id::MODULE_UNLOAD => ClrEvent::ModuleUnload(ModuleInfo::decode(
            p,
            v,
            ps,
            layout_name(v, versioned!("ModuleUnload")),
        )?),
        id::THREAD_CREATED => ClrEvent::ThreadCreated(ThreadInfo::decode(p, ps, "ThreadCreated")?),
        _ => ClrEvent::Unknown,
    })
}

fn decode_rundown<'a>(ev: &RawEvent<'a>) -> Result<ClrEvent<'a>, DecodeError> {
    use ids::rundown as id;
    let (p, v, ps) = (ev.payload, ev.version, ev.pointer_size);
    Ok(match ev.event_id {
        id::METHOD_DC_START => ClrEvent::MethodDcStart(MethodInfo::decode(
            p,
            v,
            ps,
            false,
            layout_name(v, versioned!("MethodDCStart")),
        )?),
        id::METHOD_DC_END => ClrEvent::MethodDcEnd(MethodInfo::decode(
            p,
            v,
            ps,
            false,
            layout_name(v, versioned!("MethodDCEnd")),
        )?),
        id::METHOD_DC_START_VERBOSE => ClrEvent::MethodDcStartVerbose(MethodInfo::decode(
            p,
            v,
            ps,
            true,
            layout_name(v, versioned!("MethodDCStartVerbose")),
        )?),
        id::METHOD_DC_END_VERBOSE => ClrEvent::MethodDcEndVerbose(MethodInfo::decode(
            p,
            v,
            ps,
            true,
            layout_name(v, versioned!("MethodDCEndVerbose")),
        )?),
        id::MODULE_DC_START => ClrEvent::ModuleDcStart(ModuleInfo::decode(
            p,
            v,
            ps,
            layout_name(v, versioned!("ModuleDCStart")),
        )?),
        id::MODULE_DC_END => {
            ClrEvent::ModuleDcEnd(ModuleInfo::decode(p, v, ps, layout_name(v, versioned!("ModuleDCEnd")))?)
        }
        id::THREAD_DC => ClrEvent::ThreadDcEnd(ThreadInfo::decode(p, ps, "ThreadDC")?),
        id::DC_START_INIT => ClrEvent::DcStartInit {
            clr_instance_id: decode_clr_instance_only(p, v, ps, "DCStartInit")?,
        },
        id::DC_START_COMPLETE => ClrEvent::DcStartComplete {
            clr_instance_id: decode_clr_instance_only(p, v, ps, "DCStartComplete")?,
        },
        id::DC_END_INIT => ClrEvent::DcEndInit {
            clr_instance_id: decode_clr_instance_only(p, v, ps, "DCEndInit")?,
        },
        id::DC_END_COMPLETE => ClrEvent::DcEndComplete {
            clr_instance_id: decode_clr_instance_only(p, v, ps, "DCEndComplete")?,
        },
        _ => ClrEvent::Unknown,
    })
}

#[inline]
fn layout_name(version: u8, names: [&'static str; 3]) -> &'static str {
    names[usize::from(version.min(2))]
}
