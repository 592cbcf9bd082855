//! The runtime's jitdump file (`/tmp/jit-PID.dump`, written when perf maps are enabled): a
//! binary log of code loads. Besides JIT'd code it records ReadyToRun methods as they are first
//! used (names end in `[PreJIT]`), which perf maps never do.
//!
//! Sans-IO: [`parse_jitdump`] takes the bytes; a record cut short by a writer still at work
//! ends the list without an error.
use crate::FormatError;
use crate::reader::Bytes;

const MAGIC: u32 = 0x4A69_5444; // "JiTD"
/// Largest record accepted (a code load carries the method's code bytes).
pub const MAX_RECORD: u64 = 16 << 20;
/// Largest file header accepted (the runtime writes 40 bytes).
const MAX_HEADER: u64 = 4096;
/// Code-load records kept at most (about 100 bytes each).
pub const MAX_CODE_LOADS: usize = 1 << 20;
const JIT_CODE_LOAD: u32 = 0;

/// A JIT_CODE_LOAD record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeLoad {
    pub addr: u64,
    pub size: u64,
    pub tid: u32,
    /// Name as the runtime writes it (`... [Assembly] Type::Method(args)[Tier]`).
    pub name: String,
}

/// Parses a jitdump file; returns its code-load records and whether the bytes ended cleanly.
pub fn parse_jitdump(data: &[u8]) -> Result<(Vec<CodeLoad>, bool), FormatError> {
    let mut j = JitDump::new();
    j.feed(data)?;
    let clean = j.pending.is_empty();
    Ok((j.records, clean))
}

/// A jitdump read incrementally (the runtime appends while it runs), indexed by address.
#[derive(Debug, Default, Clone)]
pub struct JitDump {
    header_seen: bool,
    /// Bytes of a record (or header) not complete yet.
    pending: Vec<u8>,
    consumed: u64,
    records: Vec<CodeLoad>,
}

impl JitDump {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes fed so far (where the next read of the file starts).
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Code-load records, by address.
    pub fn records(&self) -> &[CodeLoad] {
        &self.records
    }

    /// Feeds appended bytes; returns the code-load records completed by them.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<usize, FormatError> {
        self.consumed += bytes.len() as u64;
        self.pending.extend_from_slice(bytes);
        let before = self.records.len();
        let data = std::mem::take(&mut self.pending);
        let b = Bytes::new(&data, "jitdump");
        let mut pos = 0u64;
        let len = data.len() as u64;
        if !self.header_seen {
            if len < 12 {
                self.pending = data;
                return Ok(0);
            }
            let magic = b.u32(0)?;
            if magic != MAGIC {
                return Err(FormatError::invalid("jitdump", format!("magic {magic:#x} is not JiTD (0x4a695444)")));
            }
            let header = b.u32(8)? as u64;
            if !(40..=MAX_HEADER).contains(&header) {
                return Err(FormatError::invalid("jitdump", format!("header size {header} is outside 40..={MAX_HEADER}")));
            }
            if len < header {
                self.pending = data;
                return Ok(0);
            }
            self.header_seen = true;
            pos = header;
        }
        // Records of this feed are indexed even when a later one is bad (lookups need the order).
        let records = &mut self.records;
        let parsed = (|| -> Result<(), FormatError> {
            while pos + 8 <= len {
                let id = b.u32(pos)?;
                let total = b.u32(pos + 4)? as u64;
                if !(16..=MAX_RECORD).contains(&total) {
                    return Err(FormatError::invalid("jitdump", format!("record claims {total} bytes (accepted: 16..={MAX_RECORD})")));
                }
                if pos + total > len {
                    break;
                }
                if id == JIT_CODE_LOAD {
                    if records.len() >= MAX_CODE_LOADS {
                        return Err(FormatError::invalid("jitdump", format!("more than {MAX_CODE_LOADS} code-load records")));
                    }
                    let rec = b.sub(pos, total, "jitdump code-load record")?;
                    let name = rec.cstr(56)?;
                    records.push(CodeLoad {
                        tid: rec.u32(20)?,
                        addr: rec.u64(32)?,
                        size: rec.u64(40)?,
                        name: String::from_utf8_lossy(name).into_owned(),
                    });
                }
                pos += total;
            }
            Ok(())
        })();
        if self.records.len() != before {
            // Index by address; the sort is stable, so later records of an address stay last.
            self.records.sort_by_key(|r| r.addr);
        }
        parsed?;
        self.pending = data[pos as usize..].to_vec();
        Ok(self.records.len() - before)
    }

    /// The latest record whose code holds `addr`.
    pub fn lookup(&self, addr: u64) -> Option<&CodeLoad> {
        let end = self.records.partition_point(|r| r.addr <= addr);
        self.records[..end].iter().rev().take(8).find(|r| addr - r.addr < r.size.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(addr: u64, size: u64, name: &str) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&7u32.to_le_bytes()); // pid
        body.extend_from_slice(&8u32.to_le_bytes()); // tid
        body.extend_from_slice(&addr.to_le_bytes()); // vma
        body.extend_from_slice(&addr.to_le_bytes()); // code_addr
        body.extend_from_slice(&size.to_le_bytes());
        body.extend_from_slice(&1u64.to_le_bytes()); // code index
        body.extend_from_slice(name.as_bytes());
        body.push(0);
        body.extend(std::iter::repeat_n(0xCC, size as usize));
        let mut r = Vec::new();
        r.extend_from_slice(&JIT_CODE_LOAD.to_le_bytes());
        r.extend_from_slice(&(16 + body.len() as u32).to_le_bytes());
        r.extend_from_slice(&0u64.to_le_bytes());
        r.extend(body);
        r
    }

    #[test]
    fn parses_records_and_tolerates_a_cut_tail() {
        let mut d = Vec::new();
        for v in [MAGIC, 1, 40, 62, 0, 7] {
            d.extend_from_slice(&v.to_le_bytes());
        }
        d.extend_from_slice(&[0; 16]);
        d.extend(record(0x1000, 4, "void [A] A::a()[PreJIT]"));
        d.extend(record(0x2000, 2, "B::b()"));
        let (recs, clean) = parse_jitdump(&d).expect("parses");
        assert!(clean);
        assert_eq!(recs.len(), 2);
        assert_eq!((recs[0].addr, recs[0].size, recs[0].name.as_str()), (0x1000, 4, "void [A] A::a()[PreJIT]"));
        let (recs, clean) = parse_jitdump(&d[..d.len() - 3]).expect("cut");
        assert!(!clean);
        assert_eq!(recs.len(), 1);
        assert!(parse_jitdump(b"JUNKJUNKJUNK").is_err());
        // Byte by byte gives the same records.
        let mut j = JitDump::new();
        for b in &d {
            j.feed(std::slice::from_ref(b)).expect("feeds");
        }
        assert_eq!(j.records(), &recs_full(&d)[..]);
        assert_eq!(j.lookup(0x1003).map(|r| r.name.as_str()), Some("void [A] A::a()[PreJIT]"));
        assert_eq!(j.lookup(0x1004), None);
        assert_eq!(j.lookup(0x2001).map(|r| r.name.as_str()), Some("B::b()"));
    }

    /// A feed whose last record is bad still leaves the records it added sorted (found by the
    /// jitdump fuzz target: lookups then underflowed on unsorted records).
    #[test]
    fn a_bad_record_leaves_the_index_sorted() {
        let mut d = Vec::new();
        for v in [MAGIC, 1, 40, 62, 0, 7] {
            d.extend_from_slice(&v.to_le_bytes());
        }
        d.extend_from_slice(&[0; 16]);
        d.extend(record(0x3000, 4, "C::c()"));
        let mut j = JitDump::new();
        assert_eq!(j.feed(&d).expect("first feed"), 1);
        let mut more = record(0x1000, 4, "A::a()");
        more.extend_from_slice(&0u32.to_le_bytes());
        more.extend_from_slice(&3u32.to_le_bytes()); // a record of 3 bytes: bad
        more.extend_from_slice(&[0; 8]);
        assert!(j.feed(&more).is_err());
        let addrs: Vec<u64> = j.records().iter().map(|r| r.addr).collect();
        assert_eq!(addrs, [0x1000, 0x3000]);
        assert_eq!(j.lookup(0x3001).map(|r| r.name.as_str()), Some("C::c()"));
        assert_eq!(j.lookup(0x1002).map(|r| r.name.as_str()), Some("A::a()"));
    }

    fn recs_full(d: &[u8]) -> Vec<CodeLoad> {
        parse_jitdump(d).expect("parses").0
    }
}
