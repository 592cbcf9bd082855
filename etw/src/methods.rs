//! Names for the addresses of ETW stacks: the Windows equivalent of perf maps.
//!
//! Managed code: a per-process table of code ranges from MethodLoadVerbose (methods JIT-compiled
//! while recording) and the rundown's MethodDCStartVerbose / MethodDCEndVerbose (methods JIT-ed
//! before, and NGen/ReadyToRun methods), each `[start, start + size)` named
//! `Namespace::Name` with the module from ModuleLoad / ModuleDCStart / ModuleDCEnd.
//! Native code: module ranges from kernel image loads, named `module+0xoffset` (kernel modules
//! are image loads of process 0 and apply to every process).

use std::collections::{BTreeMap, HashMap};

use clr_events::ClrEvent;
use clr_events::methods::MethodInfo;
use clrprobe_pipeline::FrameSource;
use clrprobe_profile::{Frame, FrameKind, Str};

use crate::kernel::ImageLoad;

/// First kernel-space address on x64 Windows.
pub const KERNEL_SPACE_START: u64 = 0xFFFF_8000_0000_0000;

#[derive(Debug, Clone)]
struct Method {
    end: u64,
    name: Str,
    module_id: u64,
    kind: FrameKind,
}

#[derive(Debug, Clone)]
struct Image {
    end: u64,
    name: Str,
}

/// Code ranges of managed methods and native images, per process.
#[derive(Debug, Default)]
pub struct MethodTable {
    methods: HashMap<u32, BTreeMap<u64, Method>>,
    modules: HashMap<(u32, u64), Str>,
    images: HashMap<u32, BTreeMap<u64, Image>>,
}

impl MethodTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Learns from a decoded CLR event of process `pid` (other events are ignored).
    pub fn on_clr_event(&mut self, pid: u32, ev: &ClrEvent<'_>) {
        match ev {
            ClrEvent::MethodLoadVerbose(m) | ClrEvent::MethodDcStartVerbose(m) | ClrEvent::MethodDcEndVerbose(m) => {
                self.add_method(pid, m)
            }
            ClrEvent::ModuleLoad(m) | ClrEvent::ModuleDcStart(m) | ClrEvent::ModuleDcEnd(m) => {
                let path = m.il_path.to_string_lossy();
                let name = file_name(&path);
                if !name.is_empty() {
                    self.modules.insert((pid, m.module_id), name.into());
                }
            }
            _ => {}
        }
    }

    /// Adds one method; a later event for the same start address replaces the earlier one.
    pub fn add_method(&mut self, pid: u32, m: &MethodInfo<'_>) {
        if m.size == 0 {
            return;
        }
        let ns = m.namespace.map(|s| s.to_string_lossy()).unwrap_or_default();
        let n = m.name.map(|s| s.to_string_lossy()).unwrap_or_default();
        let name = if ns.is_empty() { n } else { format!("{ns}::{n}") };
        let kind = if m.flags.is_jitted() { FrameKind::Jit } else { FrameKind::ReadyToRun };
        let r = m.code_range();
        self.methods.entry(pid).or_default().insert(r.start, Method { end: r.end, name: name.into(), module_id: m.module_id, kind });
    }

    /// Adds a native image of `img.pid` (0: kernel, shared by all processes).
    pub fn add_image(&mut self, img: &ImageLoad) {
        let end = img.base.saturating_add(img.size);
        self.images.entry(img.pid).or_default().insert(img.base, Image { end, name: img.module_name().into() });
    }

    pub fn method_count(&self) -> usize {
        self.methods.values().map(BTreeMap::len).sum()
    }

    /// The frame for one lookup address of `pid`.
    pub fn frame(&self, pid: u32, addr: u64) -> Frame {
        if let Some((_, m)) = lookup(self.methods.get(&pid), addr) {
            let module = self.modules.get(&(pid, m.module_id)).cloned().unwrap_or_default();
            return Frame::new(m.name.clone(), module, m.kind);
        }
        let kernel = addr >= KERNEL_SPACE_START;
        let image = lookup(self.images.get(&pid), addr).or_else(|| lookup(self.images.get(&0), addr));
        let kind = if kernel { FrameKind::Kernel } else { FrameKind::Native };
        match image {
            Some((base, img)) => Frame::new(format!("{}+{:#x}", img.name, addr - base), img.name.clone(), kind),
            None => {
                let kind = if kernel { FrameKind::Kernel } else { FrameKind::Unknown };
                Frame::new(format!("{addr:#x}"), "", kind).with_address(addr)
            }
        }
    }
}

fn lookup<T: HasEnd>(map: Option<&BTreeMap<u64, T>>, addr: u64) -> Option<(u64, &T)> {
    let (&start, v) = map?.range(..=addr).next_back()?;
    (addr < v.end()).then_some((start, v))
}

trait HasEnd {
    fn end(&self) -> u64;
}
impl HasEnd for Method {
    fn end(&self) -> u64 {
        self.end
    }
}
impl HasEnd for Image {
    fn end(&self) -> u64 {
        self.end
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit(['\\', '/']).next().unwrap_or(path)
}

impl FrameSource for MethodTable {
    /// `stack` is leaf first; return addresses (all but the leaf) are looked up minus one so a
    /// call ending a function is not given to the next one. Returns root → leaf.
    fn frames(&mut self, pid: u32, stack: &[u64]) -> Vec<Frame> {
        let mut out: Vec<Frame> = stack
            .iter()
            .enumerate()
            .map(|(i, &a)| self.frame(pid, if i == 0 { a } else { a.saturating_sub(1) }))
            .collect();
        out.reverse();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clr_events::methods::MethodFlags;
    use clr_events::Utf16Str;

    fn utf16(s: &str) -> Vec<u8> {
        let mut v: Vec<u8> = s.encode_utf16().flat_map(u16::to_le_bytes).collect();
        v.extend_from_slice(&[0, 0]);
        v
    }

    fn method<'a>(start: u64, size: u32, ns: &'a [u8], name: &'a [u8], flags: u32) -> MethodInfo<'a> {
        MethodInfo {
            method_id: 1,
            module_id: 0x77,
            start_address: start,
            size,
            token: 0,
            flags: MethodFlags(flags),
            namespace: Some(Utf16Str::from_raw(&ns[..ns.len() - 2])),
            name: Some(Utf16Str::from_raw(&name[..name.len() - 2])),
            signature: None,
            clr_instance_id: None,
            rejit_id: None,
        }
    }

    #[test]
    fn managed_ranges_are_half_open_and_per_process() {
        let (ns, a, b) = (utf16("App.Program"), utf16("Main"), utf16("Work"));
        let mut t = MethodTable::new();
        t.add_method(1, &method(0x1000, 0x100, &ns, &a, MethodFlags::JITTED));
        t.add_method(1, &method(0x1100, 0x10, &ns, &b, 0));
        let f = t.frame(1, 0x10ff);
        assert_eq!((f.name.as_str(), f.kind), ("App.Program::Main", FrameKind::Jit));
        let f = t.frame(1, 0x1100);
        assert_eq!((f.name.as_str(), f.kind), ("App.Program::Work", FrameKind::ReadyToRun));
        assert_eq!(t.frame(1, 0x1110).kind, FrameKind::Unknown, "end is exclusive");
        assert_eq!(t.frame(1, 0xfff).name.as_str(), "0xfff");
        assert_eq!(t.frame(2, 0x1000).kind, FrameKind::Unknown, "other process");
        assert_eq!(t.method_count(), 2);
    }

    #[test]
    fn rundown_replaces_same_start_and_modules_name_frames() {
        let (ns, a, b) = (utf16("N"), utf16("Old"), utf16("New"));
        let mut t = MethodTable::new();
        t.add_method(1, &method(0x1000, 0x10, &ns, &a, 8));
        t.add_method(1, &method(0x1000, 0x20, &ns, &b, 8));
        assert_eq!(t.frame(1, 0x101f).name.as_str(), "N::New");
        t.modules.insert((1, 0x77), "app.dll".into());
        assert_eq!(t.frame(1, 0x1000).module.as_str(), "app.dll");
    }

    #[test]
    fn native_images_and_kernel_modules_give_module_offsets() {
        let mut t = MethodTable::new();
        t.add_image(&ImageLoad { base: 0x7ff8_0000_0000, size: 0x1000, pid: 5, file_name: r"C:\Windows\System32\ntdll.dll".into() });
        t.add_image(&ImageLoad { base: 0xffff_f800_0000_0000, size: 0x10_0000, pid: 0, file_name: r"\SystemRoot\system32\ntoskrnl.exe".into() });
        let f = t.frame(5, 0x7ff8_0000_0123);
        assert_eq!((f.name.as_str(), f.module.as_str(), f.kind), ("ntdll.dll+0x123", "ntdll.dll", FrameKind::Native));
        let f = t.frame(5, 0xffff_f800_0000_0010);
        assert_eq!((f.name.as_str(), f.kind), ("ntoskrnl.exe+0x10", FrameKind::Kernel));
        assert_eq!(t.frame(6, 0x7ff8_0000_0123).kind, FrameKind::Unknown, "image of another process");
    }

    #[test]
    fn frames_are_root_first_and_return_addresses_minus_one() {
        let (ns, a, b) = (utf16("N"), utf16("Callee"), utf16("Caller"));
        let mut t = MethodTable::new();
        t.add_method(1, &method(0x1000, 0x10, &ns, &a, 8));
        t.add_method(1, &method(0x2000, 0x10, &ns, &b, 8));
        // The caller's return address 0x2010 is one past its end: looked up as 0x200f.
        let f = t.frames(1, &[0x1004, 0x2010]);
        let names: Vec<&str> = f.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["N::Caller", "N::Callee"]);
    }
}
