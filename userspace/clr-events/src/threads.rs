//! Thread events: ThreadCreated (runtime id 85), the rundown ThreadDC (rundown id 159, same
//! layout) and the SampleProfiler's ThreadSample (id 0).

use crate::error::DecodeError;
use crate::reader::Cursor;

/// ThreadFlagsMap bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ThreadFlags(pub u32);

impl ThreadFlags {
    pub const GC_SPECIAL: u32 = 0x1;
    pub const FINALIZER: u32 = 0x2;
    pub const THREAD_POOL_WORKER: u32 = 0x4;

    pub fn is_finalizer(self) -> bool {
        self.0 & Self::FINALIZER != 0
    }
    pub fn is_thread_pool_worker(self) -> bool {
        self.0 & Self::THREAD_POOL_WORKER != 0
    }
    pub fn is_gc_special(self) -> bool {
        self.0 & Self::GC_SPECIAL != 0
    }
}

/// ThreadCreated / ThreadDC.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadInfo {
    /// The CLR `Thread*` (not the managed thread id).
    pub managed_thread_id: u64,
    pub app_domain_id: u64,
    pub flags: ThreadFlags,
    /// `Thread.ManagedThreadId`-style index.
    pub managed_thread_index: u32,
    /// OS thread id (Linux TID / Windows thread id).
    pub os_thread_id: u32,
    pub clr_instance_id: u16,
}

impl ThreadInfo {
    pub fn decode(
        payload: &[u8],
        pointer_size: u8,
        name: &'static str,
    ) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, name)?;
        Ok(ThreadInfo {
            managed_thread_id: c.u64("ManagedThreadID")?,
            app_domain_id: c.u64("AppDomainID")?,
            flags: ThreadFlags(c.u32("Flags")?),
            managed_thread_index: c.u32("ManagedThreadIndex")?,
            os_thread_id: c.u32("OSThreadID")?,
            clr_instance_id: c.u16("ClrInstanceID")?,
        })
    }
}

/// What the sampled thread was doing (perfview `ClrThreadSampleType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SampleType {
    Error,
    /// Running native code outside the runtime.
    External,
    /// Running managed code.
    Managed,
    Other(u32),
}

/// SampleProfiler ThreadSample: the stack is carried by the event's stack, not the payload.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadSample {
    pub sample_type: SampleType,
}

impl ThreadSample {
    pub fn decode(payload: &[u8], pointer_size: u8) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, "ThreadSample")?;
        let sample_type = match c.u32("Type")? {
            0 => SampleType::Error,
            1 => SampleType::External,
            2 => SampleType::Managed,
            other => SampleType::Other(other),
        };
        Ok(ThreadSample { sample_type })
    }
}
