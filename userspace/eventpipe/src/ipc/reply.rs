//! Replies: `0xFF/0x00` OK (command-specific payload) or `0xFF/0xFF` Error (int32 HRESULT).
use std::io::Read;

use super::{
    codec::PayloadReader,
    error::{DecodeError, IpcError},
    header::{HEADER_LEN, Header, command_set, server_id},
    hresult::ServerError,
};

/// A decoded OK reply: its payload bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OkReply {
    pub payload: Vec<u8>,
}

/// Decodes one complete reply message from `bytes` (header + `size - 20` payload bytes;
/// trailing bytes beyond `size` are ignored — on a streaming connection they are NetTrace data).
/// An error reply becomes `IpcError::Server` with the named HRESULT.
pub fn parse_reply(bytes: &[u8]) -> Result<OkReply, IpcError> {
    let header = Header::decode(bytes)?;
    let payload = PayloadReader::new(&bytes[HEADER_LEN..]).take(header.payload_len(), "reply payload")?;
    interpret(header, payload.to_vec())
}

/// Reads exactly one reply from a connection (never more bytes than the header announces).
pub fn read_reply(stream: &mut impl Read) -> Result<OkReply, IpcError> {
    let mut head = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match stream.read(&mut head[got..]) {
            Ok(0) => return Err(DecodeError::ConnectionClosed { got }.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let header = Header::decode(&head)?;
    let mut payload = vec![0u8; header.payload_len()];
    let mut filled = 0;
    while filled < payload.len() {
        match stream.read(&mut payload[filled..]) {
            Ok(0) => {
                let needed = payload.len();
                return Err(DecodeError::Truncated { what: "reply payload", needed, available: filled }.into());
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    interpret(header, payload)
}

fn interpret(header: Header, payload: Vec<u8>) -> Result<OkReply, IpcError> {
    match (header.command.set, header.command.id) {
        (command_set::SERVER, server_id::OK) => Ok(OkReply { payload }),
        (command_set::SERVER, server_id::ERROR) => {
            if payload.len() < 4 {
                return Err(DecodeError::ErrorPayloadTooShort(payload.len()).into());
            }
            let hr = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]);
            Err(IpcError::Server(ServerError::from_hresult(hr)))
        }
        (set, id) => Err(DecodeError::UnexpectedReply { set, id }.into()),
    }
}

impl OkReply {
    pub fn reader(&self) -> PayloadReader<'_> {
        PayloadReader::new(&self.payload)
    }

    /// Commands answering with an HRESULT in an OK reply (EnablePerfMap, ResumeRuntime, …):
    /// a non-zero value is an error; an empty payload counts as success.
    pub fn hresult(&self) -> Result<(), IpcError> {
        if self.payload.is_empty() {
            return Ok(());
        }
        match self.reader().u32("hresult")? {
            0 => Ok(()),
            hr => Err(IpcError::Server(ServerError::from_hresult(hr))),
        }
    }

    /// StopTracing / CollectTracing reply: the u64 session id.
    pub fn session_id(&self) -> Result<u64, IpcError> {
        Ok(self.reader().u64("session id")?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::header::{CommandId, encode_message};

    fn msg(set: u8, id: u8, payload: &[u8]) -> Vec<u8> {
        encode_message(CommandId::new(set, id), payload).unwrap()
    }

    #[test]
    fn ok_and_error_replies() {
        let ok = parse_reply(&msg(0xFF, 0, &42u64.to_le_bytes())).unwrap();
        assert_eq!(ok.session_id().unwrap(), 42);
        let err = parse_reply(&msg(0xFF, 0xFF, &0x8013_1385u32.to_le_bytes())).unwrap_err();
        assert!(err.is_unknown_command(), "{err}");
        // 8-byte error payload (the spec's table) still yields the HRESULT from the first 4 bytes
        let err = parse_reply(&msg(0xFF, 0xFF, &[0x86, 0x13, 0x13, 0x80, 0, 0, 0, 0])).unwrap_err();
        assert_eq!(err.server_error(), Some(ServerError::UnknownMagic));
    }

    #[test]
    fn corrupt_replies_are_typed() {
        let e = |b: &[u8]| match parse_reply(b) {
            Err(IpcError::Decode(d)) => d,
            other => panic!("expected a decode error, got {other:?}"),
        };
        assert!(matches!(e(&msg(0xFF, 0xFF, &[1, 2])), DecodeError::ErrorPayloadTooShort(2)));
        assert!(matches!(e(&msg(0x02, 0x01, &[])), DecodeError::UnexpectedReply { set: 2, id: 1 }));
        let mut m = msg(0xFF, 0, &[1, 2, 3, 4]);
        m.truncate(22); // header says 24 bytes
        assert!(matches!(e(&m), DecodeError::Truncated { what: "reply payload", needed: 4, available: 2 }));
        assert!(matches!(e(b"DOTNET_IPC_V2\0\x14\0\xff\0\0\0"), DecodeError::BadMagic(_)));
        assert!(matches!(e(&[]), DecodeError::Truncated { what: "header", .. }));
        // OK reply too short for a session id
        let ok = parse_reply(&msg(0xFF, 0, &[1, 2, 3])).unwrap();
        assert!(matches!(ok.session_id(), Err(IpcError::Decode(DecodeError::Truncated { what: "session id", .. }))));
        // non-zero HRESULT in an OK reply
        let ok = parse_reply(&msg(0xFF, 0, &0x8013_1515u32.to_le_bytes())).unwrap();
        assert_eq!(ok.hresult().unwrap_err().server_error(), Some(ServerError::NotSupported));
    }

    #[test]
    fn read_reply_stops_at_message_end_and_reports_short_streams() {
        let mut bytes = msg(0xFF, 0, &9u64.to_le_bytes());
        bytes.extend_from_slice(b"Nettrace");
        let mut cur = std::io::Cursor::new(bytes);
        assert_eq!(read_reply(&mut cur).unwrap().session_id().unwrap(), 9);
        let mut rest = Vec::new();
        cur.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"Nettrace");
        let mut short = std::io::Cursor::new(msg(0xFF, 0, &[])[..7].to_vec());
        assert!(matches!(read_reply(&mut short), Err(IpcError::Decode(DecodeError::ConnectionClosed { got: 7 }))));
    }
}
