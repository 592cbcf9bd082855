//! The snapshot as a pprof profile: one sample per distinct root path, valued in objects
//! (`inuse_objects`/count) and bytes (`inuse_space`/bytes); the stack is the path from the
//! root (its label as the outermost frame) to the objects' type, so a flame graph shows what
//! holds the memory. Runs of one type (a linked list) are one frame, and paths deeper than
//! [`MAX_DEPTH`] frames continue under a `…` frame.
use std::collections::HashMap;

use clrprobe_profile::{Frame, FrameKind, LabelSet, Profile, ProfileBuilder, ProfileError, SampleType};

use super::analysis::HeapAnalysis;
use super::graph::HeapGraph;

/// Frames kept before a path is cut with `…`.
pub const MAX_DEPTH: u16 = 64;
const NONE: u32 = u32::MAX;

struct Trie {
    /// (parent, token, depth) per path.
    nodes: Vec<(u32, u32, u16)>,
    index: HashMap<(u32, u32), u32>,
}

impl Trie {
    fn intern(&mut self, parent: u32, token: u32) -> u32 {
        if let Some(&i) = self.index.get(&(parent, token)) {
            return i;
        }
        let depth = if parent == NONE { 1 } else { self.nodes[parent as usize].2 + 1 };
        let i = self.nodes.len() as u32;
        self.nodes.push((parent, token, depth));
        self.index.insert((parent, token), i);
        i
    }
}

/// Builds the heap profile of an analyzed graph.
pub fn heap_profile(g: &HeapGraph, a: &HeapAnalysis) -> Result<Profile, ProfileError> {
    let nt = g.type_names.len() as u32;
    let label_token = |l: u32| nt + l;
    let ellipsis = nt + a.labels.len() as u32;
    let mut trie = Trie { nodes: Vec::new(), index: HashMap::new() };
    let mut path = vec![NONE; g.len()];
    for &v in &a.bfs_order {
        let t = g.types[v as usize];
        let p = a.bfs_parent[v as usize];
        path[v as usize] = if p == NONE {
            let root = trie.intern(NONE, label_token(a.root_of[v as usize]));
            trie.intern(root, t)
        } else {
            let pp = path[p as usize];
            let (parent_of_pp, token, depth) = trie.nodes[pp as usize];
            if token == t {
                pp
            } else if depth < MAX_DEPTH {
                trie.intern(pp, t)
            } else if parent_of_pp != NONE && trie.nodes[parent_of_pp as usize].1 == ellipsis {
                trie.intern(parent_of_pp, t)
            } else {
                let e = trie.intern(pp, ellipsis);
                trie.intern(e, t)
            }
        };
    }
    let mut totals = vec![(0i64, 0i64); trie.nodes.len()];
    for (v, &p) in path.iter().enumerate() {
        if p != NONE {
            totals[p as usize].0 += 1;
            totals[p as usize].1 += g.sizes[v] as i64;
        }
    }
    drop(path);
    let mut b = ProfileBuilder::new(vec![SampleType::new("inuse_objects", "count"), SampleType::new("inuse_space", "bytes")]);
    b.add_comment("clrprobe heap snapshot: stacks are the shortest paths from a GC root");
    let labels = b.intern_labels(LabelSet::default())?;
    let mut frame_ids = HashMap::new();
    let mut stack = Vec::new();
    for (i, &(count, bytes)) in totals.iter().enumerate() {
        if count == 0 {
            continue;
        }
        stack.clear();
        let mut x = i as u32;
        while x != NONE {
            let (parent, token, _) = trie.nodes[x as usize];
            let id = match frame_ids.get(&token) {
                Some(&id) => id,
                None => {
                    let name = if token < nt {
                        g.type_names[token as usize].clone()
                    } else if token == ellipsis {
                        "…".to_string()
                    } else {
                        a.labels[(token - nt) as usize].name.clone()
                    };
                    let id = b.intern_frame(Frame::new(name, "", FrameKind::Synthetic))?;
                    frame_ids.insert(token, id);
                    id
                }
            };
            stack.push(id);
            x = parent;
        }
        stack.reverse();
        let s = b.intern_stack(&stack)?;
        b.add_sample(s, &[count, bytes], labels)?;
    }
    Ok(b.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::analysis::analyze;
    use crate::heap::graph::{RootLabel, RootLabelKind};

    #[test]
    fn stacks_are_root_paths_with_runs_collapsed() {
        // static → Node → Node → Node, each Node holds a Byte[].
        let objects: Vec<(u64, u64, u32)> =
            vec![(0x10, 32, 0), (0x20, 32, 0), (0x30, 32, 0), (0x40, 100, 1), (0x50, 100, 1), (0x60, 100, 1)];
        let refs = [(0, 1), (1, 2), (0, 3), (1, 4), (2, 5)];
        let g = HeapGraph::from_parts(
            &objects,
            &refs,
            vec!["Node".into(), "System.Byte[]".into()],
            &[(0, RootLabel { kind: RootLabelKind::Static, name: "[static App.Head]".into() })],
        );
        let a = analyze(&g);
        let p = heap_profile(&g, &a).unwrap();
        let mut got: Vec<(Vec<String>, Vec<i64>)> = p
            .samples()
            .map(|s| {
                let names = p.stack(s.stack).unwrap().iter().map(|&f| p.frame(f).unwrap().name.to_string()).collect();
                (names, s.values.to_vec())
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                (vec!["[static App.Head]".to_string(), "Node".into()], vec![3, 96]),
                (vec!["[static App.Head]".to_string(), "Node".into(), "System.Byte[]".into()], vec![3, 300]),
            ]
        );
    }

    #[test]
    fn deep_alternating_chain_is_cut() {
        let n = 1000u32;
        let objects: Vec<(u64, u64, u32)> = (0..n).map(|i| (u64::from(i) * 8 + 8, 8, i % 2)).collect();
        let refs: Vec<(u32, u32)> = (0..n - 1).map(|i| (i, i + 1)).collect();
        let g = HeapGraph::from_parts(
            &objects,
            &refs,
            vec!["A".into(), "B".into()],
            &[(0, RootLabel { kind: RootLabelKind::Stack, name: "[stack]".into() })],
        );
        let a = analyze(&g);
        let p = heap_profile(&g, &a).unwrap();
        let total: i64 = p.samples().map(|s| s.values[0]).sum();
        assert_eq!(total, i64::from(n));
        let deepest = p.samples().map(|s| p.stack(s.stack).unwrap().len()).max().unwrap();
        assert!(deepest <= MAX_DEPTH as usize + 2, "{deepest}");
    }
}
