//! User stack copies (`USTACK_*` maps): switching them on and reading them back.
use aya::maps::{Array, MapData, RingBuf};
use clrprobe_common::{UserStackHeader, names};

use super::{BpfError, Loaded};

/// One copied user stack from `USTACK_RING`.
#[derive(Debug, Clone)]
pub struct CopiedStack {
    pub hdr: UserStackHeader,
    pub data: Vec<u8>,
}

impl CopiedStack {
    /// Parses a ring record (header, then `hdr.len` bytes of stack).
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let n = size_of::<UserStackHeader>();
        let head = bytes.get(..n)?;
        // SAFETY: UserStackHeader is plain repr(C) data; read unaligned from the record.
        let hdr: UserStackHeader = unsafe { std::ptr::read_unaligned(head.as_ptr().cast()) };
        let len = (hdr.len as usize).min(bytes.len() - n);
        Some(CopiedStack { hdr, data: bytes[n..n + len].to_vec() })
    }
}

impl Loaded {
    /// Sets the `ustack::COPY_*` flags (0: frame pointers only).
    pub fn set_ustack_flags(&mut self, flags: u64) -> Result<(), BpfError> {
        let name = names::USTACK_CONFIG;
        let map = self.ebpf.map_mut(name).ok_or(BpfError::NoMap { name })?;
        let mut cfg: Array<&mut MapData, u64> = Array::try_from(map).map_err(|source| BpfError::Map { name, source })?;
        cfg.set(0, flags, 0).map_err(|source| BpfError::Map { name, source })
    }

    /// Takes the ring buffer of copies out of the object (once).
    pub fn take_ustack_ring(&mut self) -> Result<RingBuf<MapData>, BpfError> {
        let name = names::USTACK_RING;
        let map = self.ebpf.take_map(name).ok_or(BpfError::NoMap { name })?;
        RingBuf::try_from(map).map_err(|source| BpfError::Map { name, source })
    }
}

/// Reads every record waiting in `ring`.
pub fn drain_ring(ring: &mut RingBuf<MapData>) -> Vec<CopiedStack> {
    let mut out = Vec::new();
    while let Some(item) = ring.next() {
        if let Some(s) = CopiedStack::parse(&item) {
            out.push(s);
        }
    }
    out
}
