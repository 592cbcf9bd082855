//! The container a process runs in, as `docker ps` names it.

/// The container id in `/proc/PID/cgroup` (docker, containerd, podman: 64 hex digits),
/// shortened to 12 as `docker ps` shows it.
pub(crate) fn container_id(pid: u32) -> Option<String> {
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    container_id_in(&cgroup)
}

fn container_id_in(cgroup: &str) -> Option<String> {
    for line in cgroup.lines() {
        for part in line.rsplit(['/', '-', ':']) {
            let part = part.strip_suffix(".scope").unwrap_or(part);
            if part.len() == 64 && part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Some(part[..12].to_owned());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn container_ids_from_cgroup_paths() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(super::container_id_in(&format!("0::/system.slice/docker-{id}.scope\n")).as_deref(), Some("0123456789ab"));
        assert_eq!(super::container_id_in(&format!("0::/kubepods/besteffort/pod1/{id}")).as_deref(), Some("0123456789ab"));
        assert_eq!(super::container_id_in("0::/user.slice/session-2.scope"), None);
    }
}
