//! CLR thread identities: the runtime's `Thread*` (ThreadCreated, rundown) → OS thread id, and
//! thread names where a source knows them.
use std::collections::HashMap;

#[derive(Debug, Default, Clone)]
pub struct ThreadTable {
    by_clr: HashMap<(u32, u64), u64>,
    names: HashMap<(u32, u64), String>,
}

impl ThreadTable {
    /// Threads known: (by runtime id, named).
    pub fn sizes(&self) -> (usize, usize) {
        (self.by_clr.len(), self.names.len())
    }

    pub fn add_clr_thread(&mut self, pid: u32, clr_thread: u64, os_tid: u64) {
        self.by_clr.insert((pid, clr_thread), os_tid);
    }

    pub fn set_name(&mut self, pid: u32, os_tid: u64, name: impl Into<String>) {
        self.names.insert((pid, os_tid), name.into());
    }

    /// The OS thread id for a lock owner id. .NET 8 reports the owner's OS thread id in
    /// ContentionStart_V2 (measured); a value that matches a CLR `Thread*` is mapped.
    pub fn owner_os_tid(&self, pid: u32, owner: u64) -> u64 {
        self.by_clr.get(&(pid, owner)).copied().unwrap_or(owner)
    }

    pub fn name(&self, pid: u32, os_tid: u64) -> Option<&str> {
        self.names.get(&(pid, os_tid)).map(String::as_str)
    }
}
