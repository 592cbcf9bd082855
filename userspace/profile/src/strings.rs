//! Interned strings: [`Str`] is a cheap-to-clone shared string; the builder's [`StringTable`]
//! makes equal strings share one allocation across frames and label sets.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::hash::BuildHasherDefault;
use std::ops::Deref;
use std::sync::Arc;

use crate::hash::FastHasher;
use crate::model::{Frame, LabelSet};

/// An immutable, shared string. Compares, hashes and orders like the `str` it holds.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Str(Arc<str>);

impl Str {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when both hold the very same allocation (i.e. they were interned together).
    pub fn ptr_eq(a: &Str, b: &Str) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl Default for Str {
    fn default() -> Self {
        Str(Arc::from(""))
    }
}

impl Deref for Str {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Str {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Str {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl From<&str> for Str {
    fn from(s: &str) -> Self {
        Str(Arc::from(s))
    }
}

impl From<String> for Str {
    fn from(s: String) -> Self {
        Str(Arc::from(s))
    }
}

impl From<&String> for Str {
    fn from(s: &String) -> Self {
        Str(Arc::from(s.as_str()))
    }
}

impl PartialEq<str> for Str {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Str {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for Str {
    fn eq(&self, other: &String) -> bool {
        &*self.0 == other.as_str()
    }
}

/// The set of distinct strings seen so far.
#[derive(Debug, Default)]
pub(crate) struct StringTable {
    set: HashSet<Str, BuildHasherDefault<FastHasher>>,
}

impl StringTable {
    /// The shared copy of `s`.
    pub fn intern(&mut self, s: &Str) -> Str {
        if let Some(shared) = self.set.get(s.as_str()) {
            return shared.clone();
        }
        self.set.insert(s.clone());
        s.clone()
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }

    fn share(&mut self, s: &mut Str) {
        *s = self.intern(s);
    }

    /// Point every string of `f` at the table's copy.
    pub fn share_frame(&mut self, f: &mut Frame) {
        self.share(&mut f.name);
        self.share(&mut f.module);
        for (k, v) in &mut f.attrs {
            self.share(k);
            self.share(v);
        }
    }

    /// Point every string of `l` at the table's copy.
    pub fn share_labels(&mut self, l: &mut LabelSet) {
        for s in [&mut l.process_name, &mut l.thread_name].into_iter().flatten() {
            self.share(s);
        }
        for (k, v) in &mut l.strings {
            self.share(k);
            self.share(v);
        }
        for (k, _) in &mut l.numbers {
            self.share(k);
        }
    }
}
