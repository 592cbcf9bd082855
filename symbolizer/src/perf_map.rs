//! The runtime's perf map (`/tmp/perf-PID.map`): `START SIZE name` records, hex numbers with or
//! without `0x`, names that may hold spaces and a trailing `[Tier]`.
//!
//! Sans-IO: [`PerfMap::feed`] takes appended bytes and keeps an unterminated last record until
//! the rest arrives (or [`PerfMap::finish`]). Records may end with `\n` or with a NUL byte.

/// Tier suffixes CoreCLR appends to perf-map names (`...::Method()[OptimizedTier1]`).
const TIERS: &[&str] = &[
    "OptimizedTier1",
    "OptimizedTier1OSR",
    "Optimized",
    "Tier0",
    "Tier1",
    "Tier-0",
    "Tier-1",
    "TierUnknown",
    "PreJIT",
    "QuickJitted",
    "OSR",
    "MinOptJitted",
    "Instrumented",
    "InstrumentedTier",
    "InstrumentedTier1",
    "Interpreted",
    "ReJIT",
    "Unknown",
];

/// One perf-map record, as handed out by [`PerfMap::lookup`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerfMapSymbol<'a> {
    pub start: u64,
    pub size: u64,
    pub name: &'a str,
    pub tier: Option<&'static str>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    start: u64,
    size: u64,
    name_off: u32,
    name_len: u32,
    /// Index into TIERS + 1; 0 = none.
    tier: u8,
}

/// A parsed, indexed perf map that grows as the file grows.
#[derive(Debug, Default, Clone)]
pub struct PerfMap {
    entries: Vec<Entry>,
    names: String,
    /// Bytes of an unterminated last record.
    pending: Vec<u8>,
    /// Bytes consumed from the file so far (terminated records + pending).
    consumed: u64,
    /// Entries [0, sorted_len) are sorted by start (stable: later records after earlier ones).
    sorted_len: usize,
    skipped: usize,
}

impl PerfMap {
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses a whole map at once (an unterminated last record counts).
    pub fn parse(bytes: &[u8]) -> Self {
        let mut m = Self::new();
        m.feed(bytes);
        m.finish();
        m
    }

    /// Number of records parsed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Records that could not be parsed (bad hex, missing fields) and were dropped.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// Byte offset in the file up to which data has been fed (where the next read starts).
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Feeds bytes appended to the file since the last call. Returns records added.
    pub fn feed(&mut self, bytes: &[u8]) -> usize {
        let before = self.entries.len();
        self.consumed += bytes.len() as u64;
        let mut rest = bytes;
        if !self.pending.is_empty() {
            match memchr::memchr2(b'\n', 0, rest) {
                Some(i) => {
                    let mut line = std::mem::take(&mut self.pending);
                    line.extend_from_slice(&rest[..i]);
                    self.parse_record(&line);
                    rest = &rest[i + 1..];
                }
                None => {
                    self.pending.extend_from_slice(rest);
                    return 0;
                }
            }
        }
        let mut start = 0;
        for i in memchr::memchr2_iter(b'\n', 0, rest) {
            self.parse_record(&rest[start..i]);
            start = i + 1;
        }
        self.pending.extend_from_slice(&rest[start..]);
        self.entries.len() - before
    }

    /// Parses an unterminated last record (call when the writer is known to be done).
    pub fn finish(&mut self) -> usize {
        if self.pending.is_empty() {
            return 0;
        }
        let line = std::mem::take(&mut self.pending);
        let before = self.entries.len();
        self.parse_record(&line);
        self.entries.len() - before
    }

    fn parse_record(&mut self, line: &[u8]) {
        let line = trim_ascii(line);
        if line.is_empty() {
            return;
        }
        let Some((start, rest)) = hex_field(line) else {
            self.skipped += 1;
            return;
        };
        let Some((size, rest)) = hex_field(rest) else {
            self.skipped += 1;
            return;
        };
        let (name, tier) = split_tier(rest);
        let name = String::from_utf8_lossy(name);
        let (Ok(name_off), Ok(name_len)) = (u32::try_from(self.names.len()), u32::try_from(name.len())) else {
            self.skipped += 1;
            return;
        };
        self.names.push_str(&name);
        self.entries.push(Entry { start, size, name_off, name_len, tier });
    }

    fn ensure_sorted(&mut self) {
        if self.sorted_len == self.entries.len() {
            return;
        }
        let tail_sorted = self.entries[self.sorted_len..].windows(2).all(|w| w[0].start <= w[1].start);
        let joins = self.sorted_len == 0
            || self.entries.get(self.sorted_len).is_none_or(|e| self.entries[self.sorted_len - 1].start <= e.start);
        if !(tail_sorted && joins) {
            // Stable: records for the same start keep file order, so the last one wins lookups.
            self.entries.sort_by_key(|e| e.start);
        }
        self.sorted_len = self.entries.len();
    }

    /// Sorts the index now (lookups do it lazily otherwise).
    pub fn index(&mut self) {
        self.ensure_sorted();
    }

    /// The record whose `[start, start+size)` holds `addr`; the latest record wins ties.
    pub fn lookup(&mut self, addr: u64) -> Option<PerfMapSymbol<'_>> {
        self.ensure_sorted();
        self.lookup_sorted(addr)
    }

    /// Lookup without re-indexing (records fed since the last [`PerfMap::index`] are not seen).
    pub fn lookup_sorted(&self, addr: u64) -> Option<PerfMapSymbol<'_>> {
        let sorted = &self.entries[..self.sorted_len];
        let end = sorted.partition_point(|e| e.start <= addr);
        // The nearest starts first; a few older, larger records may still cover addr.
        for e in sorted[..end].iter().rev().take(8) {
            if addr - e.start < e.size.max(1) {
                return Some(self.symbol(e));
            }
        }
        None
    }

    /// All records, in index order.
    pub fn iter(&mut self) -> impl Iterator<Item = PerfMapSymbol<'_>> {
        self.ensure_sorted();
        self.entries.iter().map(|e| self.symbol(e))
    }

    fn symbol(&self, e: &Entry) -> PerfMapSymbol<'_> {
        let name = self.names.get(e.name_off as usize..(e.name_off as usize + e.name_len as usize)).unwrap_or("");
        let tier = e.tier.checked_sub(1).and_then(|i| TIERS.get(i as usize)).copied();
        PerfMapSymbol { start: e.start, size: e.size, name, tier }
    }
}

fn trim_ascii(mut b: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = b {
        if first.is_ascii_whitespace() { b = rest } else { break }
    }
    while let [rest @ .., last] = b {
        if last.is_ascii_whitespace() { b = rest } else { break }
    }
    b
}

/// Parses a hex number (optional `0x`/`0X`) followed by whitespace; returns it and the rest
/// with leading spaces removed. `None` if no digits, a non-hex byte, or overflow.
fn hex_field(b: &[u8]) -> Option<(u64, &[u8])> {
    let b = match b {
        [b'0', b'x' | b'X', rest @ ..] => rest,
        _ => b,
    };
    let mut v: u64 = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            b' ' | b'\t' => break,
            _ => return None,
        };
        if v >> 60 != 0 {
            return None;
        }
        v = (v << 4) | d as u64;
        i += 1;
    }
    if i == 0 {
        return None;
    }
    let mut rest = &b[i..];
    while let [b' ' | b'\t', r @ ..] = rest {
        rest = r;
    }
    Some((v, rest))
}

/// Splits a trailing `[Tier]` off a name when Tier is a known tier word.
fn split_tier(name: &[u8]) -> (&[u8], u8) {
    if let [head @ .., b']'] = name
        && let Some(open) = head.iter().rposition(|&c| c == b'[')
    {
        let word = &head[open + 1..];
        if let Some(i) = TIERS.iter().position(|t| t.as_bytes() == word) {
            return (trim_ascii(&head[..open]), (i + 1) as u8);
        }
    }
    (name, 0)
}

#[cfg(test)]
mod tests;
