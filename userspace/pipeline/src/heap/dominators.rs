//! Immediate dominators of the object graph (Lengauer–Tarjan, the simple version with path
//! compression: O(E log V)), over a virtual root whose successors are the root objects.
//!
//! Everything is `u32` arrays indexed by DFS number; no recursion (a linked list of a million
//! objects is a DFS a million deep). Working memory: 10 × 4 bytes per object plus 4 per
//! reference, freed on return.
use super::graph::HeapGraph;

/// `idom` value of objects dominated only by the virtual root.
pub const VIRTUAL_ROOT: u32 = u32::MAX;
/// `idom` value of objects not reachable from the given roots.
pub const UNREACHED: u32 = u32::MAX - 1;
const NONE: u32 = u32::MAX;

/// The dominator tree.
#[derive(Debug, Clone)]
pub struct DomTree {
    /// Per object: its immediate dominator's index, [`VIRTUAL_ROOT`] or [`UNREACHED`].
    pub idom: Vec<u32>,
    /// Reached objects in DFS preorder: every object comes after its immediate dominator.
    pub preorder: Vec<u32>,
}

/// Dominators of `g` where the virtual root points at `roots` (object indices, in order).
pub fn dominators(g: &HeapGraph, roots: &[u32]) -> DomTree {
    let n = g.len();
    // Vertex 0 is the virtual root, vertex v ≥ 1 is object v - 1.
    let succ = |v: u32| -> &[u32] { if v == 0 { roots } else { g.refs(v - 1) } };
    let mut dfn = vec![NONE; n + 1];
    let mut vertex: Vec<u32> = Vec::with_capacity(n + 1);
    let mut parent: Vec<u32> = Vec::with_capacity(n + 1);
    {
        let mut stack: Vec<(u32, u32)> = vec![(0, 0)];
        dfn[0] = 0;
        vertex.push(0);
        parent.push(NONE);
        while let Some(top) = stack.last_mut() {
            let (v, k) = *top;
            let s = succ(v);
            if (k as usize) < s.len() {
                top.1 += 1;
                let w = s[k as usize] + 1;
                if dfn[w as usize] == NONE {
                    dfn[w as usize] = vertex.len() as u32;
                    parent.push(dfn[v as usize]);
                    vertex.push(w);
                    stack.push((w, 0));
                }
            } else {
                stack.pop();
            }
        }
    }
    let nr = vertex.len();
    // Predecessors in DFS numbers, reached vertices only.
    let mut pstart = vec![0u32; nr + 1];
    for &v in &vertex {
        for &w in succ(v) {
            let d = dfn[w as usize + 1];
            pstart[d as usize + 1] += 1;
        }
    }
    for i in 0..nr {
        pstart[i + 1] += pstart[i];
    }
    let mut preds = vec![0u32; pstart[nr] as usize];
    {
        let mut fill = pstart.clone();
        for (i, &v) in vertex.iter().enumerate() {
            for &w in succ(v) {
                let d = dfn[w as usize + 1] as usize;
                preds[fill[d] as usize] = i as u32;
                fill[d] += 1;
            }
        }
    }
    drop(dfn);
    let mut semi: Vec<u32> = (0..nr as u32).collect();
    let mut label: Vec<u32> = (0..nr as u32).collect();
    let mut ancestor = vec![NONE; nr];
    let mut idom = vec![NONE; nr];
    let mut bucket_head = vec![NONE; nr];
    let mut bucket_next = vec![NONE; nr];
    let mut path: Vec<u32> = Vec::new();
    let mut eval = |v: u32, ancestor: &mut [u32], label: &mut [u32], semi: &[u32]| -> u32 {
        if ancestor[v as usize] == NONE {
            return v;
        }
        // Compress the path from v up to the forest root, top first.
        path.clear();
        let mut x = v;
        while ancestor[ancestor[x as usize] as usize] != NONE {
            path.push(x);
            x = ancestor[x as usize];
        }
        while let Some(y) = path.pop() {
            let a = ancestor[y as usize] as usize;
            if semi[label[a] as usize] < semi[label[y as usize] as usize] {
                label[y as usize] = label[a];
            }
            ancestor[y as usize] = ancestor[a];
        }
        label[v as usize]
    };
    for w in (1..nr).rev() {
        for &v in &preds[pstart[w] as usize..pstart[w + 1] as usize] {
            let u = eval(v, &mut ancestor, &mut label, &semi);
            if semi[u as usize] < semi[w] {
                semi[w] = semi[u as usize];
            }
        }
        let s = semi[w] as usize;
        bucket_next[w] = bucket_head[s];
        bucket_head[s] = w as u32;
        let p = parent[w];
        ancestor[w] = p;
        let mut v = bucket_head[p as usize];
        bucket_head[p as usize] = NONE;
        while v != NONE {
            let next = bucket_next[v as usize];
            let u = eval(v, &mut ancestor, &mut label, &semi);
            idom[v as usize] = if semi[u as usize] < semi[v as usize] { u } else { p };
            v = next;
        }
    }
    for w in 1..nr {
        if idom[w] != semi[w] {
            idom[w] = idom[idom[w] as usize];
        }
    }
    let mut out = vec![UNREACHED; n];
    for w in 1..nr {
        let d = vertex[idom[w] as usize];
        out[vertex[w] as usize - 1] = if d == 0 { VIRTUAL_ROOT } else { d - 1 };
    }
    DomTree { idom: out, preorder: vertex[1..].iter().map(|v| v - 1).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::graph::{RootLabel, RootLabelKind};

    fn graph(n: usize, refs: &[(u32, u32)]) -> HeapGraph {
        let objects: Vec<(u64, u64, u32)> = (0..n).map(|i| (0x1000 + i as u64 * 16, 16, 0)).collect();
        let root = RootLabel { kind: RootLabelKind::Stack, name: "[stack]".into() };
        HeapGraph::from_parts(&objects, refs, vec!["T".into()], &[(0, root)])
    }

    /// Dominators by definition: d dominates v when v is unreachable from the roots with d
    /// removed. The immediate dominator is the dominator of v that every other one dominates.
    fn brute(g: &HeapGraph, roots: &[u32]) -> Vec<u32> {
        let n = g.len();
        let reach = |removed: Option<u32>| {
            let mut seen = vec![false; n];
            let mut stack: Vec<u32> = roots.iter().copied().filter(|&r| Some(r) != removed).collect();
            while let Some(v) = stack.pop() {
                if seen[v as usize] {
                    continue;
                }
                seen[v as usize] = true;
                stack.extend(g.refs(v).iter().copied().filter(|&w| Some(w) != removed));
            }
            seen
        };
        let all = reach(None);
        let doms: Vec<Vec<bool>> = (0..n as u32).map(|d| reach(Some(d))).collect();
        (0..n)
            .map(|v| {
                if !all[v] {
                    return UNREACHED;
                }
                let ds: Vec<u32> = (0..n as u32).filter(|&d| d as usize != v && !doms[d as usize][v]).collect();
                // The immediate one is dominated by all the others.
                ds.iter().copied().find(|&d| ds.iter().all(|&o| o == d || !doms[o as usize][d as usize])).unwrap_or(VIRTUAL_ROOT)
            })
            .collect()
    }

    #[test]
    fn classic_diamond_and_loop() {
        // 0 → 1, 0 → 2, 1 → 3, 2 → 3, 3 → 4, 4 → 1 (a loop back)
        let g = graph(5, &[(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (4, 1)]);
        let d = dominators(&g, &[0]);
        assert_eq!(d.idom, vec![VIRTUAL_ROOT, 0, 0, 0, 3]);
        assert_eq!(d.idom, brute(&g, &[0]));
    }

    #[test]
    fn two_roots_share_an_object() {
        let g = graph(4, &[(0, 2), (1, 2), (2, 3)]);
        let d = dominators(&g, &[0, 1]);
        assert_eq!(d.idom, vec![VIRTUAL_ROOT, VIRTUAL_ROOT, VIRTUAL_ROOT, 2]);
        assert_eq!(d.preorder.len(), 4);
    }

    #[test]
    fn long_chain_does_not_recurse() {
        let n = 200_000u32;
        let refs: Vec<(u32, u32)> = (0..n - 1).map(|i| (i, i + 1)).collect();
        let g = graph(n as usize, &refs);
        let d = dominators(&g, &[0]);
        assert!(d.idom.iter().skip(1).enumerate().all(|(i, &p)| p == i as u32));
    }

    #[test]
    fn unreachable_objects_are_marked() {
        let g = graph(3, &[(0, 1)]);
        assert_eq!(dominators(&g, &[0]).idom, vec![VIRTUAL_ROOT, 0, UNREACHED]);
    }

    #[test]
    fn random_graphs_match_the_definition() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |m: u32| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % u64::from(m)) as u32
        };
        for round in 0..300 {
            let n = 2 + rnd(25);
            let e = rnd(n * 3);
            let refs: Vec<(u32, u32)> = (0..e).map(|_| (rnd(n), rnd(n))).collect();
            let g = graph(n as usize, &refs);
            let roots: Vec<u32> = (0..1 + rnd(3)).map(|_| rnd(n)).collect();
            let d = dominators(&g, &roots);
            assert_eq!(d.idom, brute(&g, &roots), "round {round}: n={n} refs={refs:?} roots={roots:?}");
            // Preorder puts every object after its immediate dominator.
            let mut pos = vec![usize::MAX; n as usize];
            for (i, &v) in d.preorder.iter().enumerate() {
                pos[v as usize] = i;
            }
            for (v, &p) in d.idom.iter().enumerate() {
                if p < UNREACHED {
                    assert!(pos[p as usize] < pos[v], "round {round}");
                }
            }
        }
    }
}
