//! The real-time ETW sessions (Windows only; type-checked on Linux, never run — see README).
//!
//! Four sessions, like PerfView's collection:
//! 1. `clrprobe-rundown-start`: the rundown provider with StartRundown, until it goes quiet —
//!    names of methods (JIT and NGen/R2R) and modules loaded before the recording;
//! 2. `clrprobe-clr`: Microsoft-Windows-DotNETRuntime at verbose with [`plan::RUNTIME_KEYWORDS`];
//! 3. `clrprobe-kernel` (CPU only): profile-timer samples with kernel stack walks, image loads;
//! 4. `clrprobe-rundown-end`: the rundown provider with EndRundown after the recording, until
//!    quiet — every method alive at the end, so earlier samples are named.
//!
//! Records from all sessions go into one [`Collector`], which filters the process.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clrprobe_pipeline::EventReport;
use clrprobe_profile::Profile;
use ferrisetw::provider::kernel_providers::{IMAGE_LOAD_PROVIDER, KernelProvider, PROFILE_PROVIDER};
use ferrisetw::provider::Provider;
use ferrisetw::native::ExtendedDataItem;
use ferrisetw::trace::{KernelTrace, TraceError, UserTrace, stop_trace_by_name};
use ferrisetw::{EventRecord, GUID, SchemaLocator};
use windows_sys::Win32::Foundation::{CloseHandle, FILETIME};
use windows_sys::Win32::System::Diagnostics::Etw as etw;
use windows_sys::Win32::System::Performance::{QueryPerformanceCounter, QueryPerformanceFrequency};
use windows_sys::Win32::System::SystemInformation::GetSystemTimePreciseAsFileTime;
use windows_sys::Win32::System::Threading::{OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION};

use crate::collector::{Collector, CollectorStats, RecordKinds};
use crate::error::EtwError;
use crate::plan;
use crate::providers;
use crate::record::EtwRecord;
use crate::stackwalk::{CorrelatorConfig, RawClock};

/// What to record and how long to wait for the rundowns.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub pid: Option<u32>,
    pub kinds: RecordKinds,
    /// Profile-timer interval in 100 ns units (system-wide; needs SeSystemProfilePrivilege).
    pub sample_interval_100ns: u32,
    /// A rundown is over when no rundown event came for this long...
    pub rundown_quiet: Duration,
    /// ...or after this long in any case.
    pub rundown_timeout: Duration,
}

impl SessionConfig {
    pub fn new(pid: Option<u32>, kinds: RecordKinds) -> Self {
        SessionConfig {
            pid,
            kinds,
            sample_interval_100ns: plan::DEFAULT_SAMPLE_INTERVAL_100NS,
            rundown_quiet: Duration::from_millis(500),
            rundown_timeout: Duration::from_secs(15),
        }
    }
}

/// Shared between the sessions' callback threads.
struct Sink {
    collector: Mutex<Collector>,
    /// Milliseconds since `t0` of the last event, and the event count (rundown quiet detection).
    last_ms: AtomicU64,
    events: AtomicU64,
    t0: Instant,
    /// With one target process: its rundown said DCStartComplete / DCEndComplete.
    target: Option<u32>,
    rundown_complete: AtomicBool,
}

impl Sink {
    fn push(&self, rec: EtwRecord) {
        self.events.fetch_add(1, Ordering::Relaxed);
        self.last_ms.store(self.t0.elapsed().as_millis() as u64, Ordering::Relaxed);
        if rec.provider == providers::RUNDOWN
            && matches!(rec.event_id, clr_events::ids::rundown::DC_START_COMPLETE | clr_events::ids::rundown::DC_END_COMPLETE)
            && self.target == Some(rec.pid)
        {
            self.rundown_complete.store(true, Ordering::Relaxed);
        }
        // A poisoned lock means a callback panicked earlier; drop the event rather than panic
        // inside the ETW callback.
        if let Ok(mut c) = self.collector.lock() {
            c.push(rec);
        }
    }
}

fn callback(sink: &Arc<Sink>) -> impl FnMut(&EventRecord, &SchemaLocator) + Send + Sync + 'static {
    let sink = Arc::clone(sink);
    move |r: &EventRecord, _: &SchemaLocator| sink.push(to_record(r))
}

fn guid(g: clr_events::Guid) -> GUID {
    GUID::from_values(g.data1, g.data2, g.data3, g.data4)
}

/// Copies what clrprobe uses out of the ETW buffer (valid only during the callback).
fn to_record(r: &EventRecord) -> EtwRecord {
    let g = r.provider_id();
    // SAFETY: ferrisetw's EventRecord is `#[repr(transparent)]` over the Win32 EVENT_RECORD,
    // which windows-sys declares with the same `#[repr(C)]` layout; the reference is only
    // used during this callback, while ETW keeps the record alive.
    let raw = unsafe { &*(r as *const EventRecord as *const etw::EVENT_RECORD) };
    let payload = if raw.UserData.is_null() || raw.UserDataLength == 0 {
        Vec::new()
    } else {
        // SAFETY: UserData points to UserDataLength bytes for the duration of the callback.
        unsafe { std::slice::from_raw_parts(raw.UserData as *const u8, usize::from(raw.UserDataLength)) }.to_vec()
    };
    let mut stack = None;
    for item in r.extended_data() {
        match item.to_extended_data_item() {
            ExtendedDataItem::StackTrace64(s) => stack = Some(s.addresses().to_vec()),
            ExtendedDataItem::StackTrace32(s) => stack = Some(s.addresses().iter().map(|&a| u64::from(a)).collect()),
            _ => {}
        }
    }
    EtwRecord {
        provider: clr_events::Guid { data1: g.data1, data2: g.data2, data3: g.data3, data4: g.data4 },
        event_id: r.event_id(),
        opcode: r.opcode(),
        version: r.version(),
        pid: r.process_id(),
        tid: r.thread_id(),
        timestamp: r.raw_timestamp(),
        payload,
        pointer_size: EtwRecord::pointer_size_from_flags(r.event_flags()),
        stack,
    }
}

fn map_err(session: &str, e: TraceError) -> EtwError {
    use ferrisetw::native::EvntraceNativeError as N;
    match e {
        TraceError::EtwNativeError(N::AlreadyExist) => EtwError::SessionExists { session: session.into() },
        TraceError::EtwNativeError(N::IoError(io)) if io.raw_os_error() == Some(5) => {
            EtwError::NotElevated { session: session.into() }
        }
        other => EtwError::Session { session: session.into(), reason: format!("{other:?}") },
    }
}

/// Starts a user session with one provider; a leftover session of the same name (a killed
/// run) is stopped first and the start retried once.
fn start_user(name: &str, provider_guid: clr_events::Guid, keywords: u64, level: u8, sink: &Arc<Sink>) -> Result<UserTrace, EtwError> {
    let build = || {
        let p = Provider::by_guid(guid(provider_guid)).any(keywords).level(level).add_callback(callback(sink)).build();
        UserTrace::new().named(name.to_string()).enable(p).start_and_process()
    };
    match build() {
        Ok(t) => Ok(t),
        Err(TraceError::EtwNativeError(ferrisetw::native::EvntraceNativeError::AlreadyExist)) => {
            let _ = stop_trace_by_name(name);
            build().map_err(|e| map_err(name, e))
        }
        Err(e) => Err(map_err(name, e)),
    }
}

fn start_kernel(sink: &Arc<Sink>, interval_100ns: u32) -> Result<KernelTrace, EtwError> {
    static STACK_WALK: KernelProvider = KernelProvider::new(GUID::from_values(
        providers::KERNEL_STACK_WALK.data1,
        providers::KERNEL_STACK_WALK.data2,
        providers::KERNEL_STACK_WALK.data3,
        providers::KERNEL_STACK_WALK.data4,
    ), 0);
    let name = plan::SESSION_KERNEL;
    let build = || {
        KernelTrace::new()
            .named(name.to_string())
            .enable(Provider::kernel(&PROFILE_PROVIDER).add_callback(callback(sink)).build())
            .enable(Provider::kernel(&IMAGE_LOAD_PROVIDER).add_callback(callback(sink)).build())
            // Flags 0: only so the StackWalk events reach a callback (dispatch is by GUID).
            .enable(Provider::kernel(&STACK_WALK).add_callback(callback(sink)).build())
            .start_and_process()
    };
    let trace = match build() {
        Ok(t) => t,
        Err(TraceError::EtwNativeError(ferrisetw::native::EvntraceNativeError::AlreadyExist)) => {
            let _ = stop_trace_by_name(name);
            build().map_err(|e| map_err(name, e))?
        }
        Err(e) => return Err(map_err(name, e)),
    };
    enable_sample_stacks(name, interval_100ns);
    Ok(trace)
}

/// Asks the kernel logger for a stack walk on every SampledProfile, and sets the interval.
/// Failures are logged: samples then come without stacks (or at the default 1 ms).
fn enable_sample_stacks(name: &str, interval_100ns: u32) {
    let mut wide: Vec<u16> = name.encode_utf16().chain(std::iter::once(0)).collect();
    // EVENT_TRACE_PROPERTIES followed by room for the logger and file names.
    let size = std::mem::size_of::<etw::EVENT_TRACE_PROPERTIES>() + 2 * 1024 * 2;
    let mut buf = vec![0u64; size.div_ceil(8)];
    let props = buf.as_mut_ptr() as *mut etw::EVENT_TRACE_PROPERTIES;
    // SAFETY: `buf` is zeroed, 8-aligned and large enough for the properties and both names.
    let handle = unsafe {
        (*props).Wnode.BufferSize = size as u32;
        (*props).LoggerNameOffset = std::mem::size_of::<etw::EVENT_TRACE_PROPERTIES>() as u32;
        (*props).LogFileNameOffset = (std::mem::size_of::<etw::EVENT_TRACE_PROPERTIES>() + 2 * 1024) as u32;
        let rc = etw::ControlTraceW(etw::CONTROLTRACE_HANDLE { Value: 0 }, wide.as_mut_ptr(), props, etw::EVENT_TRACE_CONTROL_QUERY);
        if rc != 0 {
            log::warn!("querying ETW session {name} failed ({rc}): CPU samples will have no stacks");
            return;
        }
        (*props).Wnode.Anonymous1.HistoricalContext
    };
    let pi = providers::KERNEL_PERF_INFO;
    let ids = [etw::CLASSIC_EVENT_ID {
        EventGuid: windows_sys::core::GUID { data1: pi.data1, data2: pi.data2, data3: pi.data3, data4: pi.data4 },
        Type: crate::kernel::OPCODE_SAMPLED_PROFILE,
        Reserved: [0; 7],
    }];
    let h = etw::CONTROLTRACE_HANDLE { Value: handle };
    // SAFETY: the pointers and sizes describe the local arrays above.
    let rc = unsafe {
        etw::TraceSetInformation(h, plan::TRACE_STACK_TRACING_INFO, ids.as_ptr().cast(), std::mem::size_of_val(&ids) as u32)
    };
    if rc != 0 {
        log::warn!("enabling stack walks for SampledProfile failed ({rc}): CPU samples will have no stacks");
    }
    let interval = etw::TRACE_PROFILE_INTERVAL { Source: 0, Interval: interval_100ns };
    // SAFETY: as above.
    let rc = unsafe {
        etw::TraceSetInformation(h, plan::TRACE_SAMPLED_PROFILE_INTERVAL_INFO, (&interval as *const etw::TRACE_PROFILE_INTERVAL).cast(), std::mem::size_of_val(&interval) as u32)
    };
    if rc != 0 {
        log::warn!("setting the sampling interval failed ({rc}); the system's current interval is used");
    }
}

/// The mapping from the stack walks' raw QPC timestamps to the header clock.
fn raw_clock() -> RawClock {
    let (mut freq, mut qpc) = (0i64, 0i64);
    let mut ft = FILETIME { dwLowDateTime: 0, dwHighDateTime: 0 };
    // SAFETY: plain out-parameters.
    unsafe {
        QueryPerformanceFrequency(&mut freq);
        QueryPerformanceCounter(&mut qpc);
        GetSystemTimePreciseAsFileTime(&mut ft);
    }
    RawClock {
        qpc_frequency: u64::try_from(freq).unwrap_or(1).max(1),
        qpc_anchor: u64::try_from(qpc).unwrap_or(0),
        filetime_anchor: ((u64::from(ft.dwHighDateTime) << 32) | u64::from(ft.dwLowDateTime)) as i64,
    }
}

fn process_exists(pid: u32) -> bool {
    // SAFETY: OpenProcess returns null or a handle we close.
    unsafe {
        let h = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid);
        if h.is_null() {
            return false;
        }
        CloseHandle(h);
        true
    }
}

/// Waits until the target process's rundown completed, or `sink` saw events and then none
/// for `quiet`, or `timeout` passed; a rundown that produced nothing for two seconds (no CLR
/// process) is over too.
fn wait_quiet(sink: &Sink, from_events: u64, quiet: Duration, timeout: Duration) {
    let start = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        if sink.rundown_complete.load(Ordering::Relaxed) {
            // Let the last events of the completed rundown's buffer arrive.
            std::thread::sleep(Duration::from_millis(100));
            return;
        }
        let now_ms = sink.t0.elapsed().as_millis() as u64;
        let seen = sink.events.load(Ordering::Relaxed) > from_events;
        let idle = now_ms.saturating_sub(sink.last_ms.load(Ordering::Relaxed));
        if (seen && idle >= quiet.as_millis() as u64) || start.elapsed() >= timeout {
            return;
        }
        if !seen && start.elapsed() >= Duration::from_secs(2) {
            return;
        }
    }
}

fn rundown(name: &str, keywords: u64, sink: &Arc<Sink>, config: &SessionConfig) -> Result<(), EtwError> {
    let before = sink.events.load(Ordering::Relaxed);
    sink.rundown_complete.store(false, Ordering::Relaxed);
    let trace = start_user(name, providers::RUNDOWN, keywords, plan::RUNDOWN_LEVEL, sink)?;
    wait_quiet(sink, before, config.rundown_quiet, config.rundown_timeout);
    trace.stop().map_err(|e| map_err(name, e))
}

/// Records for `duration` and returns the profile, the event report and the counts.
pub fn record(config: &SessionConfig, duration: Duration) -> Result<(Profile, EventReport, CollectorStats), EtwError> {
    if let Some(pid) = config.pid
        && !process_exists(pid)
    {
        return Err(EtwError::NoSuchProcess { pid });
    }
    let correlator = CorrelatorConfig {
        clock: Some(raw_clock()),
        // Half the default sampling interval: the nearest sample on the thread, never the next.
        tolerance_100ns: i64::from(config.sample_interval_100ns / 2).max(1),
        // Real-time buffers are flushed every second: let an event wait 100 ms for its stack.
        hold_100ns: 1_000_000,
        ..CorrelatorConfig::default()
    };
    let mut collector = Collector::new(config.kinds, config.pid, correlator);
    collector.sample_interval_ns = u64::from(config.sample_interval_100ns) * 100;
    let sink = Arc::new(Sink {
        collector: Mutex::new(collector),
        last_ms: AtomicU64::new(0),
        events: AtomicU64::new(0),
        t0: Instant::now(),
        target: config.pid,
        rundown_complete: AtomicBool::new(false),
    });

    rundown(plan::SESSION_RUNDOWN_START, plan::RUNDOWN_START_KEYWORDS, &sink, config)?;
    let clr = start_user(plan::SESSION_CLR, providers::RUNTIME, plan::RUNTIME_KEYWORDS, plan::RUNTIME_LEVEL, &sink)?;
    let kernel = if config.kinds.cpu { Some(start_kernel(&sink, config.sample_interval_100ns)?) } else { None };
    std::thread::sleep(duration);
    // End rundown while the runtime session still runs (methods JIT-ed until the end are named).
    let end = rundown(plan::SESSION_RUNDOWN_END, plan::RUNDOWN_END_KEYWORDS, &sink, config);
    if let Some(k) = kernel {
        k.stop().map_err(|e| map_err(plan::SESSION_KERNEL, e))?;
    }
    clr.stop().map_err(|e| map_err(plan::SESSION_CLR, e))?;
    end?;
    // Events may still be delivered briefly after a stop.
    std::thread::sleep(Duration::from_millis(200));
    // The stopped sessions' callbacks may still hold the sink: take the collector out of it.
    let collector = {
        let mut guard = sink.collector.lock().map_err(|_| EtwError::CallbackPanicked)?;
        std::mem::replace(&mut *guard, Collector::new(config.kinds, config.pid, CorrelatorConfig::default()))
    };
    Ok(collector.finish()?)
}
