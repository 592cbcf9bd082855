//! Exception counts by type, message and throw site. Messages are labels; to keep a profile
//! bounded when messages carry ids, at most [`MAX_MESSAGES_PER_TYPE`] distinct messages are kept
//! per type and the rest are counted under "<other messages>". Every exception is counted (no
//! sampling: EventPipe delivers each ExceptionThrown).
use std::{collections::HashMap, hash::BuildHasherDefault};

/// Fx: looked up several times per exception (the report sorts what it lists).
type Fx = BuildHasherDefault<rustc_hash::FxHasher>;

pub const MAX_MESSAGES_PER_TYPE: usize = 64;
pub const OTHER_MESSAGES: &str = "<other messages>";

/// Where one (type, message label, throw site) is counted: indices into [`Exceptions`]'
/// tables, kept by a caller that meets the same throw again (three map lookups by the type's
/// and the message's strings per exception were a twentieth of an aggregator's work on a
/// throwing app).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    ty: u32,
    message: u32,
    site: u32,
}

/// One exception type's counts.
#[derive(Debug, Default)]
struct TypeCounts {
    name: String,
    /// (message label, count), in first-seen order; `by_message` finds them.
    messages: Vec<(String, u64)>,
    by_message: HashMap<String, u32, Fx>,
    /// (throw-site IP, count), likewise.
    sites: Vec<(u64, u64)>,
    by_site: HashMap<u64, u32, Fx>,
    /// Distinct messages given their own label (see [`Exceptions::message_label`]).
    labelled: usize,
}

/// Counts by type, then by message or site: a known (type, message) is looked up by borrowed
/// strings (an exception made six Strings here, on a busy thrower a fifth of the events' cost),
/// and a known throw by its [`Counted`] indices.
#[derive(Debug, Default)]
pub struct Exceptions {
    types: Vec<TypeCounts>,
    by_type: HashMap<String, u32, Fx>,
}

impl Exceptions {
    /// The type's index, made on first sight.
    fn type_index(&mut self, ty: &str) -> usize {
        if let Some(&i) = self.by_type.get(ty) {
            return i as usize;
        }
        self.types.push(TypeCounts { name: ty.to_owned(), ..TypeCounts::default() });
        let i = self.types.len() - 1;
        self.by_type.insert(ty.to_owned(), i as u32);
        i
    }

    /// The label to use for `message` (itself, or the overflow bucket).
    pub fn message_label<'m>(&mut self, ty: &str, message: &'m str) -> &'m str {
        let t = self.type_index(ty);
        let t = &mut self.types[t];
        if t.by_message.contains_key(message) {
            return message;
        }
        if t.labelled >= MAX_MESSAGES_PER_TYPE {
            return OTHER_MESSAGES;
        }
        t.labelled += 1;
        message
    }

    /// Counts one exception; where it was counted, for [`Exceptions::count_again`].
    pub fn count(&mut self, ty: &str, message: &str, site: Option<u64>) -> Counted {
        let ti = self.type_index(ty);
        let t = &mut self.types[ti];
        let message = match t.by_message.get(message) {
            Some(&m) => m,
            None => {
                t.messages.push((message.to_owned(), 0));
                let m = (t.messages.len() - 1) as u32;
                t.by_message.insert(message.to_owned(), m);
                m
            }
        };
        let site = site.unwrap_or(0);
        let site = match t.by_site.get(&site) {
            Some(&s) => s,
            None => {
                t.sites.push((site, 0));
                let s = (t.sites.len() - 1) as u32;
                t.by_site.insert(site, s);
                s
            }
        };
        let at = Counted { ty: ti as u32, message, site };
        self.count_again(at);
        at
    }

    /// Counts one more exception where [`Exceptions::count`] counted one.
    #[inline]
    pub fn count_again(&mut self, at: Counted) {
        let t = &mut self.types[at.ty as usize];
        t.messages[at.message as usize].1 += 1;
        t.sites[at.site as usize].1 += 1;
    }

    /// (type, message label, count) of every (type, message) counted, in no particular order.
    pub fn by_type_message(&self) -> impl Iterator<Item = (&str, &str, u64)> + '_ {
        self.types.iter().flat_map(|t| t.messages.iter().map(move |(m, c)| (t.name.as_str(), m.as_str(), *c)))
    }

    /// (type, throw-site IP, count), likewise (counted for [`Exceptions::sizes`]; no report
    /// lists them yet).
    #[cfg(test)]
    pub fn by_site(&self) -> impl Iterator<Item = (&str, u64, u64)> + '_ {
        self.types.iter().flat_map(|t| t.sites.iter().map(move |(s, c)| (t.name.as_str(), *s, *c)))
    }

    /// Distinct (type, message) and (type, site) pairs.
    pub fn sizes(&self) -> (usize, usize) {
        (self.types.iter().map(|t| t.messages.len()).sum(), self.types.iter().map(|t| t.sites.len()).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count_of(e: &Exceptions, ty: &str, message: &str) -> Option<u64> {
        e.by_type_message().find(|x| x.0 == ty && x.1 == message).map(|x| x.2)
    }

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
        assert_eq!(e.by_type_message().filter(|x| x.0 == "T").count(), MAX_MESSAGES_PER_TYPE + 1);
        assert_eq!(count_of(&e, "T", OTHER_MESSAGES), Some(3));
        assert_eq!(e.by_site().collect::<Vec<_>>(), [("T", 7, MAX_MESSAGES_PER_TYPE as u64 + 3)]);
        // "U" has no count yet: only its label was asked for.
        assert_eq!(e.sizes(), (MAX_MESSAGES_PER_TYPE + 1, 1));
    }

    #[test]
    fn counting_again_adds_where_the_first_count_went() {
        let mut e = Exceptions::default();
        let a = e.count("T", "m", Some(1));
        let b = e.count("T", "n", Some(1));
        let c = e.count("U", "m", None);
        assert_ne!(a, b);
        assert_eq!(e.count("T", "m", Some(1)), a);
        e.count_again(a);
        e.count_again(c);
        assert_eq!(count_of(&e, "T", "m"), Some(3));
        assert_eq!(count_of(&e, "T", "n"), Some(1));
        assert_eq!(count_of(&e, "U", "m"), Some(2));
        let mut sites: Vec<_> = e.by_site().collect();
        sites.sort();
        assert_eq!(sites, [("T", 1, 4), ("U", 0, 2)]);
        assert_eq!(e.sizes(), (3, 2));
    }
}
