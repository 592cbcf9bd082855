//! The 20-byte message header: magic "DOTNET_IPC_V1\0", u16 size (header + payload),
//! u8 command set, u8 command id, u16 reserved.
use super::error::{DecodeError, EncodeError};

pub const MAGIC: [u8; 14] = *b"DOTNET_IPC_V1\0";
pub const HEADER_LEN: usize = 20;

/// Command sets.
pub mod command_set {
    pub const DUMP: u8 = 0x01;
    pub const EVENTPIPE: u8 = 0x02;
    pub const PROFILER: u8 = 0x03;
    pub const PROCESS: u8 = 0x04;
    pub const SERVER: u8 = 0xFF;
}

/// Reply ids in the server command set.
pub mod server_id {
    pub const OK: u8 = 0x00;
    pub const ERROR: u8 = 0xFF;
}

/// A command: (command set, command id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CommandId {
    pub set: u8,
    pub id: u8,
}

impl CommandId {
    pub const fn new(set: u8, id: u8) -> Self {
        Self { set, id }
    }
}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Total message size including the header.
    pub size: u16,
    pub command: CommandId,
    pub reserved: u16,
}

impl Header {
    pub fn payload_len(&self) -> usize {
        usize::from(self.size) - HEADER_LEN
    }

    /// Decodes the first 20 bytes of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<Header, DecodeError> {
        if bytes.len() < HEADER_LEN {
            return Err(DecodeError::Truncated { what: "header", needed: HEADER_LEN, available: bytes.len() });
        }
        let mut magic = [0u8; 14];
        magic.copy_from_slice(&bytes[..14]);
        if magic != MAGIC {
            return Err(DecodeError::BadMagic(magic));
        }
        let size = u16::from_le_bytes([bytes[14], bytes[15]]);
        if usize::from(size) < HEADER_LEN {
            return Err(DecodeError::SizeTooSmall(size));
        }
        Ok(Header {
            size,
            command: CommandId::new(bytes[16], bytes[17]),
            reserved: u16::from_le_bytes([bytes[18], bytes[19]]),
        })
    }
}

/// Frames a request: header followed by `payload`.
pub fn encode_message(command: CommandId, payload: &[u8]) -> Result<Vec<u8>, EncodeError> {
    let total = HEADER_LEN + payload.len();
    let size = u16::try_from(total).map_err(|_| EncodeError::MessageTooLarge(total))?;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&size.to_le_bytes());
    out.push(command.set);
    out.push(command.id);
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(payload);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_process_info_request_exactly() {
        let m = encode_message(CommandId::new(0x04, 0x00), &[]).unwrap();
        assert_eq!(
            m,
            [0x44, 0x4F, 0x54, 0x4E, 0x45, 0x54, 0x5F, 0x49, 0x50, 0x43, 0x5F, 0x56, 0x31, 0x00, 20, 0, 4, 0, 0, 0]
        );
        let h = Header::decode(&m).unwrap();
        assert_eq!((h.size, h.command, h.payload_len()), (20, CommandId::new(4, 0), 0));
    }

    #[test]
    fn rejects_bad_headers() {
        let mut m = encode_message(CommandId::new(0xFF, 0), &[]).unwrap();
        assert!(matches!(Header::decode(&m[..19]), Err(DecodeError::Truncated { what: "header", .. })));
        m[14] = 19;
        assert_eq!(Header::decode(&m), Err(DecodeError::SizeTooSmall(19)));
        m[0] = b'X';
        assert!(matches!(Header::decode(&m), Err(DecodeError::BadMagic(_))));
        assert_eq!(encode_message(CommandId::new(2, 2), &vec![0; 65516]), Err(EncodeError::MessageTooLarge(65536)));
    }
}
