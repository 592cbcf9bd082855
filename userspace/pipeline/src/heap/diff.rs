//! What grew between two snapshots: the leak view.
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::analysis::HeapSummary;

/// One type's change from snapshot A to B.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TypeDelta {
    pub name: String,
    pub count_before: u64,
    pub count_after: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub retained_before: u64,
    pub retained_after: u64,
    /// B's shortest path from a root to the type.
    pub root_path: Vec<String>,
}

impl TypeDelta {
    pub fn count_delta(&self) -> i64 {
        self.count_after as i64 - self.count_before as i64
    }
    pub fn bytes_delta(&self) -> i64 {
        self.bytes_after as i64 - self.bytes_before as i64
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeapDiff {
    pub objects_before: u64,
    pub objects_after: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Types whose count or bytes grew, largest byte growth first.
    pub grown: Vec<TypeDelta>,
    /// Types whose count or bytes shrank, largest byte shrink first.
    pub shrunk: Vec<TypeDelta>,
}

/// Compares snapshot `a` (before) with `b` (after), type by type (by name).
pub fn diff(a: &HeapSummary, b: &HeapSummary) -> HeapDiff {
    let before: HashMap<&str, &super::analysis::TypeStats> = a.types.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut grown = Vec::new();
    let mut shrunk = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for t in &b.types {
        seen.insert(t.name.as_str());
        let (c, by, r) = before.get(t.name.as_str()).map(|o| (o.count, o.bytes, o.retained_bytes)).unwrap_or_default();
        let d = TypeDelta {
            name: t.name.clone(),
            count_before: c,
            count_after: t.count,
            bytes_before: by,
            bytes_after: t.bytes,
            retained_before: r,
            retained_after: t.retained_bytes,
            root_path: t.root_path.clone(),
        };
        if t.count > c || t.bytes > by {
            grown.push(d);
        } else if t.count < c || t.bytes < by {
            shrunk.push(d);
        }
    }
    for t in a.types.iter().filter(|t| !seen.contains(t.name.as_str())) {
        shrunk.push(TypeDelta {
            name: t.name.clone(),
            count_before: t.count,
            count_after: 0,
            bytes_before: t.bytes,
            bytes_after: 0,
            retained_before: t.retained_bytes,
            retained_after: 0,
            root_path: t.root_path.clone(),
        });
    }
    grown.sort_by(|x, y| y.bytes_delta().cmp(&x.bytes_delta()).then(y.count_delta().cmp(&x.count_delta())).then(x.name.cmp(&y.name)));
    shrunk.sort_by(|x, y| x.bytes_delta().cmp(&y.bytes_delta()).then(x.name.cmp(&y.name)));
    HeapDiff { objects_before: a.objects, objects_after: b.objects, bytes_before: a.bytes, bytes_after: b.bytes, grown, shrunk }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::analysis::TypeStats;

    fn t(name: &str, count: u64, bytes: u64) -> TypeStats {
        TypeStats { name: name.into(), count, bytes, retained_bytes: bytes, root_path: vec!["[stack]".into(), name.into()] }
    }

    #[test]
    fn grown_new_and_gone_types() {
        let a = HeapSummary { types: vec![t("Node", 10, 320), t("Gone", 1, 24), t("Same", 2, 48)], ..Default::default() };
        let b = HeapSummary { types: vec![t("Node", 15, 480), t("New", 3, 72), t("Same", 2, 48)], ..Default::default() };
        let d = diff(&a, &b);
        let names: Vec<&str> = d.grown.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["Node", "New"]);
        assert_eq!((d.grown[0].count_delta(), d.grown[0].bytes_delta()), (5, 160));
        assert_eq!(d.grown[1].count_before, 0);
        assert_eq!(d.shrunk.len(), 1);
        assert_eq!(d.shrunk[0].name, "Gone");
    }
}
