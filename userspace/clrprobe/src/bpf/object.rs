//! The BPF object embedded at build time (see build.rs).
use super::BpfError;

#[cfg(clrprobe_bpf)]
static OBJECT: &[u8] = aya::include_bytes_aligned!(env!("CLRPROBE_BPF_OBJ_PATH"));

/// The embedded BPF object, or a clear error when this binary was built without it.
pub fn embedded_object() -> Result<&'static [u8], BpfError> {
    #[cfg(clrprobe_bpf)]
    {
        Ok(OBJECT)
    }
    #[cfg(not(clrprobe_bpf))]
    {
        Err(BpfError::NotEmbedded)
    }
}
