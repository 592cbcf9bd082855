//! The one error type of this crate: what was wrong with a payload or schema, and where.

use thiserror::Error;

/// Why a payload (or a self-describing schema) could not be decoded.
///
/// `event` names the layout being decoded (e.g. "GCStart_V2"); `field` the field whose
/// bytes were missing or bad; `offset` the byte offset in the payload where it starts.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error(
        "{event}: payload truncated at field {field} (offset {offset}): need {needed} bytes, {available} left"
    )]
    Truncated {
        event: &'static str,
        field: String,
        offset: usize,
        needed: usize,
        available: usize,
    },
    #[error("{event}: string field {field} at offset {offset} has no UTF-16 NUL terminator")]
    UnterminatedString {
        event: &'static str,
        field: String,
        offset: usize,
    },
    #[error(
        "{event}: element count {count} of field {field} (offset {offset}) needs {needed} bytes, only {available} left"
    )]
    CountTooLarge {
        event: &'static str,
        field: String,
        offset: usize,
        count: u64,
        needed: u64,
        available: usize,
    },
    #[error("{event}: pointer size {size} is not 4 or 8")]
    BadPointerSize { event: &'static str, size: u8 },
    #[error("string is not valid UTF-16 (unpaired surrogate at code unit {unit_index})")]
    InvalidUtf16 { unit_index: usize },
    #[error("invalid schema at field {field}: {reason}")]
    InvalidSchema { field: String, reason: &'static str },
    #[error("schema nesting deeper than {max} levels at field {field}")]
    SchemaTooDeep { field: String, max: usize },
    #[error("EventSource payload decodes to more than {max} bytes of values (at field {field})")]
    DecodedTooLarge { field: String, max: usize },
}
