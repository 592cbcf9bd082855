//! Payloads of the kernel and CLR events that carry stacks, samples and images: kernel
//! SampledProfile (PerfInfo opcode 46), kernel StackWalk (opcode 32), kernel Image load/rundown
//! (opcodes 10, 3, 4), and the CLR's own ClrStackWalk (runtime event 82). Layouts are the
//! MOF classes of the kernel logger (`SampledProfile`, `StackWalk_Event`, `Image_Load`) and the
//! CLR manifest's ClrStackWalk template; pointers are the writer's size.

use clr_events::DecodeError;
use clr_events::reader::Cursor;

/// PerfInfo opcode of SampledProfile.
pub const OPCODE_SAMPLED_PROFILE: u8 = 46;
/// StackWalk opcode of StackWalk_Event.
pub const OPCODE_STACK_WALK: u8 = 32;
/// Image opcodes: Load, DCStart (rundown at session start), DCEnd.
pub const OPCODE_IMAGE_LOAD: u8 = 10;
pub const OPCODE_IMAGE_DC_START: u8 = 3;
pub const OPCODE_IMAGE_DC_END: u8 = 4;
/// Runtime provider id of ClrStackWalk.
pub const CLR_STACK_WALK_ID: u16 = 82;

/// One profile-timer sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampledProfile {
    pub instruction_pointer: u64,
    pub thread_id: u32,
    /// Samples this event stands for (1 unless the kernel coalesced).
    pub count: u16,
}

impl SampledProfile {
    pub fn decode(payload: &[u8], pointer_size: u8) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, "SampledProfile")?;
        Ok(SampledProfile {
            instruction_pointer: c.pointer("InstructionPointer")?,
            thread_id: c.u32("ThreadId")?,
            count: c.u16("Count")?,
        })
    }
}

/// A kernel stack walk: the stack of the event on `thread` at `event_timestamp` (raw clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelStackWalk {
    /// Timestamp of the event this stack belongs to, in the session's raw clock (QPC).
    pub event_timestamp: u64,
    pub process: u32,
    pub thread: u32,
    /// Leaf first.
    pub frames: Vec<u64>,
}

impl KernelStackWalk {
    pub fn decode(payload: &[u8], pointer_size: u8) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, "StackWalk_Event")?;
        let event_timestamp = c.u64("EventTimeStamp")?;
        let process = c.u32("StackProcess")?;
        let thread = c.u32("StackThread")?;
        let n = c.remaining() / usize::from(pointer_size);
        let mut frames = Vec::with_capacity(n);
        for _ in 0..n {
            frames.push(c.pointer("Stack")?);
        }
        Ok(KernelStackWalk { event_timestamp, process, thread, frames })
    }
}

/// The CLR's ClrStackWalk event (runtime id 82), fired after an event when the Stack keyword
/// is on: ClrInstanceID u16, Reserved1 u8, Reserved2 u8, FrameCount u32, Stack[FrameCount].
pub fn decode_clr_stack_walk(payload: &[u8], pointer_size: u8) -> Result<Vec<u64>, DecodeError> {
    let mut c = Cursor::new(payload, pointer_size, "ClrStackWalk")?;
    let _clr_instance = c.u16("ClrInstanceID")?;
    let _r1 = c.u8("Reserved1")?;
    let _r2 = c.u8("Reserved2")?;
    let count = c.u32("FrameCount")?;
    c.check_count(u64::from(count), u64::from(pointer_size), "Stack")?;
    let mut frames = Vec::with_capacity(count as usize);
    for _ in 0..count {
        frames.push(c.pointer("Stack")?);
    }
    Ok(frames)
}

/// A native image mapped into a process (Image_Load, versions 2–3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageLoad {
    pub base: u64,
    pub size: u64,
    pub pid: u32,
    /// NT path, e.g. `\Device\HarddiskVolume3\Windows\System32\ntdll.dll`.
    pub file_name: String,
}

impl ImageLoad {
    /// ImageBase, ImageSize (pointers), ProcessId, ImageCheckSum, TimeDateStamp (u32),
    /// Reserved0 (u32), DefaultBase (pointer), Reserved1..4 (u32), FileName (UTF-16z).
    pub fn decode(payload: &[u8], pointer_size: u8) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(payload, pointer_size, "Image_Load")?;
        let base = c.pointer("ImageBase")?;
        let size = c.pointer("ImageSize")?;
        let pid = c.u32("ProcessId")?;
        let _ = c.u32("ImageCheckSum")?;
        let _ = c.u32("TimeDateStamp")?;
        let _ = c.u32("Reserved0")?;
        let _ = c.pointer("DefaultBase")?;
        for f in ["Reserved1", "Reserved2", "Reserved3", "Reserved4"] {
            let _ = c.u32(f)?;
        }
        let file_name = c.utf16z("FileName")?.to_string_lossy();
        Ok(ImageLoad { base, size, pid, file_name })
    }

    /// The file name without its directory.
    pub fn module_name(&self) -> &str {
        self.file_name.rsplit(['\\', '/']).next().unwrap_or(&self.file_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ptr(buf: &mut Vec<u8>, ps: u8, v: u64) {
        if ps == 4 {
            buf.extend_from_slice(&(v as u32).to_le_bytes());
        } else {
            buf.extend_from_slice(&v.to_le_bytes());
        }
    }

    #[test]
    fn sampled_profile_and_stack_walk_for_both_pointer_sizes() {
        for ps in [4u8, 8] {
            let mut p = Vec::new();
            ptr(&mut p, ps, 0x1234);
            p.extend_from_slice(&77u32.to_le_bytes());
            p.extend_from_slice(&1u16.to_le_bytes());
            p.extend_from_slice(&0u16.to_le_bytes());
            let s = SampledProfile::decode(&p, ps).expect("decodes");
            assert_eq!(s, SampledProfile { instruction_pointer: 0x1234, thread_id: 77, count: 1 });
            assert!(SampledProfile::decode(&p[..p.len() - 5], ps).is_err());

            let mut w = Vec::new();
            w.extend_from_slice(&999u64.to_le_bytes());
            w.extend_from_slice(&5u32.to_le_bytes());
            w.extend_from_slice(&77u32.to_le_bytes());
            for a in [0x10, 0x20, 0x30] {
                ptr(&mut w, ps, a);
            }
            let k = KernelStackWalk::decode(&w, ps).expect("decodes");
            assert_eq!((k.event_timestamp, k.process, k.thread, k.frames), (999, 5, 77, vec![0x10, 0x20, 0x30]));
        }
    }

    #[test]
    fn clr_stack_walk_count_is_checked_against_the_bytes() {
        let mut p = Vec::new();
        p.extend_from_slice(&9u16.to_le_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(&2u32.to_le_bytes());
        p.extend_from_slice(&0xAAu64.to_le_bytes());
        p.extend_from_slice(&0xBBu64.to_le_bytes());
        assert_eq!(decode_clr_stack_walk(&p, 8).expect("decodes"), vec![0xAA, 0xBB]);
        // A count larger than the payload is an error naming the event, not an allocation.
        let mut bad = p.clone();
        bad[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = decode_clr_stack_walk(&bad, 8).expect_err("count too large");
        assert!(e.to_string().contains("ClrStackWalk"), "{e}");
        assert!(decode_clr_stack_walk(&p[..15], 8).is_err());
    }

    #[test]
    fn image_load_names_the_module() {
        for ps in [4u8, 8] {
            let mut p = Vec::new();
            ptr(&mut p, ps, 0x7ff0_0000);
            ptr(&mut p, ps, 0x1000);
            p.extend_from_slice(&42u32.to_le_bytes());
            p.extend_from_slice(&[0; 12]);
            ptr(&mut p, ps, 0);
            p.extend_from_slice(&[0; 16]);
            for u in r"\Device\HarddiskVolume3\Windows\System32\ntdll.dll".encode_utf16() {
                p.extend_from_slice(&u.to_le_bytes());
            }
            p.extend_from_slice(&[0, 0]);
            let i = ImageLoad::decode(&p, ps).expect("decodes");
            assert_eq!((i.base, i.size, i.pid, i.module_name()), (0x7ff0_0000, 0x1000, 42, "ntdll.dll"));
            assert!(ImageLoad::decode(&p[..p.len() - 2], ps).is_err(), "unterminated name");
        }
    }
}
