//! Where a user stack ends: frame-pointer walks through code without frame pointers (Debian's
//! libc) follow whatever the RBP register held, and can end in values that are no code address
//! at all (`0xfb89…`, `0x0`). A user stack is cut at its first return address outside every
//! executable mapping of the process, so its root is always a named frame or `module+offset`.
use clrprobe_symbolizer::maps::Maps;

use super::{FrameResolver, jit_lookup, lookup_addrs};

/// Distinct addresses remembered as outside every executable mapping, at most (then forgotten
/// and learnt again).
const OUTSIDE_MAX: usize = 65_536;

/// Is `addr` inside an executable mapping of `maps`?
fn in_code(maps: &Maps, addr: u64) -> bool {
    maps.find(addr).is_some_and(|m| m.executable)
}

impl FrameResolver {
    /// How many frames of `user` (leaf first) to keep: the leaf, and every return address up to
    /// the first one that no name covers and no executable mapping holds. The maps are read
    /// again once before an address is judged outside (code mapped since they were read), and
    /// the verdict is remembered. A process whose maps were never read keeps its whole stack.
    pub(super) fn user_frames_kept(&mut self, pid: u32, user: &[u64]) -> usize {
        let Some(p) = self.processes.get_mut(&pid) else { return user.len() };
        let mut refreshed = false;
        for (i, a) in lookup_addrs(user).enumerate().skip(1) {
            if self.named.contains_key(&(pid, a)) || jit_lookup(&p.jit, a).is_some() {
                continue;
            }
            let Some(maps) = p.sym.as_ref().map(|s| s.maps()) else { return user.len() };
            if in_code(maps, a) {
                continue;
            }
            if self.outside.contains_key(&(pid, a)) {
                return i;
            }
            if let Some(s) = p.sym.as_mut().filter(|_| !refreshed) {
                refreshed = true;
                let _ = s.refresh_maps();
                if in_code(s.maps(), a) {
                    continue;
                }
            }
            if self.outside.len() >= OUTSIDE_MAX {
                self.outside.clear();
            }
            self.outside.insert((pid, a), ());
            return i;
        }
        user.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_executable_mappings_hold_code() {
        let maps = Maps::parse(
            "7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n\
             7f0000001000-7f0000002000 rw-p 00001000 08:01 1 /usr/lib/libc.so.6\n\
             7f1000000000-7f1000010000 r-xs 00000000 00:01 2 /memfd:doublemapper (deleted)\n",
        )
        .unwrap();
        assert!(in_code(&maps, 0x7f00_0000_0800));
        assert!(in_code(&maps, 0x7f10_0000_8000));
        assert!(!in_code(&maps, 0x7f00_0000_1800), "data of a library");
        assert!(!in_code(&maps, 0xfb89_0000));
        assert!(!in_code(&maps, 0));
    }

    #[test]
    fn stacks_are_cut_at_their_first_address_outside_code() {
        let mut r = FrameResolver::new();
        // A process of its own (this test's), whose maps are read: its code is mapped, small
        // numbers are not.
        let pid = std::process::id();
        r.add_process(pid);
        let code = stacks_are_cut_at_their_first_address_outside_code as *const () as usize as u64;
        let user = [code, code + 1, 0xfb89, 0x1, code];
        assert_eq!(r.user_frames_kept(pid, &user), 2);
        // Remembered: judged again without reading the maps.
        assert_eq!(r.user_frames_kept(pid, &user), 2);
        assert_eq!(r.user_frames_kept(pid, &[code, code]), 2);
        // The leaf is kept whatever it is; an unknown process keeps everything.
        assert_eq!(r.user_frames_kept(pid, &[0x10, 0x20]), 1);
        assert_eq!(r.user_frames_kept(u32::MAX - 1, &user), user.len());
    }
}
