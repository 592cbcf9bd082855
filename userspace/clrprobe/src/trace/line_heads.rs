//! The part of a dump line every event of one metadata shares (provider, name, id, version,
//! opcode), escaped and formatted once per metadata instead of once per event.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::io::Write;
use std::sync::Arc;

use clr_events::json::{self, ToJson};
use clrprobe_eventpipe::nettrace::EventMetadata;

use super::stack_ids::AddrHasher;

/// Most heads kept (a stream that redefines its metadata at every sequence point makes new
/// ones); past it the cache starts over.
const MAX_HEADS: usize = 4096;

pub(super) struct Head {
    /// Held so that its address, the key, is not reused while cached.
    _md: Arc<EventMetadata>,
    /// The name the bytes below carry, and where the name it was made from lies (the
    /// metadata's, held here, or a decoder's static name): the same place is the same name.
    pub(super) name: Box<str>,
    name_at: (usize, usize),
    /// `Event<id>`: the name of an event neither the metadata nor a decoder names.
    pub(super) fallback: Box<str>,
    /// `,"provider":…,"name":…,"id":…,"version":…,"opcode":…,"thread":`
    pub(super) json: Vec<u8>,
    /// ` provider/name vN  stack `
    pub(super) text: Vec<u8>,
}

impl Head {
    fn new(md: &Arc<EventMetadata>, name: Option<&str>) -> Head {
        let fallback: Box<str> = format!("Event{}", md.event_id).into();
        let name_at = name.map_or((0, 0), |n| (n.as_ptr() as usize, n.len()));
        let name: Box<str> = name.unwrap_or(&fallback).into();
        Head {
            name_at,
            json: json_middle(md, &name),
            text: text_middle(md, &name),
            _md: Arc::clone(md),
            name,
            fallback,
        }
    }
}

/// `,"provider":…,"name":…,"id":…,"version":…,"opcode":…,"thread":`
pub(super) fn json_middle(md: &EventMetadata, name: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(128);
    b.extend_from_slice(b",\"provider\":");
    json::write_str(&md.provider, &mut b);
    b.extend_from_slice(b",\"name\":");
    json::write_str(name, &mut b);
    b.extend_from_slice(b",\"id\":");
    md.event_id.write_json(&mut b);
    b.extend_from_slice(b",\"version\":");
    md.version.write_json(&mut b);
    b.extend_from_slice(b",\"opcode\":");
    md.opcode.write_json(&mut b);
    b.extend_from_slice(b",\"thread\":");
    b
}

/// ` provider/name vN  stack `
pub(super) fn text_middle(md: &EventMetadata, name: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(96);
    let _ = write!(b, " {}/{} v{}  stack ", md.provider, name, md.version);
    b
}

impl Head {
    /// Whether the cached bytes carry `name`.
    #[inline]
    pub(super) fn has_name(&self, name: &str) -> bool {
        self.name_at == (name.as_ptr() as usize, name.len()) || *self.name == *name
    }
}

#[derive(Default)]
pub(super) struct LineHeads {
    heads: HashMap<usize, Head, BuildHasherDefault<AddrHasher>>,
}

impl LineHeads {
    /// The head of `md`'s events; made with `name` (or `Event<id>` without one) on first use.
    #[inline]
    pub(super) fn get(&mut self, md: &Arc<EventMetadata>, name: Option<&str>) -> &Head {
        let key = Arc::as_ptr(md) as usize;
        if self.heads.len() >= MAX_HEADS && !self.heads.contains_key(&key) {
            self.heads.clear();
        }
        self.heads.entry(key).or_insert_with(|| Head::new(md, name))
    }
}
