//! Text of a snapshot (top types by retained and by shallow bytes, each with its root path) and
//! of a diff (what grew).
use std::fmt::Write;

use clrprobe_pipeline::heap::{HeapDiff, HeapSummary, TypeStats};

/// `1.2 MB`, `340 B`.
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{b} B") } else { format!("{v:.1} {}", UNITS[u]) }
}

fn signed_bytes(d: i64) -> String {
    if d < 0 { format!("-{}", bytes(d.unsigned_abs())) } else { format!("+{}", bytes(d as u64)) }
}

fn path(p: &[String]) -> String {
    if p.is_empty() { "(no path)".into() } else { p.join(" → ") }
}

fn type_table(out: &mut String, types: &[&TypeStats]) {
    let _ = writeln!(out, "  {:>11} {:>11} {:>10}  type", "retained", "shallow", "count");
    for t in types {
        let _ = writeln!(out, "  {:>11} {:>11} {:>10}  {}", bytes(t.retained_bytes), bytes(t.bytes), t.count, t.name);
        let _ = writeln!(out, "  {:>35}  path: {}", "", path(&t.root_path));
    }
}

/// The report of one snapshot.
pub fn summary(s: &HeapSummary, top: usize) -> String {
    let mut out = String::new();
    let w = &s.walk;
    let _ = writeln!(out, "heap of pid {}: {} objects, {}, {} references", w.pid, s.objects, bytes(s.bytes), s.references);
    let _ = writeln!(
        out,
        "walk: induced GC #{} paused the target {:.1} ms; snapshot took {:.1} s ({} events)",
        w.gc_index,
        w.pause_ms,
        w.walk_ms / 1e3,
        w.events
    );
    let kinds: Vec<String> = s
        .roots
        .by_kind
        .iter()
        .map(|k| {
            if k.count > 0 {
                format!("{} {} (retain {})", k.kind.name(), k.count, bytes(k.retained_bytes))
            } else {
                format!("{} (retain {})", k.kind.name(), bytes(k.retained_bytes))
            }
        })
        .collect();
    let _ = writeln!(out, "roots: {}", kinds.join(", "));
    if s.roots.unrooted_objects > 0 {
        let _ = writeln!(out, "  {} objects reachable from no reported root are under [unrooted]", s.roots.unrooted_objects);
    }
    if w.unresolved_references > 0 {
        let _ = writeln!(out, "  {} references point outside the walked heap (frozen objects; not counted)", w.unresolved_references);
    }
    let _ = writeln!(out, "\ntop types by retained bytes:");
    let by_retained: Vec<&TypeStats> = s.types.iter().take(top).collect();
    type_table(&mut out, &by_retained);
    let mut by_shallow: Vec<&TypeStats> = s.types.iter().collect();
    by_shallow.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.name.cmp(&b.name)));
    by_shallow.truncate(top);
    let _ = writeln!(out, "\ntop types by shallow bytes:");
    type_table(&mut out, &by_shallow);
    if !s.roots.statics.is_empty() {
        let _ = writeln!(out, "\nstatic fields by retained bytes:");
        for st in s.roots.statics.iter().take(top.min(10)) {
            let _ = writeln!(out, "  {:>11}  {} ({})", bytes(st.retained_bytes), st.field, st.type_name);
        }
    }
    out
}

/// The report of a diff.
pub fn diff(d: &HeapDiff, top: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "heap diff: objects {} → {} ({:+}), bytes {} → {} ({})",
        d.objects_before,
        d.objects_after,
        d.objects_after as i64 - d.objects_before as i64,
        bytes(d.bytes_before),
        bytes(d.bytes_after),
        signed_bytes(d.bytes_after as i64 - d.bytes_before as i64)
    );
    if d.grown.is_empty() {
        let _ = writeln!(out, "no type grew");
        return out;
    }
    let _ = writeln!(out, "\ntypes that grew (largest byte growth first):");
    let _ = writeln!(out, "  {:>10} {:>11} {:>10} {:>11}  type", "+count", "+bytes", "count", "retained");
    for t in d.grown.iter().take(top) {
        let _ = writeln!(
            out,
            "  {:>+10} {:>11} {:>10} {:>11}  {}",
            t.count_delta(),
            signed_bytes(t.bytes_delta()),
            t.count_after,
            bytes(t.retained_after),
            t.name
        );
        let _ = writeln!(out, "  {:>46}  path: {}", "", path(&t.root_path));
    }
    if d.grown.len() > top {
        let _ = writeln!(out, "  … {} more types grew", d.grown.len() - top);
    }
    out
}
