//! Exception counts by type, message and throw site. Messages are labels; to keep a profile
//! bounded when messages carry ids, at most [`MAX_MESSAGES_PER_TYPE`] distinct messages are kept
//! per type and the rest are counted under "<other messages>". Every exception is counted (no
//! sampling: EventPipe delivers each ExceptionThrown).
use std::collections::HashMap;

pub const MAX_MESSAGES_PER_TYPE: usize = 64;
pub const OTHER_MESSAGES: &str = "<other messages>";

#[derive(Debug, Default)]
pub struct Exceptions {
    /// (type, message) → count.
    pub by_type_message: HashMap<(String, String), u64>,
    /// (type, throw-site IP) → count.
    pub by_site: HashMap<(String, u64), u64>,
    messages_per_type: HashMap<String, usize>,
}

impl Exceptions {
    /// The label to use for `message` (itself, or the overflow bucket).
    pub fn message_label(&mut self, ty: &str, message: String) -> String {
        if self.by_type_message.contains_key(&(ty.to_string(), message.clone())) {
            return message;
        }
        let n = self.messages_per_type.entry(ty.to_string()).or_insert(0);
        if *n >= MAX_MESSAGES_PER_TYPE {
            return OTHER_MESSAGES.to_string();
        }
        *n += 1;
        message
    }

    pub fn count(&mut self, ty: &str, message: &str, site: Option<u64>) {
        *self.by_type_message.entry((ty.to_string(), message.to_string())).or_insert(0) += 1;
        *self.by_site.entry((ty.to_string(), site.unwrap_or(0))).or_insert(0) += 1;
    }
}
