//! The part of a dump line every event of one metadata shares (provider, name, id, version,
//! opcode), escaped and formatted once per metadata instead of once per event.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::io::Write;
use std::sync::Arc;

use clr_events::Family;
use clr_events::direct_json::Direct;
use clr_events::json::{self, ToJson};
use clrprobe_eventpipe::nettrace::EventMetadata;

use super::stack_ids::AddrHasher;

/// Most heads kept (a stream that redefines its metadata at every sequence point makes new
/// ones); past it the cache starts over.
const MAX_HEADS: usize = 4096;

pub(super) struct Head {
    /// Held so that its address, the key, is not reused while cached.
    _md: Arc<EventMetadata>,
    /// The typed decoders of the metadata's provider (found once, not per event).
    pub(super) family: Family,
    /// Whether the metadata lists the payload's fields (an EventSource event).
    pub(super) self_describing: bool,
    /// The layout and the decoder's name when the events are written straight from the
    /// payload in JSON ([`clr_events::direct_json::write_direct_json`]).
    pub(super) direct: Option<(Direct, &'static str)>,
    /// The name the bytes below carry (set by the first event: [`Head::name_once`]), and
    /// where the name it was made from lies (the metadata's, held here, or a decoder's
    /// static name): the same place is the same name.
    name: Option<Box<str>>,
    name_at: (usize, usize),
    /// `Event<id>`: the name of an event neither the metadata nor a decoder names.
    pub(super) fallback: Box<str>,
    /// `,"provider":…,"name":…,"id":…,"version":…,"opcode":…,"thread":`, then
    /// [`PAD`] zero bytes (see [`Head::put_json`]).
    json: Vec<u8>,
    /// ` provider/name vN  stack `
    pub(super) text: Vec<u8>,
}

impl Head {
    fn new(md: &Arc<EventMetadata>) -> Head {
        let family = Family::of(&md.provider);
        let self_describing = md.schema.as_ref().is_some_and(|s| !s.fields.is_empty());
        let id = u16::try_from(md.event_id).unwrap_or(u16::MAX);
        Head {
            family,
            self_describing,
            direct: if self_describing { None } else { Direct::of(family, id) },
            name: None,
            name_at: (0, 0),
            fallback: format!("Event{}", md.event_id).into(),
            json: Vec::new(),
            text: Vec::new(),
            _md: Arc::clone(md),
        }
    }

    /// Spells the head with the first event's name (`None`: `Event<id>`); later calls do nothing.
    #[inline]
    pub(super) fn name_once(&mut self, md: &EventMetadata, name: Option<&str>) {
        if self.name.is_some() {
            return;
        }
        self.name_at = name.map_or((0, 0), |n| (n.as_ptr() as usize, n.len()));
        let name: Box<str> = name.unwrap_or(&self.fallback).into();
        self.json = json_middle(md, &name);
        self.json.resize(self.json.len() + PAD, 0);
        self.text = text_middle(md, &name);
        self.name = Some(name);
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

/// Heads up to this length are appended with one copy of this fixed size (a `memcpy` call of
/// a varying length costs more).
const PAD: usize = 128;

impl Head {
    /// Appends the JSON head.
    #[inline]
    pub(super) fn put_json(&self, buf: &mut Vec<u8>) {
        let n = self.json.len() - PAD;
        match self.json.get(..PAD) {
            Some(padded) if n <= PAD => {
                let mut fixed = [0u8; PAD];
                fixed.copy_from_slice(padded);
                let len = buf.len();
                buf.extend_from_slice(&fixed);
                buf.truncate(len + n);
            }
            _ => buf.extend_from_slice(&self.json[..n]),
        }
    }

    /// Whether [`Head::name_once`] has been called.
    #[inline]
    pub(super) fn named(&self) -> bool {
        self.name.is_some()
    }

    /// Whether the cached bytes carry `name`.
    #[inline]
    pub(super) fn has_name(&self, name: &str) -> bool {
        self.name_at == (name.as_ptr() as usize, name.len()) || self.name.as_deref() == Some(name)
    }
}

/// Slots of the direct-mapped cache in front of the map (a power of two).
const SLOTS: usize = 64;

#[derive(Default)]
pub(super) struct LineHeads {
    heads: Vec<Head>,
    /// Metadata address → index in `heads`.
    by_md: HashMap<usize, usize, BuildHasherDefault<AddrHasher>>,
    /// (metadata address, index) of the last head looked up at each slot: most events find
    /// theirs here without hashing.
    recent: Vec<(usize, usize)>,
}

impl LineHeads {
    /// The head of `md`'s events (unnamed until [`Head::name_once`]).
    #[inline]
    pub(super) fn get(&mut self, md: &Arc<EventMetadata>) -> &mut Head {
        let key = Arc::as_ptr(md) as usize;
        let slot = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) & (SLOTS - 1);
        if let Some(&(k, i)) = self.recent.get(slot)
            && k == key
        {
            return &mut self.heads[i];
        }
        self.get_slow(md, key, slot)
    }

    #[cold]
    fn get_slow(&mut self, md: &Arc<EventMetadata>, key: usize, slot: usize) -> &mut Head {
        if self.heads.len() >= MAX_HEADS && !self.by_md.contains_key(&key) {
            self.heads.clear();
            self.by_md.clear();
            self.recent.clear();
        }
        if self.recent.is_empty() {
            // Address 0 is no metadata's.
            self.recent.resize(SLOTS, (0, 0));
        }
        let i = match self.by_md.get(&key) {
            Some(&i) => i,
            None => {
                self.heads.push(Head::new(md));
                self.by_md.insert(key, self.heads.len() - 1);
                self.heads.len() - 1
            }
        };
        self.recent[slot] = (key, i);
        &mut self.heads[i]
    }
}
