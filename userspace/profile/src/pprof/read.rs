//! pprof protobuf (gzipped or not) → Profile.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use flate2::read::GzDecoder;
use prost::Message;

use super::proto;
use super::{KEY_PID, KEY_PROCESS, KEY_PROCESS_OLD, KEY_THREAD, KEY_THREAD_OLD, KEY_TID, KEY_TIMESTAMP, kinds};
use crate::builder::ProfileBuilder;
use crate::error::ProfileError;
use crate::hash::FastMap;
use crate::model::{Frame, FrameId, LabelSet, Mapping, Period, Profile, SampleType, Str};

/// Refuse to inflate past this: a real profile is far smaller, a gzip bomb is not.
const MAX_INFLATED: u64 = 1 << 30;

/// Read a `.pb.gz` (or uncompressed `.pb`) file.
pub fn read_file(path: impl AsRef<Path>) -> Result<Profile, ProfileError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| ProfileError::Read { path: path.to_path_buf(), source })?;
    decode(&bytes)
}

/// Decode pprof bytes; gzip is detected by its magic number.
pub fn decode(bytes: &[u8]) -> Result<Profile, ProfileError> {
    let inflated;
    let raw = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        GzDecoder::new(bytes)
            .take(MAX_INFLATED + 1)
            .read_to_end(&mut out)
            .map_err(|e| ProfileError::corrupt(format!("gzip: {e}")))?;
        if out.len() as u64 > MAX_INFLATED {
            return Err(ProfileError::corrupt(format!("inflates past {MAX_INFLATED} bytes")));
        }
        inflated = out;
        &inflated[..]
    } else {
        bytes
    };
    let msg = proto::Profile::decode(raw).map_err(|e| ProfileError::corrupt(format!("protobuf: {e}")))?;
    convert(&msg)
}

struct Strings<'a>(&'a [String]);

impl<'a> Strings<'a> {
    fn get(&self, i: i64, field: &str) -> Result<&'a str, ProfileError> {
        usize::try_from(i)
            .ok()
            .and_then(|i| self.0.get(i))
            .map(String::as_str)
            .ok_or_else(|| {
                ProfileError::corrupt(format!("{field} string index {i} outside table of {}", self.0.len()))
            })
    }
}

fn to_u32(v: i64, what: &str) -> Result<u32, ProfileError> {
    u32::try_from(v).map_err(|_| ProfileError::corrupt(format!("{what} label {v} is not a 32-bit id")))
}

fn convert(msg: &proto::Profile) -> Result<Profile, ProfileError> {
    if msg.string_table.first().map(String::as_str) != Some("") {
        return Err(ProfileError::corrupt("string table must start with the empty string"));
    }
    let s = Strings(&msg.string_table);
    let value_type = |v: &proto::ValueType| -> Result<SampleType, ProfileError> {
        Ok(SampleType::new(s.get(v.r#type, "sample type")?, s.get(v.unit, "sample unit")?))
    };
    let sample_types = msg.sample_type.iter().map(value_type).collect::<Result<Vec<_>, _>>()?;
    let width = sample_types.len();
    let mut b = ProfileBuilder::new(sample_types);
    if let Some(pt) = &msg.period_type {
        b.set_period(Period { sample_type: value_type(pt)?, value: msg.period });
    }
    b.set_start_time_ns(u64::try_from(msg.time_nanos).unwrap_or(0));
    b.set_duration_ns(u64::try_from(msg.duration_nanos).unwrap_or(0));

    for &c in &msg.comment {
        b.add_comment(s.get(c, "comment")?);
    }

    let mut mappings: FastMap<u64, (Option<Arc<Mapping>>, &str)> = FastMap::default();
    for m in &msg.mapping {
        let path = s.get(m.filename, "mapping filename")?;
        let build_id = s.get(m.build_id, "mapping build id")?;
        // Pseudo mappings (`[jit]`, ...) only carry the kind.
        let real = (m.memory_limit > m.memory_start).then(|| {
            Arc::new(Mapping {
                start: m.memory_start,
                limit: m.memory_limit,
                offset: m.file_offset,
                path: path.into(),
                build_id: build_id.into(),
            })
        });
        if mappings.insert(m.id, (real, path)).is_some() {
            return Err(ProfileError::corrupt(format!("duplicate mapping id {}", m.id)));
        }
    }
    let mut functions: FastMap<u64, (&str, &str)> = FastMap::default();
    for f in &msg.function {
        let entry = (s.get(f.name, "function name")?, s.get(f.filename, "function filename")?);
        if functions.insert(f.id, entry).is_some() {
            return Err(ProfileError::corrupt(format!("duplicate function id {}", f.id)));
        }
    }
    // Location id → its frames, root first (pprof lists inlined lines innermost first).
    let mut locations: FastMap<u64, Vec<FrameId>> = FastMap::default();
    for loc in &msg.location {
        let (mapping, mapping_path) = match loc.mapping_id {
            0 => (None, ""),
            id => {
                let (m, path) = mappings
                    .get(&id)
                    .ok_or_else(|| ProfileError::corrupt(format!("location {} names unknown mapping {id}", loc.id)))?;
                (m.clone(), *path)
            }
        };
        let mut frames = Vec::with_capacity(loc.line.len().max(1));
        if loc.line.is_empty() {
            let (name, mut module) =
                kinds::unnamed_name(mapping.as_deref().map(|m| (m.path.as_str(), m.start, m.offset)), loc.address);
            if module.is_empty() && !kinds::is_pseudo(mapping_path) {
                module = mapping_path.to_owned();
            }
            let mut f = Frame::new(name, module, kinds::infer(mapping_path, ""))
                .with_address(loc.address)
                .with_attr("unnamed", "1");
            f.mapping = mapping.clone();
            frames.push(b.intern_frame(f)?);
        }
        for line in loc.line.iter().rev() {
            let &(name, file) = functions.get(&line.function_id).ok_or_else(|| {
                ProfileError::corrupt(format!("location {} names unknown function {}", loc.id, line.function_id))
            })?;
            let kind = kinds::infer(mapping_path, file);
            // The pseudo name stands for "no module"; foreign files may name it by mapping only.
            let module = if kinds::is_pseudo(file) {
                ""
            } else if file.is_empty() && !kinds::is_pseudo(mapping_path) {
                mapping_path
            } else {
                file
            };
            let mut f = Frame::new(name, module, kind).with_address(loc.address);
            f.mapping = mapping.clone();
            frames.push(b.intern_frame(f)?);
        }
        if locations.insert(loc.id, frames).is_some() {
            return Err(ProfileError::corrupt(format!("duplicate location id {}", loc.id)));
        }
    }

    let mut stack = Vec::new();
    for (n, sample) in msg.sample.iter().enumerate() {
        if sample.value.len() != width {
            return Err(ProfileError::corrupt(format!(
                "sample {n} has {} values for {width} sample types",
                sample.value.len()
            )));
        }
        stack.clear();
        for id in sample.location_id.iter().rev() {
            let frames = locations
                .get(id)
                .ok_or_else(|| ProfileError::corrupt(format!("sample {n} names unknown location {id}")))?;
            stack.extend_from_slice(frames);
        }
        let stack_id = b.intern_stack(&stack)?;
        let mut labels = LabelSet::default();
        let mut timestamp = None;
        for l in &sample.label {
            let key = s.get(l.key, "label key")?;
            if l.str != 0 {
                let val = Str::from(s.get(l.str, "label value")?);
                match key {
                    KEY_PROCESS | KEY_PROCESS_OLD => labels.process_name = Some(val),
                    KEY_THREAD | KEY_THREAD_OLD => labels.thread_name = Some(val),
                    _ => labels.strings.push((key.into(), val)),
                }
            } else {
                match key {
                    KEY_PID => labels.pid = Some(to_u32(l.num, "pid")?),
                    KEY_TID => labels.tid = Some(to_u32(l.num, "tid")?),
                    KEY_TIMESTAMP => {
                        timestamp = Some(u64::try_from(l.num).map_err(|_| {
                            ProfileError::corrupt(format!("sample {n} has negative timestamp {}", l.num))
                        })?)
                    }
                    _ => labels.numbers.push((key.into(), l.num)),
                }
            }
        }
        let labels = b.intern_labels(labels)?;
        match timestamp {
            Some(t) => b.add_timed_sample(stack_id, &sample.value, labels, t)?,
            None => b.add_sample(stack_id, &sample.value, labels)?,
        }
    }
    Ok(b.build())
}
