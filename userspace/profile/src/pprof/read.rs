//! pprof protobuf (gzipped or not) → Profile.

use std::io::Read;
use std::path::Path;

use flate2::read::GzDecoder;
use prost::Message;

use super::proto;
use super::{COMMENT_FRAMES, COMMENT_MARKERS, FrameExtra, KEY_PID, KEY_PROCESS, KEY_THREAD, KEY_TID, KEY_TIMESTAMP, MarkerJson};
use crate::builder::ProfileBuilder;
use crate::error::ProfileError;
use crate::hash::FastMap;
use crate::model::{Frame, FrameId, FrameKind, LabelSet, Marker, Period, Profile, SampleType, Str};

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

    let mut extras: FastMap<u64, (FrameKind, Vec<(Str, Str)>)> = FastMap::default();
    for &c in &msg.comment {
        let text = s.get(c, "comment")?;
        if let Some(json) = text.strip_prefix(COMMENT_FRAMES) {
            let list: Vec<FrameExtra> = serde_json::from_str(json)
                .map_err(|e| ProfileError::corrupt(format!("clrprobe:frames comment: {e}")))?;
            for e in list {
                let kind = FrameKind::parse(&e.kind)
                    .ok_or_else(|| ProfileError::corrupt(format!("unknown frame kind {:?}", e.kind)))?;
                extras.insert(e.loc, (kind, e.attrs.into_iter().map(|(k, v)| (k.into(), v.into())).collect()));
            }
        } else if let Some(json) = text.strip_prefix(COMMENT_MARKERS) {
            let list: Vec<MarkerJson> = serde_json::from_str(json)
                .map_err(|e| ProfileError::corrupt(format!("clrprobe:markers comment: {e}")))?;
            for m in list {
                b.add_marker(Marker {
                    name: m.name,
                    start_ns: m.start_ns,
                    end_ns: m.end_ns,
                    pid: m.pid,
                    tid: m.tid,
                    data: m.data,
                });
            }
        } else {
            b.add_comment(text);
        }
    }

    let mut mappings: FastMap<u64, &str> = FastMap::default();
    for m in &msg.mapping {
        if mappings.insert(m.id, s.get(m.filename, "mapping filename")?).is_some() {
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
        let module = match loc.mapping_id {
            0 => None,
            id => Some(
                *mappings
                    .get(&id)
                    .ok_or_else(|| ProfileError::corrupt(format!("location {} names unknown mapping {id}", loc.id)))?,
            ),
        };
        let (kind, attrs) = extras.remove(&loc.id).unwrap_or((FrameKind::Unknown, Vec::new()));
        let mut frames = Vec::with_capacity(loc.line.len().max(1));
        let make = |name: &str, file: &str| Frame {
            name: name.into(),
            module: module.unwrap_or(file).into(),
            kind,
            address: loc.address,
            attrs: attrs.clone(),
        };
        if loc.line.is_empty() {
            frames.push(b.intern_frame(make(&format!("0x{:x}", loc.address), ""))?);
        }
        for line in loc.line.iter().rev() {
            let &(name, file) = functions.get(&line.function_id).ok_or_else(|| {
                ProfileError::corrupt(format!("location {} names unknown function {}", loc.id, line.function_id))
            })?;
            frames.push(b.intern_frame(make(name, file))?);
        }
        if locations.insert(loc.id, frames).is_some() {
            return Err(ProfileError::corrupt(format!("duplicate location id {}", loc.id)));
        }
    }
    if let Some(loc) = extras.keys().next() {
        return Err(ProfileError::corrupt(format!("clrprobe:frames names unknown location {loc}")));
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
                    KEY_PROCESS => labels.process_name = Some(val),
                    KEY_THREAD => labels.thread_name = Some(val),
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
