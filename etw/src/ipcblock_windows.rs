//! Maps the .NET Framework CLR's `Cor_SxSPublic_IPCBlock` (Windows only; never run — see
//! README). The own process opens it through the writer's private namespace
//! (`Cor_CLR_WRITER\Cor_SxSPublic_IPCBlock`); another process's block is reached by opening the
//! reader namespace over the boundary descriptor `Cor_CLR_IPCBlock_<pid>` with the World SID
//! (and, on Windows 8+, the AppContainer flag), as the CLR's own reader does. No
//! PerformanceCounter, no registry, no counter provider DLLs.

use windows_sys::Win32::Foundation::{CloseHandle, GetLastError, HANDLE};
use windows_sys::Win32::Security::{AllocateAndInitializeSid, FreeSid, PSID, SECURITY_WORLD_SID_AUTHORITY};
use windows_sys::Win32::System::Memory::{FILE_MAP_READ, MEMORY_MAPPED_VIEW_ADDRESS, MapViewOfFile, OpenFileMappingW, UnmapViewOfFile};
use windows_sys::Win32::System::Threading::{
    AddSIDToBoundaryDescriptor, ClosePrivateNamespace, CreateBoundaryDescriptorW, DeleteBoundaryDescriptor, GetCurrentProcessId,
    OpenPrivateNamespaceW,
};

use crate::ipcblock::{self, ClrCounters, CountersError, IPC_BLOCK_SIZE, IPC_NUM_BLOCKS};

const CREATE_BOUNDARY_DESCRIPTOR_ADD_APPCONTAINER_SID: u32 = 0x1;
const ERROR_FILE_NOT_FOUND: u32 = 2;
const ERROR_ACCESS_DENIED: u32 = 5;

fn wide(s: &str) -> Vec<u16> {
    s.encode_utf16().chain(std::iter::once(0)).collect()
}

fn os(call: &'static str) -> CountersError {
    // SAFETY: reads the calling thread's last-error value.
    let code = unsafe { GetLastError() };
    let hint = match code {
        ERROR_FILE_NOT_FOUND => "no CLR IPC block: the process does not run the .NET Framework CLR (4.x), or has exited",
        ERROR_ACCESS_DENIED => "access denied: run as the process's user or from an elevated (Administrator) prompt",
        _ => "see the Windows error code",
    };
    CountersError::Os { call, code, hint }
}

/// Closes what `open_reader_namespace` opened, in reverse order.
struct Namespace {
    boundary: HANDLE,
    sid: PSID,
    namespace: HANDLE,
}

impl Drop for Namespace {
    fn drop(&mut self) {
        // SAFETY: each handle is null or was returned by the matching create/open call.
        unsafe {
            if !self.namespace.is_null() {
                ClosePrivateNamespace(self.namespace, 0);
            }
            if !self.sid.is_null() {
                FreeSid(self.sid);
            }
            if !self.boundary.is_null() {
                DeleteBoundaryDescriptor(self.boundary);
            }
        }
    }
}

fn open_reader_namespace(pid: u32) -> Result<Namespace, CountersError> {
    let name = wide(&format!("Cor_CLR_IPCBlock_{pid}"));
    let mut ns = Namespace { boundary: std::ptr::null_mut(), sid: std::ptr::null_mut(), namespace: std::ptr::null_mut() };
    // SAFETY: Win32 calls with valid, NUL-terminated strings and out-pointers; results checked.
    unsafe {
        ns.boundary = CreateBoundaryDescriptorW(name.as_ptr(), CREATE_BOUNDARY_DESCRIPTOR_ADD_APPCONTAINER_SID);
        if ns.boundary.is_null() {
            return Err(os("CreateBoundaryDescriptorW"));
        }
        if AllocateAndInitializeSid(&SECURITY_WORLD_SID_AUTHORITY, 1, 0, 0, 0, 0, 0, 0, 0, 0, &mut ns.sid) == 0 {
            ns.sid = std::ptr::null_mut();
            return Err(os("AllocateAndInitializeSid"));
        }
        if AddSIDToBoundaryDescriptor(&mut ns.boundary, ns.sid) == 0 {
            return Err(os("AddSIDToBoundaryDescriptor"));
        }
        let prefix = wide("Cor_CLR_READER");
        ns.namespace = OpenPrivateNamespaceW(ns.boundary as *const core::ffi::c_void, prefix.as_ptr());
        if ns.namespace.is_null() {
            return Err(os("OpenPrivateNamespaceW"));
        }
    }
    Ok(ns)
}

/// The counters of the .NET Framework runtime in process `pid` (this process or another).
pub fn counters(pid: u32) -> Result<ClrCounters, CountersError> {
    // SAFETY: no preconditions.
    let own = pid == unsafe { GetCurrentProcessId() };
    let _namespace = if own { None } else { Some(open_reader_namespace(pid)?) };
    let name = wide(if own { r"Cor_CLR_WRITER\Cor_SxSPublic_IPCBlock" } else { r"Cor_CLR_READER\Cor_SxSPublic_IPCBlock" });
    let len = IPC_BLOCK_SIZE * IPC_NUM_BLOCKS;
    // SAFETY: the mapping and view are checked and released below; the view is read with
    // volatile reads into our own buffer (the runtime writes it concurrently).
    unsafe {
        let mapping = OpenFileMappingW(FILE_MAP_READ, 0, name.as_ptr());
        if mapping.is_null() {
            return Err(os("OpenFileMappingW"));
        }
        let view = MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, len);
        if view.Value.is_null() {
            let e = os("MapViewOfFile");
            CloseHandle(mapping);
            return Err(e);
        }
        let result = read_consistent(view.Value as *const u8, len, pid);
        UnmapViewOfFile(MEMORY_MAPPED_VIEW_ADDRESS { Value: view.Value });
        CloseHandle(mapping);
        result
    }
}

/// Copies the table until a copy parses without a writer mid-update (at most 5 tries).
///
/// # Safety
/// `base` must point to `len` readable bytes.
unsafe fn read_consistent(base: *const u8, len: usize, pid: u32) -> Result<ClrCounters, CountersError> {
    let mut buf = vec![0u8; len];
    let mut last = CountersError::NeverWritten;
    for _ in 0..5 {
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: i < len, within the mapped view.
            *b = unsafe { std::ptr::read_volatile(base.add(i)) };
        }
        match ipcblock::parse_table(&buf, Some(pid)) {
            Err(e @ CountersError::WriterBusy { .. }) => last = e,
            other => return other,
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Err(last)
}
