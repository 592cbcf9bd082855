//! pprof protobuf (gzipped or not) → Profile.

use std::io::{BufRead, Read};
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

/// Protobuf bytes read at most (streamed: never held whole).
pub const MAX_INFLATED: u64 = 1 << 30;
/// What decoding may build at most, in bytes: the decoded messages plus the frames stacks
/// expand to (a gzip bomb or a file of empty samples inflates to little but decodes to much).
pub const MAX_DECODED: u64 = 256 << 20;
/// Largest single top-level field (one sample, location, string, ...).
const MAX_FIELD: u64 = 64 << 20;

/// Read a `.pb.gz` (or uncompressed `.pb`) file. Errors name the file.
pub fn read_file(path: impl AsRef<Path>) -> Result<Profile, ProfileError> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|source| ProfileError::Read { path: path.to_path_buf(), source })?;
    read(file).map_err(|e| match e {
        ProfileError::CorruptPprof(detail) => ProfileError::NotPprof { path: path.to_path_buf(), detail },
        ProfileError::PprofTooLarge { detail } => ProfileError::NotPprof { path: path.to_path_buf(), detail },
        other => other,
    })
}

/// Decode pprof bytes; gzip is detected by its magic number.
pub fn decode(bytes: &[u8]) -> Result<Profile, ProfileError> {
    read(bytes)
}

/// Decode a pprof stream (gzipped or not) within [`MAX_INFLATED`] and [`MAX_DECODED`].
pub fn read(r: impl Read) -> Result<Profile, ProfileError> {
    let mut r = std::io::BufReader::with_capacity(64 * 1024, r);
    let gz = r.fill_buf().map_err(|e| ProfileError::corrupt(format!("reading: {e}")))?.starts_with(&[0x1f, 0x8b]);
    let mut budget = Budget { used: 0 };
    let msg = if gz {
        decode_stream(&mut std::io::BufReader::with_capacity(64 * 1024, GzDecoder::new(r)).take(MAX_INFLATED + 1), &mut budget, "gzip")?
    } else {
        decode_stream(&mut r.take(MAX_INFLATED + 1), &mut budget, "reading")?
    };
    convert(&msg, &mut budget)
}

/// The running estimate of decoded bytes, refused past [`MAX_DECODED`].
struct Budget {
    used: u64,
}

impl Budget {
    fn charge(&mut self, bytes: usize, what: &str) -> Result<(), ProfileError> {
        self.used = self.used.saturating_add(bytes as u64);
        if self.used > MAX_DECODED {
            return Err(ProfileError::PprofTooLarge {
                detail: format!("decoding {what} passes the cap of {} MiB; refused", MAX_DECODED >> 20),
            });
        }
        Ok(())
    }
}

/// Reads a varint; Ok(None) at the end of the stream before its first byte.
fn varint(r: &mut impl Read, io_what: &str) -> Result<Option<u64>, ProfileError> {
    let mut v = 0u64;
    for i in 0..10 {
        let mut b = [0u8];
        match r.read(&mut b) {
            Ok(0) if i == 0 => return Ok(None),
            Ok(0) => return Err(ProfileError::corrupt("protobuf: truncated varint")),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ProfileError::corrupt(format!("{io_what}: {e}"))),
        }
        v |= u64::from(b[0] & 0x7f) << (7 * i);
        if b[0] & 0x80 == 0 {
            return Ok(Some(v));
        }
    }
    Err(ProfileError::corrupt("protobuf: varint longer than 10 bytes"))
}

fn exact(r: &mut impl Read, buf: &mut Vec<u8>, len: u64, io_what: &str) -> Result<(), ProfileError> {
    buf.clear();
    let got = r.take(len).read_to_end(buf).map_err(|e| ProfileError::corrupt(format!("{io_what}: {e}")))?;
    if (got as u64) < len {
        return Err(ProfileError::corrupt(format!("protobuf: field of {len} bytes truncated at {got}")));
    }
    Ok(())
}

/// Decodes the top-level `Profile` message one field at a time, charging each decoded item.
fn decode_stream(r: &mut std::io::Take<impl Read>, budget: &mut Budget, io_what: &str) -> Result<proto::Profile, ProfileError> {
    use std::mem::size_of;
    let mut msg = proto::Profile::default();
    let mut buf = Vec::new();
    let dec = |e: prost::DecodeError| ProfileError::corrupt(format!("protobuf: {e}"));
    while let Some(key) = varint(r, io_what)? {
        if r.limit() == 0 {
            return Err(ProfileError::PprofTooLarge { detail: format!("inflates past {MAX_INFLATED} bytes; refused") });
        }
        let (tag, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                let v = varint(r, io_what)?.ok_or_else(|| ProfileError::corrupt("protobuf: truncated field"))? as i64;
                match tag {
                    7 => msg.drop_frames = v,
                    8 => msg.keep_frames = v,
                    9 => msg.time_nanos = v,
                    10 => msg.duration_nanos = v,
                    12 => msg.period = v,
                    13 => {
                        budget.charge(8, "comments")?;
                        msg.comment.push(v);
                    }
                    14 => msg.default_sample_type = v,
                    _ => {}
                }
            }
            1 => exact(r, &mut buf, 8, io_what)?,
            5 => exact(r, &mut buf, 4, io_what)?,
            2 => {
                let len = varint(r, io_what)?.ok_or_else(|| ProfileError::corrupt("protobuf: truncated length"))?;
                if len > MAX_FIELD {
                    return Err(ProfileError::PprofTooLarge { detail: format!("a field of {len} bytes (cap {MAX_FIELD}); refused") });
                }
                exact(r, &mut buf, len, io_what)?;
                let b = &buf[..];
                match tag {
                    1 => {
                        budget.charge(size_of::<proto::ValueType>(), "sample types")?;
                        msg.sample_type.push(proto::ValueType::decode(b).map_err(dec)?);
                    }
                    2 => {
                        let s = proto::Sample::decode(b).map_err(dec)?;
                        let n = size_of::<proto::Sample>() + 8 * (s.location_id.len() + s.value.len()) + size_of::<proto::Label>() * s.label.len();
                        budget.charge(n, "samples")?;
                        msg.sample.push(s);
                    }
                    3 => {
                        budget.charge(size_of::<proto::Mapping>(), "mappings")?;
                        msg.mapping.push(proto::Mapping::decode(b).map_err(dec)?);
                    }
                    4 => {
                        let l = proto::Location::decode(b).map_err(dec)?;
                        budget.charge(size_of::<proto::Location>() + size_of::<proto::Line>() * l.line.len(), "locations")?;
                        msg.location.push(l);
                    }
                    5 => {
                        budget.charge(size_of::<proto::Function>(), "functions")?;
                        msg.function.push(proto::Function::decode(b).map_err(dec)?);
                    }
                    6 => {
                        budget.charge(size_of::<String>() + b.len(), "strings")?;
                        let s = std::str::from_utf8(b).map_err(|e| ProfileError::corrupt(format!("protobuf: string: {e}")))?;
                        msg.string_table.push(s.to_string());
                    }
                    11 => msg.period_type = Some(proto::ValueType::decode(b).map_err(dec)?),
                    13 => {
                        // Packed comments.
                        let mut c = b;
                        while !c.is_empty() {
                            budget.charge(8, "comments")?;
                            msg.comment.push(prost::encoding::decode_varint(&mut c).map_err(dec)? as i64);
                        }
                    }
                    _ => {}
                }
            }
            w => return Err(ProfileError::corrupt(format!("protobuf: wire type {w} of field {tag}"))),
        }
    }
    if r.limit() == 0 {
        return Err(ProfileError::PprofTooLarge { detail: format!("inflates past {MAX_INFLATED} bytes; refused") });
    }
    Ok(msg)
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

fn convert(msg: &proto::Profile, budget: &mut Budget) -> Result<Profile, ProfileError> {
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
        budget.charge(frames.len() * std::mem::size_of::<FrameId>() + 48, "locations")?;
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
        // A location may expand to many frames: what the stacks cost is charged too.
        budget.charge(stack.len() * std::mem::size_of::<FrameId>() + 64, "stacks")?;
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
