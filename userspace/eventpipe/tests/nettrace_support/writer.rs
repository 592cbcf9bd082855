//! A NetTrace *writer* for tests, written from the format documents (V4/V5 FastSerialization
//! objects and V6 blocks). It writes exactly what the test asks, including layouts the .NET
//! runtime never produces (uncompressed headers, V6), so the reader can be checked against them.

/// A field type as the writer encodes it (V5 V1/V2 lists or V6 field descriptions).
#[derive(Debug, Clone)]
pub enum Ty {
    Prim(u8),
    Array(Box<Ty>),
    Object(Vec<(String, Ty)>),
    /// V6 only: VarInt (20), VarUInt (21), UTF8CodeUnit (23), Boolean8 (26).
    V6Only(u8),
    /// V6 only: FixedLengthArray.
    Fixed(Box<Ty>, u16),
}

#[derive(Debug, Clone)]
pub struct Meta {
    pub id: u32,
    pub provider: String,
    pub event_id: u32,
    pub name: String,
    pub keywords: u64,
    pub version: u32,
    pub level: u32,
    pub opcode: u8,
    /// `None`: no field list at all (runtime-native style).
    pub fields: Option<Vec<(String, Ty)>>,
}

impl Meta {
    pub fn new(id: u32, provider: &str, event_id: u32, name: &str) -> Self {
        Meta {
            id,
            provider: provider.into(),
            event_id,
            name: name.into(),
            keywords: 0,
            version: 0,
            level: 0,
            opcode: 0,
            fields: Some(Vec::new()),
        }
    }
}

/// One event row. Thread fields are OS ids (V4) or thread indexes (V6).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row {
    pub metadata_id: u32,
    pub seq: u32,
    pub thread: u64,
    pub capture_thread: u64,
    pub processor: u32,
    pub stack_id: u32,
    pub timestamp: u64,
    pub activity_id: [u8; 16],
    pub related_activity_id: [u8; 16],
    pub label_list: u32,
    pub sorted: bool,
    pub payload: Vec<u8>,
}

pub struct TraceParams {
    pub sync_time: [i16; 8],
    pub sync_qpc: i64,
    pub freq: i64,
    pub pointer_size: u32,
    pub pid: u32,
    pub processors: u32,
}

impl Default for TraceParams {
    fn default() -> Self {
        TraceParams {
            sync_time: [2025, 10, 4, 18, 12, 30, 5, 250],
            sync_qpc: 1_000_000,
            freq: 10_000_000,
            pointer_size: 8,
            pid: 4242,
            processors: 16,
        }
    }
}

pub struct Writer {
    v6: bool,
    pointer_size: u32,
    pub out: Vec<u8>,
}

fn utf16z(b: &mut Vec<u8>, s: &str) {
    for u in s.encode_utf16() {
        b.extend_from_slice(&u.to_le_bytes());
    }
    b.extend_from_slice(&[0, 0]);
}

pub fn varu(b: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            b.push(byte);
            return;
        }
        b.push(byte | 0x80);
    }
}

fn utf8(b: &mut Vec<u8>, s: &str) {
    varu(b, s.len() as u64);
    b.extend_from_slice(s.as_bytes());
}

fn with_u16_size(b: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let at = b.len();
    b.extend_from_slice(&[0, 0]);
    body(b);
    let n = u16::try_from(b.len() - at - 2).expect("row fits u16");
    b[at..at + 2].copy_from_slice(&n.to_le_bytes());
}

impl Writer {
    pub fn v4(p: &TraceParams) -> Self {
        let mut w = Writer { v6: false, pointer_size: p.pointer_size, out: Vec::new() };
        w.out.extend_from_slice(b"Nettrace");
        w.out.extend_from_slice(&20u32.to_le_bytes());
        w.out.extend_from_slice(b"!FastSerialization.1");
        w.out.push(5);
        w.type_header("Trace", 4, 4);
        let mut b = Vec::new();
        Self::trace_common(&mut b, p);
        b.extend_from_slice(&(p.pid as i32).to_le_bytes());
        b.extend_from_slice(&(p.processors as i32).to_le_bytes());
        b.extend_from_slice(&1_000_000i32.to_le_bytes());
        w.out.extend_from_slice(&b);
        w.out.push(6);
        w
    }

    pub fn v6(p: &TraceParams, extra: &[(&str, &str)]) -> Self {
        let mut w = Writer { v6: true, pointer_size: p.pointer_size, out: Vec::new() };
        w.out.extend_from_slice(b"Nettrace");
        for v in [0u32, 6, 0] {
            w.out.extend_from_slice(&v.to_le_bytes());
        }
        let mut b = Vec::new();
        Self::trace_common(&mut b, p);
        let pid = p.pid.to_string();
        let nproc = p.processors.to_string();
        let mut kv = vec![("ProcessId", pid.as_str()), ("HardwareThreadCount", nproc.as_str())];
        kv.extend_from_slice(extra);
        b.extend_from_slice(&(kv.len() as i32).to_le_bytes());
        for (k, v) in kv {
            utf8(&mut b, k);
            utf8(&mut b, v);
        }
        w.v6_block(1, &b);
        w
    }

    fn trace_common(b: &mut Vec<u8>, p: &TraceParams) {
        for f in p.sync_time {
            b.extend_from_slice(&f.to_le_bytes());
        }
        b.extend_from_slice(&p.sync_qpc.to_le_bytes());
        b.extend_from_slice(&p.freq.to_le_bytes());
        b.extend_from_slice(&(p.pointer_size as i32).to_le_bytes());
    }

    fn type_header(&mut self, name: &str, version: i32, min: i32) {
        self.out.extend_from_slice(&[5, 1]);
        self.out.extend_from_slice(&version.to_le_bytes());
        self.out.extend_from_slice(&min.to_le_bytes());
        self.out.extend_from_slice(&(name.len() as i32).to_le_bytes());
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(6);
    }

    /// V4: a block object (size, padding to a 4-byte stream offset, body, EndObject).
    pub fn v4_object(&mut self, name: &str, body: &[u8]) {
        self.out.push(5);
        self.type_header(name, 2, 2);
        self.out.extend_from_slice(&(body.len() as i32).to_le_bytes());
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
        self.out.extend_from_slice(body);
        self.out.push(6);
    }

    pub fn v6_block(&mut self, kind: u8, body: &[u8]) {
        assert!(body.len() < 1 << 24);
        let h = body.len() as u32 | (u32::from(kind) << 24);
        self.out.extend_from_slice(&h.to_le_bytes());
        self.out.extend_from_slice(body);
    }

    fn block(&mut self, v4_name: &str, v6_kind: u8, body: &[u8]) {
        if self.v6 {
            self.v6_block(v6_kind, body);
        } else {
            self.v4_object(v4_name, body);
        }
    }

    // ------------------------------------------------------------ metadata

    pub fn metadata(&mut self, metas: &[Meta], compressed: bool) {
        let body = if self.v6 { self.v6_metadata(metas) } else { self.v4_metadata(metas, compressed) };
        self.block("MetadataBlock", 3, &body);
    }

    fn v4_metadata(&self, metas: &[Meta], compressed: bool) -> Vec<u8> {
        let rows: Vec<Row> = metas
            .iter()
            .map(|m| Row { payload: v4_metadata_record(m), ..Row::default() })
            .collect();
        self.event_block_body(&rows, compressed)
    }

    fn v6_metadata(&self, metas: &[Meta]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&3u16.to_le_bytes());
        b.extend_from_slice(&[0xaa, 0xbb, 0xcc]); // header bytes a reader must skip
        for m in metas {
            with_u16_size(&mut b, |r| {
                varu(r, u64::from(m.id));
                utf8(r, &m.provider);
                varu(r, u64::from(m.event_id));
                utf8(r, &m.name);
                v6_fields(r, m.fields.as_deref().unwrap_or(&[]));
                with_u16_size(r, |o| {
                    o.extend_from_slice(&[1, m.opcode]);
                    o.push(3);
                    o.extend_from_slice(&m.keywords.to_le_bytes());
                    o.extend_from_slice(&[8, m.level as u8, 9, m.version as u8]);
                    o.push(4);
                    utf8(o, "message {0}");
                    o.push(6);
                    utf8(o, "key");
                    utf8(o, "value");
                    o.push(7);
                    o.extend_from_slice(&[0x11; 16]);
                });
                r.extend_from_slice(&[0xee, 0xff]); // trailing bytes a reader must skip
            });
        }
        b
    }

    // ------------------------------------------------------------ stacks, events

    pub fn stacks(&mut self, first_id: u32, stacks: &[Vec<u64>]) {
        let mut b = Vec::new();
        b.extend_from_slice(&first_id.to_le_bytes());
        b.extend_from_slice(&(stacks.len() as u32).to_le_bytes());
        let ps = self.pointer_size as usize;
        for s in stacks {
            b.extend_from_slice(&((s.len() * ps) as u32).to_le_bytes());
            for ip in s {
                b.extend_from_slice(&ip.to_le_bytes()[..ps]);
            }
        }
        self.block("StackBlock", 5, &b);
    }

    pub fn events(&mut self, rows: &[Row], compressed: bool) {
        let body = self.event_block_body(rows, compressed);
        self.block("EventBlock", 2, &body);
    }

    fn event_block_body(&self, rows: &[Row], compressed: bool) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&24u16.to_le_bytes()); // header size: 20 + 4 reserved bytes
        b.extend_from_slice(&(compressed as u16).to_le_bytes());
        let min = rows.iter().map(|r| r.timestamp).min().unwrap_or(0);
        let max = rows.iter().map(|r| r.timestamp).max().unwrap_or(0);
        b.extend_from_slice(&min.to_le_bytes());
        b.extend_from_slice(&max.to_le_bytes());
        b.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let mut prev = Row::default();
        for r in rows {
            if compressed {
                self.compressed_row(&mut b, r, &prev);
                prev = r.clone();
            } else if self.v6 {
                let size = 48 + r.payload.len();
                b.extend_from_slice(&(size as u32).to_le_bytes());
                b.extend_from_slice(&(r.metadata_id | if r.sorted { 0x8000_0000 } else { 0 }).to_le_bytes());
                b.extend_from_slice(&r.seq.to_le_bytes());
                b.extend_from_slice(&r.thread.to_le_bytes());
                b.extend_from_slice(&r.capture_thread.to_le_bytes());
                b.extend_from_slice(&r.processor.to_le_bytes());
                b.extend_from_slice(&r.stack_id.to_le_bytes());
                b.extend_from_slice(&r.timestamp.to_le_bytes());
                b.extend_from_slice(&r.label_list.to_le_bytes());
                b.extend_from_slice(&(r.payload.len() as u32).to_le_bytes());
                b.extend_from_slice(&r.payload);
            } else {
                let size = 4 * 4 + 8 * 3 + 4 + 32 + 4 + r.payload.len();
                b.extend_from_slice(&(size as u32).to_le_bytes());
                b.extend_from_slice(&r.metadata_id.to_le_bytes());
                b.extend_from_slice(&r.seq.to_le_bytes());
                b.extend_from_slice(&r.thread.to_le_bytes());
                b.extend_from_slice(&r.capture_thread.to_le_bytes());
                b.extend_from_slice(&r.processor.to_le_bytes());
                b.extend_from_slice(&r.stack_id.to_le_bytes());
                b.extend_from_slice(&r.timestamp.to_le_bytes());
                b.extend_from_slice(&r.activity_id);
                b.extend_from_slice(&r.related_activity_id);
                b.extend_from_slice(&(r.payload.len() as u32).to_le_bytes());
                b.extend_from_slice(&r.payload);
                while !b.len().is_multiple_of(4) {
                    b.push(0);
                }
            }
        }
        b
    }

    fn compressed_row(&self, b: &mut Vec<u8>, r: &Row, p: &Row) {
        let mut flags = 0u8;
        let mut h = Vec::new();
        if r.metadata_id != p.metadata_id {
            flags |= 1;
            varu(&mut h, u64::from(r.metadata_id));
        }
        let implied_seq = if self.v6 || r.metadata_id != 0 { p.seq.wrapping_add(1) } else { p.seq };
        if r.seq != implied_seq || r.capture_thread != p.capture_thread || r.processor != p.processor {
            flags |= 2;
            varu(&mut h, u64::from(r.seq.wrapping_sub(p.seq).wrapping_sub(1)));
            varu(&mut h, r.capture_thread);
            varu(&mut h, u64::from(r.processor));
        }
        if r.thread != p.thread {
            flags |= 4;
            varu(&mut h, r.thread);
        }
        if r.stack_id != p.stack_id {
            flags |= 8;
            varu(&mut h, u64::from(r.stack_id));
        }
        varu(&mut h, r.timestamp.wrapping_sub(p.timestamp));
        if self.v6 {
            if r.label_list != p.label_list {
                flags |= 0x10;
                varu(&mut h, u64::from(r.label_list));
            }
        } else {
            if r.activity_id != p.activity_id {
                flags |= 0x10;
                h.extend_from_slice(&r.activity_id);
            }
            if r.related_activity_id != p.related_activity_id {
                flags |= 0x20;
                h.extend_from_slice(&r.related_activity_id);
            }
        }
        if r.sorted {
            flags |= 0x40;
        }
        if r.payload.len() != p.payload.len() {
            flags |= 0x80;
            varu(&mut h, r.payload.len() as u64);
        }
        b.push(flags);
        b.extend_from_slice(&h);
        b.extend_from_slice(&r.payload);
    }

    // ------------------------------------------------------------ sequence points, V6 tables

    pub fn sequence_point(&mut self, timestamp: u64, threads: &[(u64, u32)], v6_flags: u32) {
        let mut b = Vec::new();
        b.extend_from_slice(&timestamp.to_le_bytes());
        if self.v6 {
            b.extend_from_slice(&v6_flags.to_le_bytes());
            b.extend_from_slice(&(threads.len() as u32).to_le_bytes());
            for &(t, s) in threads {
                varu(&mut b, t);
                varu(&mut b, u64::from(s));
            }
        } else {
            b.extend_from_slice(&(threads.len() as u32).to_le_bytes());
            for &(t, s) in threads {
                b.extend_from_slice(&t.to_le_bytes());
                b.extend_from_slice(&s.to_le_bytes());
            }
        }
        self.block("SPBlock", 4, &b);
    }

    /// V6 Thread block: (index, OS thread id, OS process id, name).
    pub fn threads(&mut self, threads: &[(u64, Option<u64>, Option<u64>, &str)]) {
        let mut b = Vec::new();
        for &(index, tid, pid, name) in threads {
            with_u16_size(&mut b, |r| {
                varu(r, index);
                if !name.is_empty() {
                    r.push(1);
                    utf8(r, name);
                }
                if let Some(pid) = pid {
                    r.push(2);
                    varu(r, pid);
                }
                if let Some(tid) = tid {
                    r.push(3);
                    varu(r, tid);
                }
                r.push(4);
                utf8(r, "k");
                utf8(r, "v");
            });
        }
        self.v6_block(6, &b);
    }

    pub fn remove_threads(&mut self, threads: &[(u64, u32)]) {
        let mut b = Vec::new();
        for &(t, s) in threads {
            varu(&mut b, t);
            varu(&mut b, u64::from(s));
        }
        self.v6_block(7, &b);
    }

    /// V6 LabelList block: per list (activity id, related activity id); other label kinds are
    /// added so the reader has to skip them.
    pub fn label_lists(&mut self, first: u32, lists: &[([u8; 16], [u8; 16])]) {
        let mut b = Vec::new();
        b.extend_from_slice(&first.to_le_bytes());
        b.extend_from_slice(&(lists.len() as u32).to_le_bytes());
        for (act, rel) in lists {
            b.push(3);
            b.extend_from_slice(&[7; 16]);
            b.push(4);
            b.extend_from_slice(&9u64.to_le_bytes());
            b.push(5);
            utf8(&mut b, "key");
            utf8(&mut b, "value");
            b.push(6);
            utf8(&mut b, "n");
            varu(&mut b, 5); // zig-zag -3
            b.extend_from_slice(&[7, 1, 8]);
            b.extend_from_slice(&u64::MAX.to_le_bytes());
            b.extend_from_slice(&[9, 4, 10, 2]);
            b.push(1);
            b.extend_from_slice(act);
            b.push(0x80 | 2);
            b.extend_from_slice(rel);
        }
        self.v6_block(8, &b);
    }

    /// Ends the stream (V4 NullReference tag, V6 EndOfStream block).
    pub fn finish(mut self) -> Vec<u8> {
        if self.v6 {
            self.v6_block(0, &[]);
        } else {
            self.out.push(1);
        }
        self.out
    }
}

fn uses_arrays(fields: &[(String, Ty)]) -> bool {
    fields.iter().any(|(_, t)| match t {
        Ty::Array(_) => true,
        Ty::Object(f) => uses_arrays(f),
        _ => false,
    })
}

fn v4_metadata_record(m: &Meta) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&m.id.to_le_bytes());
    utf16z(&mut b, &m.provider);
    b.extend_from_slice(&m.event_id.to_le_bytes());
    utf16z(&mut b, &m.name);
    b.extend_from_slice(&m.keywords.to_le_bytes());
    b.extend_from_slice(&m.version.to_le_bytes());
    b.extend_from_slice(&m.level.to_le_bytes());
    let Some(fields) = &m.fields else {
        return b;
    };
    let v2 = uses_arrays(fields);
    if v2 {
        b.extend_from_slice(&0i32.to_le_bytes());
    } else {
        v1_fields(&mut b, fields);
    }
    if m.opcode != 0 {
        b.extend_from_slice(&1i32.to_le_bytes());
        b.push(1);
        b.push(m.opcode);
    }
    if v2 {
        let mut t = Vec::new();
        v2_fields(&mut t, fields);
        b.extend_from_slice(&(t.len() as i32).to_le_bytes());
        b.push(2);
        b.extend_from_slice(&t);
    }
    b
}

fn v1_fields(b: &mut Vec<u8>, fields: &[(String, Ty)]) {
    b.extend_from_slice(&(fields.len() as i32).to_le_bytes());
    for (name, ty) in fields {
        match ty {
            Ty::Prim(c) => b.extend_from_slice(&u32::from(*c).to_le_bytes()),
            Ty::Object(f) => {
                b.extend_from_slice(&1u32.to_le_bytes());
                v1_fields(b, f);
            }
            other => panic!("{other:?} not expressible in a V1 field list"),
        }
        utf16z(b, name);
    }
}

fn v2_fields(b: &mut Vec<u8>, fields: &[(String, Ty)]) {
    b.extend_from_slice(&(fields.len() as i32).to_le_bytes());
    for (name, ty) in fields {
        let mut f = Vec::new();
        utf16z(&mut f, name);
        v2_type(&mut f, ty);
        b.extend_from_slice(&((f.len() + 4) as i32).to_le_bytes());
        b.extend_from_slice(&f);
    }
}

fn v2_type(b: &mut Vec<u8>, ty: &Ty) {
    match ty {
        Ty::Prim(c) => b.extend_from_slice(&u32::from(*c).to_le_bytes()),
        Ty::Array(e) => {
            b.extend_from_slice(&19u32.to_le_bytes());
            v2_type(b, e);
        }
        Ty::Object(f) => {
            b.extend_from_slice(&1u32.to_le_bytes());
            v2_fields(b, f);
        }
        other => panic!("{other:?} not expressible in V5 metadata"),
    }
}

fn v6_fields(b: &mut Vec<u8>, fields: &[(String, Ty)]) {
    b.extend_from_slice(&(fields.len() as u16).to_le_bytes());
    for (name, ty) in fields {
        with_u16_size(b, |f| {
            utf8(f, name);
            v6_type(f, ty);
        });
    }
}

fn v6_type(b: &mut Vec<u8>, ty: &Ty) {
    match ty {
        Ty::Prim(c) | Ty::V6Only(c) => b.push(*c),
        Ty::Array(e) => {
            b.push(19);
            v6_type(b, e);
        }
        Ty::Fixed(e, n) => {
            b.push(22);
            v6_type(b, e);
            b.extend_from_slice(&n.to_le_bytes());
        }
        Ty::Object(f) => {
            b.push(1);
            v6_fields(b, f);
        }
    }
}
