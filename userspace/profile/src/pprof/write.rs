//! Profile → pprof protobuf (+ gzip).

use std::io::Write;
use std::path::Path;

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;

use super::proto;
use super::{KEY_PID, KEY_PROCESS, KEY_THREAD, KEY_TID, KEY_TIMESTAMP, kinds};
use crate::error::ProfileError;
use crate::hash::FastMap;
use crate::model::{Mapping, Profile};
use crate::output;

/// The pprof string table under construction; index 0 is always "".
struct Strings {
    table: Vec<String>,
    index: FastMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings { table: Vec::new(), index: FastMap::default() };
        s.id("");
        s
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum MappingKey<'a> {
    Real(&'a Mapping),
    Pseudo(&'static str),
}

/// Everything of the protobuf message but its samples, which [`write_body`] encodes one by one
/// (protobuf fields may come in any order): a written profile is never held twice in memory.
struct Head {
    msg: proto::Profile,
    /// Labels per label set, built once.
    label_sets: Vec<Vec<proto::Label>>,
    key_ts: i64,
    unit_ns: i64,
}

fn build(p: &Profile) -> Result<Head, ProfileError> {
    let mut s = Strings::new();
    let mut out = proto::Profile {
        sample_type: p
            .sample_types()
            .iter()
            .map(|t| proto::ValueType { r#type: s.id(&t.kind), unit: s.id(&t.unit) })
            .collect(),
        time_nanos: to_i64(p.start_time_ns()),
        duration_nanos: to_i64(p.duration_ns()),
        ..Default::default()
    };
    out.default_sample_type = out.sample_type.first().map_or(0, |t| t.r#type);
    if let Some(period) = p.period() {
        out.period_type = Some(proto::ValueType {
            r#type: s.id(&period.sample_type.kind),
            unit: s.id(&period.sample_type.unit),
        });
        out.period = period.value;
    }

    // Real mappings are shared by value; frames without one get a pseudo mapping named for
    // their kind (`[jit]`, `[kernel.kallsyms]`, ...) so that readers can tell the kind from
    // standard fields alone.
    let mut mappings: FastMap<MappingKey<'_>, u64> = FastMap::default();
    let mut functions: FastMap<(&str, &str), u64> = FastMap::default();
    for (i, f) in p.frames().iter().enumerate() {
        let loc_id = i as u64 + 1;
        let key = match &f.mapping {
            Some(m) => Some(MappingKey::Real(m)),
            None => kinds::pseudo_mapping(f.kind).map(MappingKey::Pseudo),
        };
        let mapping_id = match key {
            None => 0,
            Some(key) => {
                let next = mappings.len() as u64 + 1;
                *mappings.entry(key).or_insert_with(|| {
                    let (start, limit, offset, path, build_id) = match key {
                        MappingKey::Real(m) => (m.start, m.limit, m.offset, m.path.as_str(), m.build_id.as_str()),
                        MappingKey::Pseudo(name) => (0, 0, 0, name, ""),
                    };
                    out.mapping.push(proto::Mapping {
                        id: next,
                        memory_start: start,
                        memory_limit: limit,
                        file_offset: offset,
                        filename: s.id(path),
                        build_id: s.id(build_id),
                        // Symbolized already: pprof must not look for these files itself.
                        has_functions: true,
                        ..Default::default()
                    });
                    next
                })
            }
        };
        // A frame nothing named is a bare address, as pprof writes unsymbolized code.
        let line = if f.is_unnamed() {
            Vec::new()
        } else {
            let file = kinds::function_file(f);
            let next = functions.len() as u64 + 1;
            let function_id = *functions.entry((&f.name, file)).or_insert_with(|| {
                let name = s.id(&f.name);
                out.function.push(proto::Function {
                    id: next,
                    name,
                    system_name: name,
                    filename: s.id(file),
                    start_line: 0,
                });
                next
            });
            vec![proto::Line { function_id, line: 0, column: 0 }]
        };
        out.location.push(proto::Location { id: loc_id, mapping_id, address: f.address, line, is_folded: false });
    }

    let key_pid = s.id(KEY_PID);
    let key_tid = s.id(KEY_TID);
    let key_process = s.id(KEY_PROCESS);
    let key_thread = s.id(KEY_THREAD);
    let key_ts = s.id(KEY_TIMESTAMP);
    let unit_ns = s.id(crate::units::NANOSECONDS);
    let label_sets: Vec<Vec<proto::Label>> = p
        .label_sets()
        .iter()
        .map(|l| {
            let mut v = Vec::new();
            let num = |key, num| proto::Label { key, num, ..Default::default() };
            if let Some(pid) = l.pid {
                v.push(num(key_pid, i64::from(pid)));
            }
            if let Some(tid) = l.tid {
                v.push(num(key_tid, i64::from(tid)));
            }
            if let Some(name) = &l.process_name {
                v.push(proto::Label { key: key_process, str: s.id(name), ..Default::default() });
            }
            if let Some(name) = &l.thread_name {
                v.push(proto::Label { key: key_thread, str: s.id(name), ..Default::default() });
            }
            for (k, val) in &l.strings {
                v.push(proto::Label { key: s.id(k), str: s.id(val), ..Default::default() });
            }
            for (k, val) in &l.numbers {
                v.push(num(s.id(k), *val));
            }
            v
        })
        .collect();

    for c in p.comments() {
        out.comment.push(s.id(c));
    }
    out.string_table = s.table;
    Ok(Head { msg: out, label_sets, key_ts, unit_ns })
}

/// Writes the protobuf bytes: the head, then each sample as its own field-2 record.
fn write_body<W: Write>(p: &Profile, head: &Head, w: &mut W) -> std::io::Result<()> {
    w.write_all(&head.msg.encode_to_vec())?;
    let mut buf = Vec::new();
    for sample in p.samples() {
        let stack = p.stack(sample.stack).unwrap_or(&[]);
        let mut label = head.label_sets.get(sample.labels.index()).cloned().unwrap_or_default();
        if let Some(ts) = sample.timestamp_ns {
            label.push(proto::Label { key: head.key_ts, num: to_i64(ts), num_unit: head.unit_ns, str: 0 });
        }
        let sample = proto::Sample {
            location_id: stack.iter().rev().map(|f| f.index() as u64 + 1).collect(),
            value: sample.values.to_vec(),
            label,
        };
        buf.clear();
        prost::encoding::message::encode(2, &sample, &mut buf);
        w.write_all(&buf)?;
    }
    Ok(())
}

/// The uncompressed protobuf bytes of `p`.
pub fn encode(p: &Profile) -> Result<Vec<u8>, ProfileError> {
    let head = build(p)?;
    let mut out = Vec::new();
    write_body(p, &head, &mut out).map_err(|e| ProfileError::Encode(e.to_string()))?;
    Ok(out)
}

fn gzip_into<W: Write>(p: &Profile, head: &Head, w: W) -> std::io::Result<W> {
    // Fastest level, as Go's runtime/pprof does: profiles are written once, read rarely.
    let mut gz = GzEncoder::new(w, Compression::fast());
    write_body(p, head, &mut gz)?;
    gz.finish()
}

/// Write `p` as gzipped pprof to a stream.
pub fn to_writer<W: Write>(p: &Profile, w: W) -> Result<(), ProfileError> {
    let head = build(p)?;
    let w = gzip_into(p, &head, w).map_err(output::stream_err("pprof"))?;
    output::to_stream("pprof", w, |_| Ok(()))
}

/// Write `p` as gzipped pprof (`.pb.gz`) to `path`, streamed: the encoded samples are never
/// all in memory.
pub fn write_file(p: &Profile, path: impl AsRef<Path>) -> Result<(), ProfileError> {
    let head = build(p)?;
    output::write_file(path.as_ref(), |w| gzip_into(p, &head, w).map(|_| ()))
}
