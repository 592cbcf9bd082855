//! Collects the heap dump events of one walk into a [`HeapGraph`].
//!
//! The runtime fills its node and edge buffers separately and flushes each when full, so a
//! GCBulkEdge event can arrive before the GCBulkNode event of the objects whose references it
//! lists. Nodes and edges are therefore kept as two ordered streams (each event's `Index` says
//! where its elements go) and matched at [`HeapBuilder::finish`]: node *k*'s references are the
//! next `EdgeCount` elements of the edge stream. A missing index (an event the runtime dropped)
//! makes the walk incomplete, which `finish` reports instead of building a wrong graph.
use std::collections::HashMap;

use clr_events::heap::{HeapEvent, RootKind};

use super::HeapError;
use super::graph::{HeapGraph, RootLabel, RootLabelKind};

/// One bulk event's elements: its index in the walk and where they sit in the flat store.
#[derive(Debug, Clone, Copy)]
struct Chunk {
    index: u32,
    start: usize,
    len: usize,
}

/// A root before the object addresses are resolved.
#[derive(Debug, Clone, Copy)]
struct PendingRoot {
    object: u64,
    label: u32,
}

/// Accumulates one heap walk. Memory while collecting: 24 bytes per object (address, size,
/// type, edge count) and 8 per reference.
#[derive(Debug, Default)]
pub struct HeapBuilder {
    addrs: Vec<u64>,
    sizes: Vec<u64>,
    types: Vec<u32>,
    edge_counts: Vec<u32>,
    node_chunks: Vec<Chunk>,
    edge_targets: Vec<u64>,
    edge_chunks: Vec<Chunk>,
    type_index: HashMap<u64, u32>,
    type_names: Vec<Option<String>>,
    roots: Vec<PendingRoot>,
    labels: Vec<RootLabel>,
    label_index: HashMap<(RootLabelKind, String), u32>,
    cwt: Vec<(u64, u64)>,
    weak_roots: u64,
    rcws: u64,
    /// Heap events seen.
    pub events: u64,
}

impl HeapBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Objects received so far.
    pub fn objects(&self) -> u64 {
        self.addrs.len() as u64
    }

    /// References received so far.
    pub fn references(&self) -> u64 {
        self.edge_targets.len() as u64
    }

    /// Bytes of the builder's own arrays (capacity), for the memory statement.
    pub fn memory_bytes(&self) -> usize {
        self.addrs.capacity() * 8
            + self.sizes.capacity() * 8
            + self.types.capacity() * 4
            + self.edge_counts.capacity() * 4
            + self.edge_targets.capacity() * 8
    }

    fn type_of(&mut self, type_id: u64) -> u32 {
        let next = self.type_names.len() as u32;
        let idx = *self.type_index.entry(type_id).or_insert(next);
        if idx == next {
            self.type_names.push(None);
        }
        idx
    }

    fn label(&mut self, kind: RootLabelKind, name: String) -> u32 {
        let next = self.labels.len() as u32;
        let key = (kind, name);
        if let Some(&i) = self.label_index.get(&key) {
            return i;
        }
        self.labels.push(RootLabel { kind, name: key.1.clone() });
        self.label_index.insert(key, next);
        next
    }

    pub fn on_event(&mut self, ev: &HeapEvent<'_>) -> Result<(), HeapError> {
        self.events += 1;
        match ev {
            HeapEvent::BulkNode(b) => {
                let start = self.addrs.len();
                for n in b.iter() {
                    let t = self.type_of(n.type_id);
                    self.addrs.push(n.address);
                    self.sizes.push(n.size);
                    self.types.push(t);
                    let edges = u32::try_from(n.edge_count)
                        .map_err(|_| HeapError::Corrupt { what: format!("object 0x{:x} claims {} references", n.address, n.edge_count) })?;
                    self.edge_counts.push(edges);
                }
                self.node_chunks.push(Chunk { index: b.index.unwrap_or(0), start, len: self.addrs.len() - start });
            }
            HeapEvent::BulkEdge(b) => {
                let start = self.edge_targets.len();
                self.edge_targets.extend(b.iter().map(|e| e.target));
                self.edge_chunks.push(Chunk { index: b.index.unwrap_or(0), start, len: self.edge_targets.len() - start });
            }
            HeapEvent::BulkRootEdge(b) => {
                for r in b.iter() {
                    if r.is_weak() {
                        // A weak handle keeps nothing alive.
                        self.weak_roots += 1;
                        continue;
                    }
                    let pinned = r.flags & clr_events::heap::root_flags::PINNING != 0;
                    let (kind, name) = match r.kind {
                        RootKind::Stack => (RootLabelKind::Stack, "[stack]"),
                        RootKind::Finalizer => (RootLabelKind::Finalizer, "[finalizer queue]"),
                        RootKind::Handle if pinned => (RootLabelKind::Handle, "[pinned handle]"),
                        RootKind::Handle => (RootLabelKind::Handle, "[strong handle]"),
                        RootKind::Other | RootKind::Unknown(_) => (RootLabelKind::Other, "[other root]"),
                    };
                    let label = self.label(kind, name.to_string());
                    self.roots.push(PendingRoot { object: r.object, label });
                }
            }
            HeapEvent::BulkRootStaticVar(statics) => {
                // The event names the field but not its declaring type (its TypeID is the
                // type of the object the field holds).
                for st in statics {
                    let thread = st.flags & clr_events::heap::static_var_flags::THREAD_LOCAL != 0;
                    let name = format!("[{} {}]", if thread { "thread static" } else { "static" }, st.field_name.to_string_lossy());
                    let label = self.label(RootLabelKind::Static, name);
                    self.roots.push(PendingRoot { object: st.object, label });
                }
            }
            HeapEvent::BulkRootCwtElementEdge(b) => self.cwt.extend(b.iter().map(|e| (e.key, e.value))),
            HeapEvent::BulkRootCcw(b) => {
                let label = self.label(RootLabelKind::Other, "[COM callable wrapper]".into());
                for c in b.iter() {
                    self.roots.push(PendingRoot { object: c.object, label });
                }
            }
            HeapEvent::BulkRcw(b) => self.rcws += b.count as u64,
            HeapEvent::BulkType(types) => {
                for t in types {
                    let idx = self.type_of(t.type_id);
                    let name = t.name.to_string_lossy();
                    if !name.is_empty() {
                        self.type_names[idx as usize] = Some(name);
                    }
                }
            }
        }
        Ok(())
    }

    /// Matches nodes with their references, resolves addresses to object indices and returns
    /// the graph. Fails when the walk has a gap (a lost event) or the counts disagree.
    pub fn finish(self) -> Result<HeapGraph, HeapError> {
        let HeapBuilder {
            addrs,
            sizes,
            types,
            edge_counts,
            node_chunks,
            edge_targets,
            edge_chunks,
            type_index,
            type_names,
            roots,
            labels,
            cwt,
            weak_roots,
            rcws,
            events: _,
            label_index: _,
        } = self;
        if addrs.is_empty() {
            return Err(HeapError::Empty);
        }
        // Put both streams in index order and check that no event is missing.
        let (addrs, sizes, types, edge_counts) = if in_order(&node_chunks, "GCBulkNode")? {
            (addrs, sizes, types, edge_counts)
        } else {
            let order = sorted_chunks(&node_chunks);
            (permute(&addrs, &order), permute(&sizes, &order), permute(&types, &order), permute(&edge_counts, &order))
        };
        let edge_targets =
            if in_order(&edge_chunks, "GCBulkEdge")? { edge_targets } else { permute(&edge_targets, &sorted_chunks(&edge_chunks)) };
        let claimed: u64 = edge_counts.iter().map(|&c| u64::from(c)).sum();
        if claimed != edge_targets.len() as u64 {
            return Err(HeapError::Incomplete {
                what: format!("the objects list {claimed} references but {} arrived", edge_targets.len()),
            });
        }
        let n = addrs.len();
        if n >= u32::MAX as usize || edge_targets.len() + cwt.len() >= u32::MAX as usize {
            return Err(HeapError::TooLarge { objects: n as u64, references: edge_targets.len() as u64 });
        }
        let resolver = Resolver::new(&addrs);
        // Objects' references, plus a conditional weak table's key → value.
        let mut extra: Vec<(u32, u32)> = Vec::new();
        for &(k, v) in &cwt {
            if let (Some(k), Some(v)) = (resolver.find(k), resolver.find(v)) {
                extra.push((k, v));
            }
        }
        extra.sort_unstable();
        let mut edge_start = Vec::with_capacity(n + 1);
        let mut edges = Vec::with_capacity(edge_targets.len() + extra.len());
        let mut unresolved_references = 0u64;
        let mut pos = 0usize;
        let mut x = 0usize;
        for (i, &count) in edge_counts.iter().enumerate() {
            edge_start.push(edges.len() as u32);
            for &t in &edge_targets[pos..pos + count as usize] {
                match resolver.find(t) {
                    Some(j) => edges.push(j),
                    None => unresolved_references += u64::from(t != 0),
                }
            }
            pos += count as usize;
            while x < extra.len() && extra[x].0 as usize == i {
                edges.push(extra[x].1);
                x += 1;
            }
        }
        edge_start.push(edges.len() as u32);
        drop(edge_targets);
        drop(edge_counts);
        let mut root_nodes = Vec::with_capacity(roots.len());
        let mut unresolved_roots = 0u64;
        for r in &roots {
            match resolver.find(r.object) {
                Some(i) => root_nodes.push((i, r.label)),
                None => unresolved_roots += u64::from(r.object != 0),
            }
        }
        drop(resolver);
        let mut ids = vec![0u64; type_names.len()];
        for (&id, &i) in &type_index {
            ids[i as usize] = id;
        }
        let names: Vec<String> = type_names.into_iter().zip(ids).map(|(n, id)| n.unwrap_or_else(|| format!("[type {id:#x}]"))).collect();
        Ok(HeapGraph {
            addrs,
            sizes,
            types,
            edge_start,
            edges,
            type_names: names,
            roots: root_nodes,
            root_labels: labels,
            unresolved_references,
            unresolved_roots,
            weak_roots,
            rcws,
        })
    }
}

/// True when the chunks are already in index order 0, 1, 2…; an error when an index is missing
/// or repeated.
fn in_order(chunks: &[Chunk], what: &str) -> Result<bool, HeapError> {
    let sequential = chunks.iter().enumerate().all(|(i, c)| c.index as usize == i);
    if sequential {
        return Ok(true);
    }
    let mut idx: Vec<u32> = chunks.iter().map(|c| c.index).collect();
    idx.sort_unstable();
    for (i, &v) in idx.iter().enumerate() {
        if v as usize != i {
            return Err(HeapError::Incomplete { what: format!("{what} event {i} is missing (events were lost)") });
        }
    }
    Ok(false)
}

fn sorted_chunks(chunks: &[Chunk]) -> Vec<Chunk> {
    let mut c = chunks.to_vec();
    c.sort_unstable_by_key(|c| c.index);
    c
}

fn permute<T: Copy>(v: &[T], order: &[Chunk]) -> Vec<T> {
    let mut out = Vec::with_capacity(v.len());
    for c in order {
        out.extend_from_slice(&v[c.start..c.start + c.len]);
    }
    out
}

/// Address → object index: binary search over the addresses when the walk listed them in
/// order (it walks segments in address order, usually), else over a sorted copy.
struct Resolver<'a> {
    addrs: &'a [u64],
    sorted: Option<Vec<(u64, u32)>>,
}

impl<'a> Resolver<'a> {
    fn new(addrs: &'a [u64]) -> Self {
        let sorted = if addrs.is_sorted() {
            None
        } else {
            let mut s: Vec<(u64, u32)> = addrs.iter().enumerate().map(|(i, &a)| (a, i as u32)).collect();
            s.sort_unstable();
            Some(s)
        };
        Resolver { addrs, sorted }
    }

    fn find(&self, addr: u64) -> Option<u32> {
        match &self.sorted {
            None => self.addrs.binary_search(&addr).ok().map(|i| i as u32),
            Some(s) => s.binary_search_by_key(&addr, |p| p.0).ok().map(|i| s[i].1),
        }
    }
}
