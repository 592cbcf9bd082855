//! Fuzzes the diagnostics IPC reply decoders: framing (`parse_reply` / `read_reply`, which must
//! agree), and the payload decoders (ProcessInfo, ProcessInfo2, session id, HRESULT).
#![no_main]

use clrprobe_eventpipe::ipc::{DecodeError, IpcError, MAGIC, OkReply, ProcessInfo, ProcessInfo2, parse_reply, read_reply};
use libfuzzer_sys::fuzz_target;

fn decode_payload(payload: &[u8]) {
    let a = ProcessInfo::parse(payload);
    let b = ProcessInfo2::parse(payload);
    // ProcessInfo2 starts with ProcessInfo: if it parses, the prefix must parse identically.
    if let Ok(b) = &b {
        assert_eq!(a.as_ref().ok(), Some(&b.info));
    }
    let reply = OkReply { payload: payload.to_vec() };
    let _ = reply.session_id();
    let _ = reply.hresult();
}

fn kind(r: &Result<OkReply, IpcError>) -> String {
    match r {
        Ok(ok) => format!("ok {:?}", ok.payload),
        Err(IpcError::Server(e)) => format!("server {e:?}"),
        // A short header is `Truncated` from a slice but `ConnectionClosed` from a stream.
        Err(IpcError::Decode(DecodeError::ConnectionClosed { got })) => format!("short header {got}"),
        Err(IpcError::Decode(DecodeError::Truncated { what: "header", available, .. })) => format!("short header {available}"),
        Err(IpcError::Decode(d)) => format!("decode {d:?}"),
        Err(e) => format!("other {e}"),
    }
}

fn framing(bytes: &[u8]) {
    let parsed = parse_reply(bytes);
    let read = read_reply(&mut std::io::Cursor::new(bytes));
    assert_eq!(kind(&parsed), kind(&read), "framing decoders disagree");
    if let Ok(ok) = parsed {
        decode_payload(&ok.payload);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    match mode % 3 {
        0 => framing(rest),
        // Behind a valid magic, so the header fields and payloads get explored too.
        1 => framing(&[&MAGIC[..], rest].concat()),
        _ => decode_payload(rest),
    }
});
