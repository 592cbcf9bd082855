//! The object graph of one heap walk: objects by index (`u32`), their references in compressed
//! rows, and the roots.
use serde::{Deserialize, Serialize};

/// What kind of root holds an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RootLabelKind {
    /// A static field (named).
    Static,
    /// A strong or pinned GC handle.
    Handle,
    /// A local or argument on a thread's stack.
    Stack,
    /// The finalizer queue (objects waiting to be finalized, and finalizable objects).
    Finalizer,
    /// Other roots (COM wrappers, runtime internals).
    Other,
    /// Not reachable from any reported root (kept by something the walk does not report).
    Unrooted,
}

impl RootLabelKind {
    pub fn name(self) -> &'static str {
        match self {
            RootLabelKind::Static => "static",
            RootLabelKind::Handle => "handle",
            RootLabelKind::Stack => "stack",
            RootLabelKind::Finalizer => "finalizer",
            RootLabelKind::Other => "other",
            RootLabelKind::Unrooted => "unrooted",
        }
    }
}

/// A root's name as shown in paths: `[static App.Cache.Items]`, `[stack]`, `[pinned handle]`…
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootLabel {
    pub kind: RootLabelKind,
    pub name: String,
}

/// Objects, references and roots of one walk.
#[derive(Debug, Default)]
pub struct HeapGraph {
    /// Object addresses, by object index.
    pub addrs: Vec<u64>,
    pub sizes: Vec<u64>,
    /// Index into `type_names`.
    pub types: Vec<u32>,
    /// Object `i`'s references are `edges[edge_start[i]..edge_start[i + 1]]`.
    pub edge_start: Vec<u32>,
    pub edges: Vec<u32>,
    pub type_names: Vec<String>,
    /// (object, label index) of every root.
    pub roots: Vec<(u32, u32)>,
    pub root_labels: Vec<RootLabel>,
    /// References to objects the walk did not list (frozen / non-GC heap objects).
    pub unresolved_references: u64,
    /// Roots holding objects the walk did not list.
    pub unresolved_roots: u64,
    /// Weak handles seen (they keep nothing alive and are not roots here).
    pub weak_roots: u64,
    /// Runtime-callable wrappers seen.
    pub rcws: u64,
}

impl HeapGraph {
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// Object `i`'s references.
    pub fn refs(&self, i: u32) -> &[u32] {
        let (a, b) = (self.edge_start[i as usize] as usize, self.edge_start[i as usize + 1] as usize);
        &self.edges[a..b]
    }

    pub fn total_bytes(&self) -> u64 {
        self.sizes.iter().sum()
    }

    /// Bytes held by the graph's arrays.
    pub fn memory_bytes(&self) -> usize {
        self.addrs.capacity() * 8
            + self.sizes.capacity() * 8
            + self.types.capacity() * 4
            + self.edge_start.capacity() * 4
            + self.edges.capacity() * 4
    }

    /// Builds a graph directly (tests, and sources other than the runtime's events).
    /// `objects`: (address, size, type index); `refs`: (from, to) object indices.
    pub fn from_parts(objects: &[(u64, u64, u32)], refs: &[(u32, u32)], type_names: Vec<String>, roots: &[(u32, RootLabel)]) -> Self {
        let n = objects.len();
        let mut edge_start = vec![0u32; n + 1];
        for &(f, _) in refs {
            edge_start[f as usize + 1] += 1;
        }
        for i in 0..n {
            edge_start[i + 1] += edge_start[i];
        }
        let mut fill = edge_start.clone();
        let mut edges = vec![0u32; refs.len()];
        for &(f, t) in refs {
            edges[fill[f as usize] as usize] = t;
            fill[f as usize] += 1;
        }
        let mut root_labels: Vec<RootLabel> = Vec::new();
        let mut root_nodes = Vec::new();
        for (node, label) in roots {
            let idx = match root_labels.iter().position(|l| l == label) {
                Some(i) => i,
                None => {
                    root_labels.push(label.clone());
                    root_labels.len() - 1
                }
            };
            root_nodes.push((*node, idx as u32));
        }
        HeapGraph {
            addrs: objects.iter().map(|o| o.0).collect(),
            sizes: objects.iter().map(|o| o.1).collect(),
            types: objects.iter().map(|o| o.2).collect(),
            edge_start,
            edges,
            type_names,
            roots: root_nodes,
            root_labels,
            ..Default::default()
        }
    }
}
