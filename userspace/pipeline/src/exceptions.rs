//! Exception counts by type, message and throw site. Messages are labels; to keep a profile
//! bounded when messages carry ids, at most [`MAX_MESSAGES_PER_TYPE`] distinct messages are kept
//! per type and the rest are counted under "<other messages>". Every exception is counted (no
//! sampling: EventPipe delivers each ExceptionThrown).
use std::{collections::HashMap, hash::BuildHasherDefault};

/// Fx: looked up several times per exception (the report sorts what it lists).
type Fx = BuildHasherDefault<rustc_hash::FxHasher>;

pub const MAX_MESSAGES_PER_TYPE: usize = 64;
pub const OTHER_MESSAGES: &str = "<other messages>";

/// Counts by type, then by message or site: a known (type, message) is looked up by borrowed
/// strings (an exception made six Strings here, on a busy thrower a fifth of the events' cost).
#[derive(Debug, Default)]
pub struct Exceptions {
    /// type → message → count.
    pub by_type_message: HashMap<String, HashMap<String, u64, Fx>, Fx>,
    /// type → throw-site IP → count.
    pub by_site: HashMap<String, HashMap<u64, u64, Fx>, Fx>,
    messages_per_type: HashMap<String, usize, Fx>,
}

impl Exceptions {
    /// The label to use for `message` (itself, or the overflow bucket).
    pub fn message_label<'m>(&mut self, ty: &str, message: &'m str) -> &'m str {
        if self.by_type_message.get(ty).is_some_and(|m| m.contains_key(message)) {
            return message;
        }
        let n = match self.messages_per_type.get_mut(ty) {
            Some(n) => n,
            None => self.messages_per_type.entry(ty.to_owned()).or_insert(0),
        };
        if *n >= MAX_MESSAGES_PER_TYPE {
            return OTHER_MESSAGES;
        }
        *n += 1;
        message
    }

    pub fn count(&mut self, ty: &str, message: &str, site: Option<u64>) {
        let messages = match self.by_type_message.get_mut(ty) {
            Some(m) => m,
            None => self.by_type_message.entry(ty.to_owned()).or_default(),
        };
        match messages.get_mut(message) {
            Some(c) => *c += 1,
            None => {
                messages.insert(message.to_owned(), 1);
            }
        }
        let sites = match self.by_site.get_mut(ty) {
            Some(s) => s,
            None => self.by_site.entry(ty.to_owned()).or_default(),
        };
        *sites.entry(site.unwrap_or(0)).or_insert(0) += 1;
    }

    /// Distinct (type, message) and (type, site) pairs.
    pub fn sizes(&self) -> (usize, usize) {
        (self.by_type_message.values().map(HashMap::len).sum(), self.by_site.values().map(HashMap::len).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_past_the_bound_share_one_label() {
        let mut e = Exceptions::default();
        for i in 0..MAX_MESSAGES_PER_TYPE + 3 {
            let msg = format!("id {i}");
            let label = e.message_label("T", &msg).to_string();
            e.count("T", &label, Some(7));
        }
        // A message already counted keeps its label.
        assert_eq!(e.message_label("T", "id 0"), "id 0");
        assert_eq!(e.message_label("T", "id 999"), OTHER_MESSAGES);
        // Another type has its own bound.
        assert_eq!(e.message_label("U", "id 999"), "id 999");
        let m = &e.by_type_message["T"];
        assert_eq!(m.len(), MAX_MESSAGES_PER_TYPE + 1);
        assert_eq!(m[OTHER_MESSAGES], 3);
        assert_eq!(e.by_site["T"][&7], MAX_MESSAGES_PER_TYPE as u64 + 3);
        assert_eq!(e.sizes(), (MAX_MESSAGES_PER_TYPE + 1, 1));
    }
}
