//! The pprof reader caps what it decodes, not only what it inflates: a small file that decodes
//! to gigabytes is refused with one line naming the file and the cap.

mod common;

use std::io::Write;

use clrprobe_profile::{ProfileError, pprof};
use flate2::{Compression, write::GzEncoder};

/// `n` empty samples (field 2, length 0), gzipped: a 48 KB file for 24 M samples.
fn empty_samples_gz(n: usize) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::best());
    let chunk = [0x12u8, 0x00].repeat(1 << 16);
    for _ in 0..n / (1 << 16) {
        gz.write_all(&chunk).unwrap();
    }
    gz.finish().unwrap()
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn field(tag: u64, body: &[u8], out: &mut Vec<u8>) {
    varint(tag << 3 | 2, out);
    varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

#[test]
fn a_file_of_empty_samples_is_refused_naming_the_file() {
    let bytes = empty_samples_gz(24 << 20);
    assert!(bytes.len() < 64 * 1024, "{} bytes", bytes.len());
    let dir = common::scratch("bounds");
    let path = dir.join("empty-samples.pb.gz");
    std::fs::write(&path, &bytes).unwrap();
    let err = pprof::read_file(&path).unwrap_err();
    assert!(matches!(err, ProfileError::NotPprof { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&*path.to_string_lossy()) && text.contains("256 MiB") && !text.contains('\n'), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One location with 4096 inlined lines, and samples naming it 4096 times: a few KB of
/// protobuf per sample that would expand to 16 M frames each.
fn inlined(samples: usize) -> Vec<u8> {
    let mut p = Vec::new();
    field(6, b"", &mut p);
    field(6, b"f", &mut p);
    let mut vt = Vec::new();
    varint(1 << 3, &mut vt);
    varint(1, &mut vt);
    field(1, &vt, &mut p); // sample type "f"/"" (indices 1, 0 are fine)
    let mut func = Vec::new();
    varint(1 << 3, &mut func);
    varint(1, &mut func);
    field(5, &func, &mut p);
    let mut loc = Vec::new();
    varint(1 << 3, &mut loc);
    varint(1, &mut loc);
    let mut line = Vec::new();
    varint(1 << 3, &mut line);
    varint(1, &mut line);
    for _ in 0..4096 {
        field(4, &line, &mut loc);
    }
    field(4, &loc, &mut p);
    let mut sample = Vec::new();
    let ids = vec![1u8; 4096];
    field(1, &ids, &mut sample);
    field(2, &[1], &mut sample);
    for _ in 0..samples {
        field(2, &sample, &mut p);
    }
    p
}

#[test]
fn stacks_expanding_through_inlined_lines_are_charged() {
    let p = inlined(200);
    assert!(p.len() < 1 << 20);
    let err = pprof::decode(&p).unwrap_err();
    assert!(matches!(err, ProfileError::PprofTooLarge { .. }), "{err:?}");
    assert!(err.to_string().contains("stacks"), "{err}");
    // A few such samples are fine.
    if let Err(e) = pprof::decode(&inlined(3)) {
        panic!("{e}");
    }
}
