//! Heap snapshot analysis of a synthetic million-object graph: 10,000 lists of 50 nodes under
//! one rooted array, each node holding a leaf, every 7th node also pointing into another list
//! (so dominators are not just the tree). Measures `analyze` (BFS, dominators, retained sizes,
//! root paths) and `heap_profile` (the pprof of root paths).
use clrprobe_pipeline::heap::{HeapGraph, RootLabel, RootLabelKind, analyze, heap_profile};
use criterion::{Criterion, criterion_group, criterion_main};

fn graph() -> HeapGraph {
    let (lists, len) = (10_000u32, 50u32);
    let mut objects: Vec<(u64, u64, u32)> = vec![(0x1000, 8 * u64::from(lists) + 24, 0)];
    let mut refs: Vec<(u32, u32)> = Vec::new();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..lists {
        let mut prev = 0u32;
        for k in 0..len {
            let node = objects.len() as u32;
            objects.push((0, 32, 1));
            let leaf = objects.len() as u32;
            objects.push((0, 40, 2));
            refs.push((if k == 0 { 0 } else { prev }, node));
            refs.push((node, leaf));
            if (node / 2).is_multiple_of(7) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let other = 1 + 2 * (seed % (u64::from(lists) * u64::from(len))) as u32;
                refs.push((node, other));
            }
            prev = node;
        }
    }
    for (i, o) in objects.iter_mut().enumerate() {
        o.0 = 0x1000 + i as u64 * 64;
    }
    refs.sort_unstable();
    let root = RootLabel { kind: RootLabelKind::Static, name: "[static Cache]".into() };
    HeapGraph::from_parts(&objects, &refs, vec!["Node[]".into(), "Node".into(), "Leaf".into()], &[(0, root)])
}

fn bench(c: &mut Criterion) {
    let g = graph();
    eprintln!("synthetic heap: {} objects, {} references", g.len(), g.edges.len());
    let mut group = c.benchmark_group("heap");
    group.sample_size(10);
    group.bench_function("analyze_1m_objects", |b| b.iter(|| analyze(&g)));
    let a = analyze(&g);
    group.bench_function("pprof_1m_objects", |b| b.iter(|| heap_profile(&g, &a).unwrap()));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
