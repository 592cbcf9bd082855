//! The runtime's perf map (`/tmp/perf-PID.map`): `START SIZE name` records, hex numbers with or
//! without `0x`, names that may hold spaces and a trailing `[Tier]`.
//!
//! Sans-IO: [`PerfMap::feed`] takes appended bytes and keeps an unterminated last record until
//! the rest arrives (or [`PerfMap::finish`]). Records may end with `\n` or with a NUL byte.
//!
//! Bounded: a record longer than [`MAX_RECORD`] bytes is skipped as it streams in (never held
//! whole), and a map stops growing at [`MAX_TEXT`] bytes of kept text or [`MAX_RECORDS`]
//! records ([`PerfMap::capped`]); what follows is counted as fed but not kept.

/// Longest record kept; longer ones are skipped (CoreCLR's longest names are a few KiB).
pub const MAX_RECORD: usize = 64 * 1024;
/// Text kept per map at most (128 MiB).
pub const MAX_TEXT: usize = 128 << 20;
/// Records kept per map at most (28 bytes each: 56 MiB).
pub const MAX_RECORDS: usize = 2 << 20;

/// Tier suffixes CoreCLR appends to perf-map names (`...::Method()[OptimizedTier1]`); other
/// alphanumeric words after a method's `)` are taken as tiers too.
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
    "InstrumentedTierOptimized",
    "ReadyToRun",
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
    pub tier: Option<&'a str>,
}

/// Where a record's name and tier are in the kept text (12 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NameRef {
    /// Name bytes in `text` (kept text is capped at [`MAX_TEXT`], so offsets fit 32 bits).
    off: u32,
    len: u32,
    /// Tier text: starts `tier_gap` bytes after the name's end, `tier_len` long (0 = none).
    tier_gap: u8,
    tier_len: u8,
}

/// Records per block of the two-level search: 64 spans of 16 bytes = 16 cache lines.
const BLOCK: usize = 64;

/// A parsed, indexed perf map that grows as the file grows.
///
/// The text of the parsed records is kept once (made valid UTF-8 as it is appended: bad bytes
/// become `?`) and records point into it, so parsing copies nothing per record and a lookup
/// validates nothing. Records are kept as parallel arrays: `spans` (start, size) and `names`.
/// A lookup searches `top` (every [`BLOCK`]-th start, L1-sized for maps of 100k records),
/// then one block of `spans`, and reads a name only for the hit.
#[derive(Debug, Default, Clone)]
pub struct PerfMap {
    /// (start, size) per record: [0, sorted_len) sorted by start (stable: later records after
    /// earlier ones), then records fed since the last index, in file order.
    spans: Vec<(u64, u64)>,
    /// Name and tier of each record, parallel to `spans`.
    names: Vec<NameRef>,
    /// The first start of every block of the sorted spans.
    top: Vec<u64>,
    sorted_len: usize,
    /// The text of every record parsed so far.
    text: String,
    /// Fed bytes after the last separator: an unterminated record (at most about
    /// [`MAX_RECORD`] bytes; a longer one is dropped as it streams in).
    tail: Vec<u8>,
    skipped: usize,
    /// Bytes fed (the file offset of the next read); more than `text` and `tail` hold when
    /// records were skipped or the map is capped.
    fed: u64,
    /// Inside an over-long record: bytes are dropped up to its end.
    discarding: bool,
    capped: bool,
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
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Records that could not be parsed (bad hex, missing fields) and were dropped.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// Byte offset in the file up to which data has been fed (where the next read starts).
    pub fn consumed(&self) -> u64 {
        self.fed
    }

    /// The map reached [`MAX_TEXT`] or [`MAX_RECORDS`]: later bytes are not kept.
    pub fn capped(&self) -> bool {
        self.capped
    }

    /// Feeds bytes appended to the file since the last call. Returns records added.
    pub fn feed(&mut self, mut bytes: &[u8]) -> usize {
        self.fed += bytes.len() as u64;
        if self.capped {
            return 0;
        }
        if self.discarding {
            // The rest of an over-long record: drop it up to its end.
            let Some(end) = memchr::memchr2(b'\n', 0, bytes) else { return 0 };
            self.discarding = false;
            self.skipped += 1;
            bytes = &bytes[end + 1..];
        }
        if self.text.len() + self.tail.len() + bytes.len() > MAX_TEXT || self.spans.len() >= MAX_RECORDS {
            self.capped = true;
            return 0;
        }
        let added = match memchr::memrchr2(b'\n', 0, bytes) {
            Some(last) => {
                let base = self.text.len();
                let mut done = &bytes[..last + 1];
                if !self.tail.is_empty() {
                    // The unterminated record and the bytes that end it (a character may
                    // straddle the two feeds).
                    let first = memchr::memchr2(b'\n', 0, done).map_or(done.len(), |i| i + 1);
                    self.tail.extend_from_slice(&done[..first]);
                    push_utf8(&mut self.text, &self.tail);
                    self.tail.clear();
                    done = &done[first..];
                }
                // Separators are ASCII: the pieces validate alone as they would together.
                push_utf8(&mut self.text, done);
                self.tail.extend_from_slice(&bytes[last + 1..]);
                self.parse_from(base)
            }
            None => {
                self.tail.extend_from_slice(bytes);
                0
            }
        };
        if self.tail.len() > MAX_RECORD {
            // An unterminated record already too long: never hold it whole.
            self.tail = Vec::new();
            self.discarding = true;
        }
        if self.spans.len() >= MAX_RECORDS {
            self.capped = true;
        }
        added
    }

    /// Is there an unterminated last record (or the rest of an over-long one) that
    /// [`PerfMap::finish`] would take?
    pub fn unfinished(&self) -> bool {
        !self.tail.is_empty() || self.discarding
    }

    /// Parses an unterminated last record (call when the writer is known to be done).
    pub fn finish(&mut self) -> usize {
        if self.discarding {
            self.discarding = false;
            self.skipped += 1;
        }
        if self.tail.is_empty() {
            return 0;
        }
        let base = self.text.len();
        let record = std::mem::take(&mut self.tail);
        push_utf8(&mut self.text, &record);
        self.parse_from(base)
    }

    /// Parses the records in `text[base..]` (which ends after a separator or at the end).
    fn parse_from(&mut self, base: usize) -> usize {
        let before = self.spans.len();
        let region = &self.text.as_bytes()[base..];
        self.spans.reserve(region.len() / 64);
        self.names.reserve(region.len() / 64);
        let mut rec_start = 0;
        let mut parse = |rec: &[u8], at: usize| match parse_record(rec, at) {
            Some(_) if self.spans.len() >= MAX_RECORDS => self.capped = true,
            Some((span, name)) => {
                self.spans.push(span);
                self.names.push(name);
            }
            None => self.skipped += usize::from(!trim_ascii(rec).is_empty()),
        };
        for i in memchr::memchr2_iter(b'\n', 0, region) {
            parse(&region[rec_start..i], base + rec_start);
            rec_start = i + 1;
        }
        if rec_start < region.len() {
            parse(&region[rec_start..], base + rec_start);
        }
        self.spans.len() - before
    }

    fn ensure_sorted(&mut self) {
        let n = self.spans.len();
        if self.sorted_len == n {
            return;
        }
        let s = self.sorted_len;
        let tail_sorted = self.spans[s..].windows(2).all(|w| w[0].0 <= w[1].0);
        let joins = s == 0 || self.spans[s - 1].0 <= self.spans[s].0;
        let from = if tail_sorted && joins {
            s
        } else {
            // Stable: records for the same start keep file order, so the last one wins lookups.
            let mut order: Vec<u32> = (0..n as u32).collect();
            order.sort_by_key(|&i| self.spans[i as usize].0);
            self.spans = order.iter().map(|&i| self.spans[i as usize]).collect();
            self.names = order.iter().map(|&i| self.names[i as usize]).collect();
            0
        };
        // Blocks that start before `from` keep their first start.
        self.top.truncate(from.div_ceil(BLOCK));
        let top_from = self.top.len() * BLOCK;
        self.top.extend(self.spans[top_from.min(n)..].iter().step_by(BLOCK).map(|s| s.0));
        self.sorted_len = n;
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
    #[inline]
    pub fn lookup_sorted(&self, addr: u64) -> Option<PerfMapSymbol<'_>> {
        // Blocks after the last whose first start is <= addr hold only larger starts.
        let block = self.top.partition_point(|&s| s <= addr);
        if block == 0 {
            return None;
        }
        let lo = (block - 1) * BLOCK;
        let spans = &self.spans[..self.sorted_len];
        let hi = (lo + BLOCK).min(spans.len());
        let end = lo + spans[lo..hi].partition_point(|s| s.0 <= addr);
        // The nearest starts first; a few older, larger records may still cover addr.
        let i = (end.saturating_sub(8)..end).rev().find(|&i| addr - spans[i].0 < spans[i].1.max(1))?;
        Some(self.symbol(spans[i], self.names[i]))
    }

    /// All records: in address order after [`PerfMap::index`] (or a lookup), records fed since
    /// then follow in file order.
    pub fn iter(&self) -> impl Iterator<Item = PerfMapSymbol<'_>> {
        self.spans.iter().zip(&self.names).map(|(&s, &n)| self.symbol(s, n))
    }

    #[inline]
    fn symbol(&self, (start, size): (u64, u64), n: NameRef) -> PerfMapSymbol<'_> {
        // Names and tiers are cut at ASCII bytes, so these are char boundaries of `text`.
        let off = n.off as usize;
        let name = self.text.get(off..off + n.len as usize).unwrap_or("");
        let tier_at = off + n.len as usize + n.tier_gap as usize;
        let tier = (n.tier_len > 0).then(|| self.text.get(tier_at..tier_at + n.tier_len as usize)).flatten();
        PerfMapSymbol { start, size, name, tier }
    }
}

/// One record at byte `at` of the text; None if malformed.
fn parse_record(line: &[u8], at: usize) -> Option<((u64, u64), NameRef)> {
    let trimmed = trim_ascii(line);
    let at = at + (trimmed.as_ptr() as usize - line.as_ptr() as usize);
    let (start, rest) = hex_field(trimmed)?;
    let (size, rest) = hex_field(rest)?;
    let (name, tier) = split_tier(rest);
    let off = at + (name.as_ptr() as usize - trimmed.as_ptr() as usize);
    let (tier_gap, tier_len) = match tier {
        Some(t) => {
            let gap = t.as_ptr() as usize - (name.as_ptr() as usize + name.len());
            (u8::try_from(gap).ok()?, u8::try_from(t.len()).ok()?)
        }
        None => (0, 0),
    };
    let name = NameRef { off: u32::try_from(off).ok()?, len: u32::try_from(name.len()).ok()?, tier_gap, tier_len };
    Some(((start, size), name))
}

/// Appends `bytes` to `text`, bytes that are not valid UTF-8 replaced with `?` (lengths stay
/// the same, so offsets in the fed bytes stay offsets in the text).
fn push_utf8(text: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => text.push_str(s),
        Err(_) => {
            let mut fixed = bytes.to_vec();
            make_utf8(&mut fixed);
            text.push_str(std::str::from_utf8(&fixed).unwrap_or_default());
        }
    }
}

/// Replaces bytes that are not valid UTF-8 with `?`, in place (lengths stay the same).
fn make_utf8(mut b: &mut [u8]) {
    loop {
        match std::str::from_utf8(b) {
            Ok(_) => return,
            Err(e) => {
                let bad = e.valid_up_to();
                let len = e.error_len().unwrap_or(b.len() - bad);
                b[bad..bad + len].fill(b'?');
                b = &mut b[bad + len..];
            }
        }
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
/// with leading spaces removed. `None` if no digits, a non-hex byte, or more than 16 digits.
fn hex_field(b: &[u8]) -> Option<(u64, &[u8])> {
    let b = match b {
        [b'0', b'x' | b'X', rest @ ..] => rest,
        _ => b,
    };
    let end = b.iter().position(|&c| c == b' ' || c == b'\t').unwrap_or(b.len());
    if end == 0 || end > 16 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in &b[..end] {
        let d = HEX[c as usize];
        if d == 0xFF {
            return None;
        }
        v = (v << 4) | d as u64;
    }
    let mut rest = &b[end..];
    while let [b' ' | b'\t', r @ ..] = rest {
        rest = r;
    }
    Some((v, rest))
}

/// Hex digit values; 0xFF = not a digit.
const HEX: [u8; 256] = {
    let mut t = [0xFFu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// Splits a trailing `[Tier]` off a name: a known tier word, or any short alphanumeric word
/// right after a method's closing `)` (tiers newer runtimes add). Generic arguments such as
/// `List`1[System.__Canon]` never match: they hold dots and follow no `)`.
fn split_tier(name: &[u8]) -> (&[u8], Option<&[u8]>) {
    if let [head @ .., b']'] = name
        && let Some(open) = head.iter().rposition(|&c| c == b'[')
    {
        let word = &head[open + 1..];
        let before = trim_ascii(&head[..open]);
        let known = TIERS.iter().any(|t| t.as_bytes() == word);
        let tier_like = !word.is_empty() && word.len() <= 32 && word.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-');
        if known || (tier_like && before.last() == Some(&b')')) {
            return (before, Some(word));
        }
    }
    (name, None)
}

/// Splits a trailing `[Tier]` off a name (same rules as perf-map records), for names from
/// other sources such as the jitdump.
pub fn split_tier_str(name: &str) -> (&str, Option<&str>) {
    let (n, t) = split_tier(name.trim().as_bytes());
    // Both are sub-slices of `name` cut at ASCII bytes, so they are valid UTF-8.
    let n = std::str::from_utf8(n).unwrap_or(name);
    (n, t.and_then(|t| std::str::from_utf8(t).ok()))
}

#[cfg(test)]
mod tests;
