//! From the graph to the answers: per type count, shallow and retained bytes; the shortest path
//! from a root to each type; per root kind and per static field what they hold.
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::dominators::{DomTree, UNREACHED, VIRTUAL_ROOT, dominators};
use super::graph::{HeapGraph, RootLabel, RootLabelKind};

const NONE: u32 = u32::MAX;

/// Longest root path kept per type (longer ones keep their two ends around a `…` element).
pub const MAX_PATH: usize = 16;

/// The analysis of one graph, kept for the outputs that need per-object data (pprof).
pub struct HeapAnalysis {
    /// Per object: bytes it retains (itself and everything it alone keeps alive).
    pub retained: Vec<u64>,
    /// Per object: the object it was first reached from (BFS from the roots), or NONE for a
    /// root object.
    pub bfs_parent: Vec<u32>,
    /// Objects in BFS order (parents before children).
    pub bfs_order: Vec<u32>,
    /// Per object: label (index into `labels`) of the root its shortest path starts at.
    pub root_of: Vec<u32>,
    /// The graph's root labels plus `[unrooted]`.
    pub labels: Vec<RootLabel>,
    pub summary: HeapSummary,
}

/// A snapshot's per-type answer; the snapshot file (`PREFIX.heap.json`) and `--json` are a
/// [`HeapSummary`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TypeStats {
    pub name: String,
    pub count: u64,
    /// Shallow bytes (the objects themselves).
    pub bytes: u64,
    /// Bytes kept alive by the objects of this type (dominator tree; an object under another of
    /// the same type counts once).
    pub retained_bytes: u64,
    /// Path from a root to an object of this type (root label, then type names): the shortest
    /// one from the root that reaches most of the type's objects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub root_path: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RootKindStats {
    pub kind: RootLabelKind,
    /// Root references of this kind (one object can be held by several).
    pub count: u64,
    /// Bytes retained by the objects these roots hold directly.
    pub retained_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaticRootStats {
    /// `[static Namespace.Type.Field]`.
    pub field: String,
    /// Type of the object the field holds.
    #[serde(rename = "type")]
    pub type_name: String,
    pub retained_bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RootsSummary {
    pub by_kind: Vec<RootKindStats>,
    /// Static fields by retained bytes (at most 200).
    pub statics: Vec<StaticRootStats>,
    /// Objects reachable from no reported root (counted under `[unrooted]`).
    pub unrooted_objects: u64,
    pub weak_handles: u64,
}

/// How the snapshot was taken (filled by the taker; zero when unknown).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WalkInfo {
    #[serde(default)]
    pub pid: u32,
    /// Unix time in milliseconds.
    #[serde(default)]
    pub taken_at_ms: u64,
    /// The induced GC's number.
    #[serde(default)]
    pub gc_index: u32,
    /// The target's pause: SuspendEE begin to RestartEE end of the induced GC.
    #[serde(default)]
    pub pause_ms: f64,
    /// Session start to the end of the stream.
    #[serde(default)]
    pub walk_ms: f64,
    #[serde(default)]
    pub events: u64,
    #[serde(default)]
    pub unresolved_references: u64,
    #[serde(default)]
    pub runtime: String,
}

/// Everything a snapshot reports (text, `--json`, the `.heap.json` file, the input of `diff`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeapSummary {
    pub objects: u64,
    pub bytes: u64,
    pub references: u64,
    /// Every type, by retained bytes (largest first).
    pub types: Vec<TypeStats>,
    pub roots: RootsSummary,
    #[serde(default)]
    pub walk: WalkInfo,
}

impl HeapSummary {
    pub fn type_named(&self, name: &str) -> Option<&TypeStats> {
        self.types.iter().find(|t| t.name == name)
    }
}

fn kind_rank(k: RootLabelKind) -> u8 {
    match k {
        RootLabelKind::Static => 0,
        RootLabelKind::Handle => 1,
        RootLabelKind::Stack => 2,
        RootLabelKind::Finalizer => 3,
        RootLabelKind::Other => 4,
        RootLabelKind::Unrooted => 5,
    }
}

/// Analyzes `g`: BFS from the roots (statics first, so a path names a static field when one
/// holds the object at least as closely as any other root), then dominators and retained
/// sizes. Objects no root reaches are put under `[unrooted]`, starting from those nothing
/// references.
pub fn analyze(g: &HeapGraph) -> HeapAnalysis {
    let n = g.len();
    let mut labels = g.root_labels.clone();
    let unrooted_label = labels.len() as u32;
    labels.push(RootLabel { kind: RootLabelKind::Unrooted, name: "[unrooted]".into() });
    let mut roots: Vec<(u32, u32)> = g.roots.clone();
    roots.sort_by_key(|&(node, label)| (kind_rank(labels[label as usize].kind), labels[label as usize].name.clone(), node));

    // BFS from the roots.
    let mut bfs_parent = vec![NONE; n];
    let mut root_of = vec![NONE; n];
    let mut bfs_order: Vec<u32> = Vec::with_capacity(n);
    let mut seeds: Vec<u32> = Vec::new();
    let mut head = 0;
    let mut bfs = |seed: Vec<(u32, u32)>, bfs_order: &mut Vec<u32>, root_of: &mut [u32], bfs_parent: &mut [u32], seeds: &mut Vec<u32>| {
        for (node, label) in seed {
            if root_of[node as usize] == NONE {
                root_of[node as usize] = label;
                bfs_order.push(node);
                seeds.push(node);
            }
        }
        while head < bfs_order.len() {
            let v = bfs_order[head];
            head += 1;
            for &w in g.refs(v) {
                if root_of[w as usize] == NONE {
                    root_of[w as usize] = root_of[v as usize];
                    bfs_parent[w as usize] = v;
                    bfs_order.push(w);
                }
            }
        }
    };
    bfs(roots.clone(), &mut bfs_order, &mut root_of, &mut bfs_parent, &mut seeds);
    let rooted = bfs_order.len();
    if rooted < n {
        // Unrooted objects: first those nothing references, then whatever cycles remain.
        let mut referenced = vec![false; n];
        for &w in &g.edges {
            referenced[w as usize] = true;
        }
        let heads: Vec<(u32, u32)> =
            (0..n as u32).filter(|&i| root_of[i as usize] == NONE && !referenced[i as usize]).map(|i| (i, unrooted_label)).collect();
        drop(referenced);
        bfs(heads, &mut bfs_order, &mut root_of, &mut bfs_parent, &mut seeds);
        for i in 0..n as u32 {
            if root_of[i as usize] == NONE {
                bfs(vec![(i, unrooted_label)], &mut bfs_order, &mut root_of, &mut bfs_parent, &mut seeds);
            }
        }
    }
    let unrooted_objects = (n - rooted) as u64;

    let DomTree { idom, preorder } = dominators(g, &seeds);
    drop(seeds);
    let mut retained = g.sizes.clone();
    for &v in preorder.iter().rev() {
        let d = idom[v as usize];
        if d < UNREACHED {
            retained[d as usize] += retained[v as usize];
        }
    }

    // Per type: count, shallow, retained without counting an object under another of its type.
    let nt = g.type_names.len();
    let mut count = vec![0u64; nt];
    let mut bytes = vec![0u64; nt];
    for i in 0..n {
        count[g.types[i] as usize] += 1;
        bytes[g.types[i] as usize] += g.sizes[i];
    }
    let type_retained = retained_by_type(g, &idom, &preorder, &retained);
    drop(preorder);

    // Each type's path: from the root that reaches the most of its objects first (a list
    // under a static, not the one node a stack frame holds too), the shortest one from there
    // (the type's first object in BFS order under that root).
    let mut per_root: HashMap<(u32, u32), (u64, u32)> = HashMap::new();
    for &v in &bfs_order {
        let key = (g.types[v as usize], root_of[v as usize]);
        per_root.entry(key).or_insert((0, v)).0 += 1;
    }
    let mut first = vec![(0u64, NONE); nt];
    for (&(t, _), &(c, v)) in &per_root {
        let best = &mut first[t as usize];
        if c > best.0 || (c == best.0 && v < best.1) {
            *best = (c, v);
        }
    }
    drop(per_root);
    let first: Vec<u32> = first.into_iter().map(|(_, v)| v).collect();
    let mut types: Vec<TypeStats> = (0..nt)
        .filter(|&t| count[t] > 0)
        .map(|t| TypeStats {
            name: g.type_names[t].clone(),
            count: count[t],
            bytes: bytes[t],
            retained_bytes: type_retained[t],
            root_path: root_path(g, &labels, &bfs_parent, &root_of, first[t]),
        })
        .collect();
    types.sort_by(|a, b| b.retained_bytes.cmp(&a.retained_bytes).then(b.bytes.cmp(&a.bytes)).then(a.name.cmp(&b.name)));

    // Roots by kind, and static fields by what they retain.
    let mut by_kind: Vec<RootKindStats> = Vec::new();
    let mut held_by_kind: Vec<(RootLabelKind, u32)> = Vec::new();
    for &(node, label) in &roots {
        let kind = labels[label as usize].kind;
        match by_kind.iter_mut().find(|k| k.kind == kind) {
            Some(k) => k.count += 1,
            None => by_kind.push(RootKindStats { kind, count: 1, retained_bytes: 0 }),
        }
        held_by_kind.push((kind, node));
    }
    held_by_kind.sort_unstable();
    held_by_kind.dedup();
    for (kind, node) in held_by_kind {
        if let Some(k) = by_kind.iter_mut().find(|k| k.kind == kind) {
            k.retained_bytes += retained[node as usize];
        }
    }
    if unrooted_objects > 0 {
        let r: u64 = (0..n).filter(|&i| root_of[i] == unrooted_label && bfs_parent[i] == NONE).map(|i| retained[i]).sum();
        by_kind.push(RootKindStats { kind: RootLabelKind::Unrooted, count: 0, retained_bytes: r });
    }
    let mut statics: Vec<StaticRootStats> = roots
        .iter()
        .filter(|&&(_, l)| labels[l as usize].kind == RootLabelKind::Static)
        .map(|&(node, l)| StaticRootStats {
            field: labels[l as usize].name.clone(),
            type_name: g.type_names[g.types[node as usize] as usize].clone(),
            retained_bytes: retained[node as usize],
        })
        .collect();
    statics.sort_by(|a, b| b.retained_bytes.cmp(&a.retained_bytes).then(a.field.cmp(&b.field)));
    statics.dedup_by(|a, b| a.field == b.field && a.type_name == b.type_name);
    statics.truncate(200);

    let summary = HeapSummary {
        objects: n as u64,
        bytes: g.total_bytes(),
        references: g.edges.len() as u64,
        types,
        roots: RootsSummary { by_kind, statics, unrooted_objects, weak_handles: g.weak_roots },
        walk: WalkInfo { unresolved_references: g.unresolved_references, ..Default::default() },
    };
    HeapAnalysis { retained, bfs_parent, bfs_order, root_of, labels, summary }
}

/// Retained bytes per type: the sum over objects with no ancestor of the same type in the
/// dominator tree (walked top-down with a per-type counter of open ancestors).
fn retained_by_type(g: &HeapGraph, idom: &[u32], preorder: &[u32], retained: &[u64]) -> Vec<u64> {
    let n = g.len();
    // Children of each object in the dominator tree; slot n holds the virtual root's.
    let mut start = vec![0u32; n + 2];
    for &v in preorder {
        let d = idom[v as usize];
        let p = if d == VIRTUAL_ROOT { n } else { d as usize };
        start[p + 1] += 1;
    }
    for i in 0..n + 1 {
        start[i + 1] += start[i];
    }
    let mut children = vec![0u32; start[n + 1] as usize];
    let mut fill = start.clone();
    for &v in preorder {
        let d = idom[v as usize];
        let p = if d == VIRTUAL_ROOT { n } else { d as usize };
        children[fill[p] as usize] = v;
        fill[p] += 1;
    }
    drop(fill);
    let mut open = vec![0u32; g.type_names.len()];
    let mut out = vec![0u64; g.type_names.len()];
    // (object, next child position); the virtual root is `n`.
    let mut stack: Vec<(u32, u32)> = vec![(n as u32, start[n])];
    while let Some(top) = stack.last_mut() {
        let (v, k) = *top;
        if k < start[v as usize + 1] {
            top.1 += 1;
            let c = children[k as usize];
            let t = g.types[c as usize] as usize;
            if open[t] == 0 {
                out[t] += retained[c as usize];
            }
            open[t] += 1;
            stack.push((c, start[c as usize]));
        } else {
            stack.pop();
            if (v as usize) < n {
                open[g.types[v as usize] as usize] -= 1;
            }
        }
    }
    out
}

/// The path from a root to `v`: the root's label, then each object's type name; runs of one
/// type are written once with a count (`Node ×3`), and the middle of a path longer than
/// [`MAX_PATH`] is elided.
fn root_path(g: &HeapGraph, labels: &[RootLabel], parent: &[u32], root_of: &[u32], v: u32) -> Vec<String> {
    if v == NONE {
        return Vec::new();
    }
    let mut chain = Vec::new();
    let mut x = v;
    while x != NONE {
        chain.push(g.types[x as usize]);
        x = parent[x as usize];
    }
    chain.reverse();
    let mut out = vec![labels[root_of[v as usize] as usize].name.clone()];
    let mut runs: Vec<(u32, u64)> = Vec::new();
    for t in chain {
        match runs.last_mut() {
            Some((last, c)) if *last == t => *c += 1,
            _ => runs.push((t, 1)),
        }
    }
    let name = |(t, c): (u32, u64)| {
        if c > 1 { format!("{} ×{c}", g.type_names[t as usize]) } else { g.type_names[t as usize].clone() }
    };
    if runs.len() > MAX_PATH {
        let half = MAX_PATH / 2;
        out.extend(runs[..half].iter().copied().map(name));
        out.push(format!("… {} more …", runs.len() - 2 * half));
        out.extend(runs[runs.len() - half..].iter().copied().map(name));
    } else {
        out.extend(runs.into_iter().map(name));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(kind: RootLabelKind, name: &str) -> RootLabel {
        RootLabel { kind, name: name.into() }
    }

    /// A static holding a 4-node list (type 1, 32 bytes each) whose nodes each hold a 100-byte
    /// array (type 2); a stack root holding a Holder (type 0, 24 bytes) that also points at the
    /// third node; one unrooted 50-byte array.
    fn sample() -> HeapGraph {
        let mut objects = vec![(0x100, 24, 0)];
        for i in 0..4 {
            objects.push((0x200 + i * 0x100, 32, 1));
        }
        for i in 0..4 {
            objects.push((0x1000 + i * 0x100, 100, 2));
        }
        objects.push((0x9000, 50, 2));
        let mut refs = vec![(1, 2), (2, 3), (3, 4)];
        for i in 0..4 {
            refs.push((1 + i, 5 + i));
        }
        refs.push((0, 3));
        HeapGraph::from_parts(
            &objects,
            &refs,
            vec!["Holder".into(), "App.Node".into(), "System.Byte[]".into()],
            &[(1, label(RootLabelKind::Static, "[static App.Cache.Head]")), (0, label(RootLabelKind::Stack, "[stack]"))],
        )
    }

    #[test]
    fn counts_retained_and_paths() {
        let a = analyze(&sample());
        let s = &a.summary;
        assert_eq!((s.objects, s.bytes), (10, 24 + 4 * 32 + 4 * 100 + 50));
        let node = s.type_named("App.Node").unwrap();
        assert_eq!((node.count, node.bytes), (4, 128));
        // The head retains itself, node 2 and their arrays; node 3 is also held by the Holder,
        // so it and node 4 are retained by neither.
        assert_eq!(a.retained[1], 32 + 100 + 32 + 100);
        assert_eq!(a.retained[3], 2 * (32 + 100));
        // Type retained counts no node under another node: head (264) + node 3 (264).
        assert_eq!(node.retained_bytes, 528);
        assert_eq!(node.root_path, vec!["[static App.Cache.Head]", "App.Node"]);
        let arrays = s.type_named("System.Byte[]").unwrap();
        assert_eq!((arrays.count, arrays.bytes, arrays.retained_bytes), (5, 450, 450));
        assert_eq!(arrays.root_path, vec!["[static App.Cache.Head]", "App.Node", "System.Byte[]"]);
        assert_eq!(s.roots.unrooted_objects, 1);
        assert_eq!(s.roots.statics[0].field, "[static App.Cache.Head]");
        assert_eq!(s.roots.statics[0].retained_bytes, 264);
        let stack = s.roots.by_kind.iter().find(|k| k.kind == RootLabelKind::Stack).unwrap();
        assert_eq!(stack.retained_bytes, 24);
        let unrooted = s.roots.by_kind.iter().find(|k| k.kind == RootLabelKind::Unrooted).unwrap();
        assert_eq!(unrooted.retained_bytes, 50);
        // Types by retained bytes.
        assert_eq!(s.types[0].name, "App.Node");
    }

    #[test]
    fn long_paths_collapse_runs_and_elide() {
        // A chain alternating two types 40 times.
        let n = 80u32;
        let objects: Vec<(u64, u64, u32)> = (0..n).map(|i| (u64::from(i) * 8 + 8, 8, i % 2)).collect();
        let refs: Vec<(u32, u32)> = (0..n - 1).map(|i| (i, i + 1)).collect();
        let g = HeapGraph::from_parts(&objects, &refs, vec!["A".into(), "B".into()], &[(0, label(RootLabelKind::Stack, "[stack]"))]);
        let a = analyze(&g);
        assert_eq!(a.summary.type_named("A").unwrap().root_path, vec!["[stack]", "A"]);
        // A chain of one type collapses to one element.
        let objects: Vec<(u64, u64, u32)> = (0..n).map(|i| (u64::from(i) * 8 + 8, 8, u32::from(i == n - 1))).collect();
        let g = HeapGraph::from_parts(&objects, &refs, vec!["A".into(), "B".into()], &[(0, label(RootLabelKind::Stack, "[stack]"))]);
        let a = analyze(&g);
        assert_eq!(a.summary.type_named("B").unwrap().root_path, vec!["[stack]", "A ×79", "B"]);
        assert_eq!(a.summary.type_named("A").unwrap().retained_bytes, 8 * 80);
    }
}
