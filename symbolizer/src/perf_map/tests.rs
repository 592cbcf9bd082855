use super::*;

fn names(m: &mut PerfMap) -> Vec<(u64, u64, String, Option<String>)> {
    m.index();
    m.iter().map(|s| (s.start, s.size, s.name.to_string(), s.tier.map(str::to_string))).collect()
}

#[test]
fn hex_with_and_without_prefix() {
    let mut m = PerfMap::parse(b"0x7f00001000 0x20 A::a()\n7f00002000 30 B::b()\n0X7F00003000 1f C::c()\n");
    assert_eq!(
        names(&mut m),
        vec![
            (0x7f00001000, 0x20, "A::a()".into(), None),
            (0x7f00002000, 0x30, "B::b()".into(), None),
            (0x7f00003000, 0x1f, "C::c()".into(), None),
        ]
    );
    assert_eq!(m.lookup(0x7f0000201f).map(|s| s.name), Some("B::b()"));
    assert_eq!(m.lookup(0x7f00002030), None, "one past the end is outside");
    assert_eq!(m.lookup(0x7f00000fff), None);
}

#[test]
fn names_with_spaces_and_tiers() {
    let text = "0x7f1dd2032500 38 void [Cpu] Cpu::HotA()[QuickJitted]\n\
                0x7f1dd2032ec0 37 void [Cpu] Cpu::HotA()[OptimizedTier1]\n\
                0x7f1dd2040000 10 instance void [System.Private.CoreLib] System.Collections.Generic.List`1[System.__Canon]::Add(!0)[Tier0]\n\
                0x7f1dd2050000 10 int32 [x] X::M()[OSR]\n\
                0x7f1dd2060000 10 void [x] X::P()[PreJIT]\n\
                0x7f1dd2070000 10 stub<1> AllocateTemporaryEntryPoints<PRECODE_STUB>\n\
                0x7f1dd2080000 10 void [x] X::Q()[SomeFutureTier]\n\
                0x7f1dd2090000 10 void [x] X::R()[InstrumentedTierOptimized]\n\
                0x7f1dd20a0000 10 stub<2> Stub[T]\n\
                0x7f1dd20b0000 10 void [x] X::S() [Tier0]\n";
    let mut m = PerfMap::parse(text.as_bytes());
    let got = names(&mut m);
    assert_eq!(got[0].2, "void [Cpu] Cpu::HotA()");
    let tier = |i: usize| got[i].3.as_deref();
    assert_eq!(tier(0), Some("QuickJitted"));
    assert_eq!(tier(1), Some("OptimizedTier1"));
    assert_eq!(got[2].2, "instance void [System.Private.CoreLib] System.Collections.Generic.List`1[System.__Canon]::Add(!0)");
    assert_eq!(tier(2), Some("Tier0"));
    assert_eq!(tier(3), Some("OSR"));
    assert_eq!(tier(4), Some("PreJIT"));
    assert_eq!(got[5].2, "stub<1> AllocateTemporaryEntryPoints<PRECODE_STUB>");
    assert_eq!(tier(5), None);
    assert_eq!((got[6].2.as_str(), tier(6)), ("void [x] X::Q()", Some("SomeFutureTier")), "unknown tier words after `)`");
    assert_eq!((got[7].2.as_str(), tier(7)), ("void [x] X::R()", Some("InstrumentedTierOptimized")));
    assert_eq!((got[8].2.as_str(), tier(8)), ("stub<2> Stub[T]", None), "brackets not after `)` stay in the name");
    assert_eq!((got[9].2.as_str(), tier(9)), ("void [x] X::S()", Some("Tier0")));
}

#[test]
fn nul_joined_records() {
    let mut m = PerfMap::parse(b"0x1000 0x10 A\x000x2000 0x10 B\n0x3000 0x10 C\x00");
    assert_eq!(m.len(), 3);
    assert_eq!(m.lookup(0x2008).map(|s| s.name), Some("B"));
    assert_eq!(m.lookup(0x3000).map(|s| s.name), Some("C"));
}

#[test]
fn partial_last_line_waits_for_the_rest() {
    let mut m = PerfMap::new();
    assert_eq!(m.feed(b"0x1000 0x10 A::a()\n0x2000 0x1"), 1);
    assert_eq!(m.lookup(0x2000), None, "partial record is not parsed yet");
    assert_eq!(m.feed(b"0 B::b()[Tier0]\n"), 1);
    let s = m.lookup(0x200f).expect("completed record");
    assert_eq!((s.size, s.name, s.tier), (0x10, "B::b()", Some("Tier0")));
    assert_eq!(m.consumed(), 45);
    // A final unterminated record counts after finish().
    m.feed(b"0x3000 0x10 C");
    assert_eq!(m.lookup(0x3000), None);
    assert_eq!(m.finish(), 1);
    assert_eq!(m.lookup(0x3000).map(|s| s.name), Some("C"));
}

#[test]
fn incremental_append_byte_by_byte_matches_whole_parse() {
    let text = b"0x5000 0x10 E\n0x1000 0x10 A\n0x3000 0x100 C with space\x000x2000 0x10 B[Tier1]\n";
    let mut whole = PerfMap::parse(text);
    let mut inc = PerfMap::new();
    for b in text.iter() {
        inc.feed(std::slice::from_ref(b));
        inc.index();
    }
    assert_eq!(names(&mut whole), names(&mut inc));
    assert_eq!(inc.len(), 4);
    assert_eq!(inc.lookup(0x30ff).map(|s| s.name), Some("C with space"));
}

#[test]
fn later_records_for_the_same_address_win() {
    let mut m = PerfMap::parse(b"0x1000 0x40 Old::m()[Tier0]\n0x2000 0x10 X\n0x1000 0x40 New::m()[OptimizedTier1]\n");
    let s = m.lookup(0x1010).expect("found");
    assert_eq!((s.name, s.tier), ("New::m()", Some("OptimizedTier1")));
    m.feed(b"0x1000 0x40 Newest::m()\n");
    assert_eq!(m.lookup(0x1000).map(|s| s.name), Some("Newest::m()"));
}

#[test]
fn garbage_is_skipped_not_fatal() {
    let mut m = PerfMap::parse(b"zzzz 10 bad\n0x1000\n\n   \n0x1000 0x10 \xff\xfeok\n0xffffffffffffffffff 1 overflow\n");
    assert_eq!(m.len(), 1);
    assert_eq!(m.skipped(), 3);
    assert_eq!(m.lookup(0x1000).map(|s| s.name.ends_with("ok")), Some(true));
}

struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn random_chunking_matches_whole_parse() {
    let mut text = Vec::new();
    for i in 0..500u64 {
        let sep = if i % 7 == 0 { "\0" } else { "\n" };
        let pre = if i % 3 == 0 { "" } else { "0x" };
        text.extend_from_slice(format!("{pre}{:x} {pre}{:x} void [A] N.T{i}::M{i}(int32, string)[Tier0]{sep}", 0x10000 + i * 0x40, 0x30).as_bytes());
    }
    let mut whole = PerfMap::parse(&text);
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for _ in 0..20 {
        let mut inc = PerfMap::new();
        let mut at = 0;
        while at < text.len() {
            let n = (rng.next() % 200) as usize + 1;
            let end = (at + n).min(text.len());
            inc.feed(&text[at..end]);
            at = end;
        }
        inc.finish();
        assert_eq!(names(&mut inc), names(&mut whole));
    }
    assert_eq!(whole.len(), 500);
    assert_eq!(whole.lookup(0x10000 + 499 * 0x40 + 0x2f).map(|s| s.name), Some("void [A] N.T499::M499(int32, string)"));
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = XorShift(0xDEAD_BEEF_CAFE_F00D);
    for _ in 0..200 {
        let len = (rng.next() % 400) as usize;
        let alphabet = b"0x123abcfXZ [](): \n\0\t\xff\xc3";
        let bytes: Vec<u8> = (0..len).map(|_| alphabet[(rng.next() % alphabet.len() as u64) as usize]).collect();
        let mut m = PerfMap::parse(&bytes);
        for _ in 0..20 {
            let _ = m.lookup(rng.next() % 0x2000);
        }
        for s in m.iter() {
            assert!(!s.name.contains('\n'));
        }
    }
}

#[test]
fn an_over_long_record_is_skipped_as_it_streams_in() {
    let mut m = PerfMap::new();
    assert_eq!(m.feed(b"0x1000 0x10 A::a()\n0x2000 0x10 "), 1);
    let chunk = vec![b'x'; 32 * 1024];
    for _ in 0..10 {
        assert_eq!(m.feed(&chunk), 0); // 320 KiB of one record: never held whole
    }
    assert!(m.tail.len() + m.text.len() < MAX_RECORD + chunk.len(), "kept {} bytes", m.tail.len() + m.text.len());
    assert_eq!(m.feed(b"yyy\n0x3000 0x10 C::c()\n"), 1);
    assert_eq!(m.consumed(), 31 + 10 * 32 * 1024 + 23);
    assert_eq!(m.skipped(), 1);
    assert_eq!(m.lookup(0x3001).map(|s| s.name), Some("C::c()"));
    assert_eq!(m.lookup(0x2001), None);
    assert!(!m.capped());
}

/// The two-level index finds what a linear scan of the records finds (latest record wins),
/// with records fed in sorted runs and out of order, across block boundaries.
#[test]
fn lookups_match_a_linear_scan_while_the_map_grows() {
    let mut rng = XorShift(0x1234_5678_9ABC_DEF1);
    let mut m = PerfMap::new();
    let mut records: Vec<(u64, u64, String)> = Vec::new();
    let mut next = 0x1000u64;
    for round in 0..12 {
        let mut text = String::new();
        for i in 0..(rng.next() % 300) {
            // Mostly ascending, sometimes a record placed back inside older code.
            let start = if rng.next().is_multiple_of(10) { 0x1000 + rng.next() % (next - 0xfff) } else { next };
            let size = 1 + rng.next() % 0x80;
            next = next.max(start + size + rng.next() % 0x20);
            let name = format!("R{round}_{i}");
            text.push_str(&format!("{start:x} {size:x} {name}\n"));
            records.push((start, size, name));
        }
        m.feed(text.as_bytes());
        for _ in 0..400 {
            let a = 0xff0 + rng.next() % (next - 0xfe0);
            // The index looks at the 8 nearest starts at or below the address.
            let mut below: Vec<(usize, &(u64, u64, String))> = records.iter().enumerate().filter(|(_, r)| r.0 <= a).collect();
            below.sort_by_key(|(i, r)| (r.0, *i));
            let want = below.iter().rev().take(8).find(|(_, r)| a - r.0 < r.1).map(|(_, r)| r.2.as_str());
            assert_eq!(m.lookup(a).map(|s| s.name), want, "address {a:#x} after round {round}");
        }
    }
}

#[test]
fn a_multibyte_character_split_across_feeds_is_kept() {
    let text = "0x1000 0x10 Caf\u{e9}::m()\n0x2000 0x10 \u{1F600}\n".as_bytes();
    for cut in 0..text.len() {
        let mut m = PerfMap::new();
        m.feed(&text[..cut]);
        m.feed(&text[cut..]);
        assert_eq!(m.lookup(0x1001).map(|s| s.name), Some("Caf\u{e9}::m()"), "cut at {cut}");
        assert_eq!(m.lookup(0x2001).map(|s| s.name), Some("\u{1F600}"), "cut at {cut}");
    }
}
