//! Process command set replies: ProcessInfo (0x0400) and ProcessInfo2 (0x0404).
use super::{codec::PayloadReader, error::DecodeError};

/// ProcessInfo (0x0400): u64 pid, GUID runtime cookie, strings command line, OS, architecture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// The pid as the runtime sees it (the namespaced pid inside a container).
    pub pid: u64,
    /// Raw GUID bytes identifying this runtime instance.
    pub runtime_cookie: [u8; 16],
    pub command_line: String,
    pub os: String,
    pub arch: String,
}

/// ProcessInfo2 (0x0404): ProcessInfo plus the managed entry-point assembly and CLR version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo2 {
    pub info: ProcessInfo,
    pub managed_entrypoint_assembly: String,
    /// E.g. "8.0.4+2d7eea25…" (the product version with the commit hash).
    pub clr_product_version: String,
}

impl ProcessInfo {
    /// Decodes a ProcessInfo payload. Trailing bytes (newer runtimes) are ignored.
    pub fn parse(payload: &[u8]) -> Result<ProcessInfo, DecodeError> {
        Self::read(&mut PayloadReader::new(payload))
    }

    fn read(r: &mut PayloadReader<'_>) -> Result<ProcessInfo, DecodeError> {
        Ok(ProcessInfo {
            pid: r.u64("process id")?,
            runtime_cookie: r.guid("runtime cookie")?,
            command_line: r.string("command line")?,
            os: r.string("operating system")?,
            arch: r.string("architecture")?,
        })
    }

    /// The runtime cookie formatted as a GUID string.
    pub fn runtime_cookie_string(&self) -> String {
        let c = &self.runtime_cookie;
        format!(
            "{:08x}-{:04x}-{:04x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
            u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
            u16::from_le_bytes([c[4], c[5]]),
            u16::from_le_bytes([c[6], c[7]]),
            c[8], c[9], c[10], c[11], c[12], c[13], c[14], c[15]
        )
    }
}

impl ProcessInfo2 {
    /// Decodes a ProcessInfo2 payload. Trailing bytes are ignored.
    pub fn parse(payload: &[u8]) -> Result<ProcessInfo2, DecodeError> {
        let mut r = PayloadReader::new(payload);
        let info = ProcessInfo::read(&mut r)?;
        Ok(ProcessInfo2 {
            info,
            managed_entrypoint_assembly: r.string("managed entrypoint assembly")?,
            clr_product_version: r.string("clr product version")?,
        })
    }
}

/// What is known about a process: ProcessInfo2 when the runtime has it (.NET 6+), else ProcessInfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessDetails {
    pub info: ProcessInfo,
    pub managed_entrypoint_assembly: Option<String>,
    pub clr_product_version: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::codec::PayloadWriter;

    fn sample(extra: bool) -> Vec<u8> {
        let mut w = PayloadWriter::new();
        w.u64(4242).bytes(&[1, 0, 0, 0, 2, 0, 3, 0, 4, 5, 6, 7, 8, 9, 10, 11]);
        w.string("/usr/bin/dotnet app.dll").unwrap().string("Linux").unwrap().string("x64").unwrap();
        if extra {
            w.string("app").unwrap().string("8.0.4+abc").unwrap();
        }
        w.into_bytes()
    }

    #[test]
    fn parses_both_versions() {
        let i = ProcessInfo::parse(&sample(false)).unwrap();
        assert_eq!((i.pid, i.os.as_str(), i.arch.as_str()), (4242, "Linux", "x64"));
        assert_eq!(i.runtime_cookie_string(), "00000001-0002-0003-0405-060708090a0b");
        let i2 = ProcessInfo2::parse(&sample(true)).unwrap();
        assert_eq!(i2.info, i);
        assert_eq!(i2.clr_product_version, "8.0.4+abc");
        // a ProcessInfo payload is a truncated ProcessInfo2
        assert!(matches!(
            ProcessInfo2::parse(&sample(false)),
            Err(DecodeError::Truncated { what: "managed entrypoint assembly", .. })
        ));
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let full = sample(true);
        for n in 0..full.len() {
            assert!(ProcessInfo2::parse(&full[..n]).is_err(), "prefix {n} parsed");
        }
    }
}
