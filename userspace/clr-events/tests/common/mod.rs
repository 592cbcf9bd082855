//! Test helpers: a payload builder that writes manifest fields one by one, and a checker that
//! decodes a payload exactly, with a longer tail, and at every truncated length.
#![allow(dead_code)]

use clr_events::{ClrEvent, DecodeError, RawEvent, decode};

pub use clr_events::builder::Payload;

pub fn raw<'a>(
    provider: &'a str,
    id: u16,
    version: u8,
    pointer_size: u8,
    payload: &'a [u8],
) -> RawEvent<'a> {
    RawEvent {
        provider,
        event_id: id,
        version,
        payload,
        pointer_size,
    }
}

/// Decodes `p` for (provider, id, version) and hands the result to `check`; then checks that a
/// longer payload decodes to the same event and that every shorter prefix is an error whose
/// message names `layout`.
pub fn check_event(
    provider: &str,
    id: u16,
    version: u8,
    p: &Payload,
    layout: &str,
    check: impl Fn(&ClrEvent<'_>),
) {
    let ev = decode(&raw(provider, id, version, p.pointer_size, &p.buf))
        .unwrap_or_else(|e| panic!("{layout}: full payload failed: {e}"));
    check(&ev);

    let mut longer = p.buf.clone();
    longer.extend_from_slice(&[0xAB, 0xCD, 0x00, 0x00, 0x17, 0x2A, 0xFF]);
    let ev_long = decode(&raw(provider, id, version, p.pointer_size, &longer))
        .unwrap_or_else(|e| panic!("{layout}: longer payload failed: {e}"));
    assert_eq!(
        ev_long, ev,
        "{layout}: tail bytes changed the decoded event"
    );

    for n in 0..p.buf.len() {
        match decode(&raw(provider, id, version, p.pointer_size, &p.buf[..n])) {
            Ok(ev) => panic!(
                "{layout}: truncated to {n}/{} bytes decoded as {ev:?}",
                p.buf.len()
            ),
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(layout),
                    "{layout}: error for {n} bytes does not name the layout: {msg}"
                );
                assert!(
                    matches!(
                        e,
                        DecodeError::Truncated { .. }
                            | DecodeError::UnterminatedString { .. }
                            | DecodeError::CountTooLarge { .. }
                    ),
                    "{layout}: unexpected error kind {e:?}"
                );
            }
        }
    }
}
