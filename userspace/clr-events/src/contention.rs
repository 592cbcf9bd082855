//! Lock contention events: ContentionStart (id 81, V1/V2), ContentionStop (id 91, V0/V1),
//! ContentionLockCreated (id 90).

use crate::error::DecodeError;
use crate::reader::Cursor;

/// ContentionFlags map: whose lock was contended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContentionKind {
    Managed,
    Native,
    Other(u8),
}

impl ContentionKind {
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => ContentionKind::Managed,
            1 => ContentionKind::Native,
            other => ContentionKind::Other(other),
        }
    }
}

/// ContentionStart. V0 has no payload (all fields default: Managed, no ids).
#[derive(Debug, Clone, PartialEq)]
pub struct ContentionStart {
    pub kind: ContentionKind,
    pub clr_instance_id: Option<u16>,
    /// V2+: the lock object (Lock* / AwareLock*).
    pub lock_id: Option<u64>,
    /// V2+: the object being locked on.
    pub associated_object_id: Option<u64>,
    /// V2+: OS thread id of the owner at the time of contention (0 if unknown).
    pub lock_owner_thread_id: Option<u64>,
}

impl ContentionStart {
    pub fn decode(payload: &[u8], version: u8, pointer_size: u8) -> Result<Self, DecodeError> {
        let name = match version {
            0 => "ContentionStart",
            1 => "ContentionStart_V1",
            _ => "ContentionStart_V2",
        };
        let mut c = Cursor::new(payload, pointer_size, name)?;
        let mut out = ContentionStart {
            kind: ContentionKind::Managed,
            clr_instance_id: None,
            lock_id: None,
            associated_object_id: None,
            lock_owner_thread_id: None,
        };
        if version == 0 {
            return Ok(out);
        }
        out.kind = ContentionKind::from_u8(c.u8("ContentionFlags")?);
        out.clr_instance_id = Some(c.u16("ClrInstanceID")?);
        if version >= 2 {
            out.lock_id = Some(c.pointer("LockID")?);
            out.associated_object_id = Some(c.pointer("AssociatedObjectID")?);
            out.lock_owner_thread_id = Some(c.u64("LockOwnerThreadID")?);
        }
        Ok(out)
    }
}

/// ContentionStop.
#[derive(Debug, Clone, PartialEq)]
pub struct ContentionStop {
    pub kind: ContentionKind,
    pub clr_instance_id: u16,
    /// V1+: how long the thread waited, in nanoseconds.
    pub duration_ns: Option<f64>,
}

impl ContentionStop {
    pub fn decode(payload: &[u8], version: u8, pointer_size: u8) -> Result<Self, DecodeError> {
        let name = if version == 0 {
            "ContentionStop"
        } else {
            "ContentionStop_V1"
        };
        let mut c = Cursor::new(payload, pointer_size, name)?;
        let kind = ContentionKind::from_u8(c.u8("ContentionFlags")?);
        let clr_instance_id = c.u16("ClrInstanceID")?;
        let duration_ns = if version >= 1 {
            Some(c.f64("DurationNs")?)
        } else {
            None
        };
        Ok(ContentionStop {
            kind,
            clr_instance_id,
            duration_ns,
        })
    }
}

/// ContentionLockCreated: links a lock to its associated object.
#[derive(Debug, Clone, PartialEq)]
pub struct ContentionLockCreated {
    pub lock_id: u64,
    pub associated_object_id: u64,
    pub clr_instance_id: u16,
}

impl ContentionLockCreated {
    pub fn decode(payload: &[u8], pointer_size: u8) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, "ContentionLockCreated")?;
        Ok(ContentionLockCreated {
            lock_id: c.pointer("LockID")?,
            associated_object_id: c.pointer("AssociatedObjectID")?,
            clr_instance_id: c.u16("ClrInstanceID")?,
        })
    }
}
