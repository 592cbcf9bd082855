//! A target's perf map and jitdump are read only if they are regular files of the target's
//! user (or root), never through a link, never blocking on a FIFO, and within caps.
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command};

use clrprobe_symbolizer::ProcessSymbolizer;
use clrprobe_symbolizer::perf_map::MAX_RECORD;

struct Target(Child);

impl Target {
    fn start() -> Self {
        Target(Command::new("sleep").arg("60").spawn().expect("sleep"))
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
    fn files(&self) -> [String; 2] {
        [format!("/tmp/perf-{}.map", self.pid()), format!("/tmp/jit-{}.dump", self.pid())]
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        for f in self.files() {
            let _ = std::fs::remove_file(f);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn vm_hwm_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap().trim().trim_end_matches(" kB").trim().parse().unwrap()
}

#[test]
fn a_300_mb_single_line_map_is_streamed_past_not_held() {
    let t = Target::start();
    let [map, _] = t.files();
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&map).unwrap());
        f.write_all(b"0x1000 0x10 ").unwrap();
        let chunk = vec![b'A'; 1 << 20];
        for _ in 0..300 {
            f.write_all(&chunk).unwrap();
        }
        f.write_all(b"\n0x2000 0x10 After::Line()\n").unwrap();
    }
    let size = std::fs::metadata(&map).unwrap().len();
    let before = vm_hwm_kib();
    let mut s = ProcessSymbolizer::new(t.pid()).expect("symbolizer");
    let grown = vm_hwm_kib().saturating_sub(before);
    let pm = s.perf_map();
    assert_eq!((pm.len(), pm.skipped(), pm.consumed()), (1, 1, size));
    assert!(s.warnings().is_empty(), "{:?}", s.warnings());
    let f = s.symbolize(&[0x2004]);
    assert_eq!(f[0].name, "After::Line");
    eprintln!("peak RSS grew by {grown} KiB reading a {size}-byte one-line map (record cap {MAX_RECORD} bytes)");
    assert!(grown < 16 * 1024, "{grown} KiB");
}

/// Puts something at a path.
type Plant = Box<dyn Fn(&str)>;

#[test]
fn fifos_links_and_foreign_files_are_refused_with_a_reason() {
    let t = Target::start();
    let [map, dump] = t.files();
    let cases: [(&str, Plant); 3] = [
        ("is a FIFO, not a regular file: not read", Box::new(|p: &str| assert!(Command::new("mkfifo").arg(p).status().unwrap().success()))),
        ("is a symbolic link: not followed", Box::new(|p: &str| std::os::unix::fs::symlink("/dev/zero", p).unwrap())),
        (
            "belongs to uid 65534, not to the target's user (0) or root: not trusted",
            Box::new(|p: &str| {
                std::fs::write(p, b"0x1000 0x10 Evil::Planted()\n").unwrap();
                std::os::unix::fs::lchown(p, Some(65534), Some(65534)).unwrap();
            }),
        ),
    ];
    for (why, plant) in &cases {
        for p in [&map, &dump] {
            plant(p);
        }
        let t0 = std::time::Instant::now();
        let mut s = ProcessSymbolizer::new(t.pid()).expect("symbolizer");
        s.refresh_perf_map().expect("refresh");
        assert!(t0.elapsed() < std::time::Duration::from_secs(5), "blocked for {:?}", t0.elapsed());
        assert!(s.perf_map().is_empty() && s.jitdump().is_empty(), "{why}");
        let root = format!("/proc/{}/root", t.pid());
        assert_eq!(s.warnings(), [format!("{root}{dump} {why}"), format!("{root}{map} {why}")], "{why}");
        assert_ne!(s.symbolize(&[0x1004])[0].name, "Evil::Planted");
        for p in [&map, &dump] {
            // Left as it was.
            assert!(std::fs::symlink_metadata(p).is_ok_and(|m| m.uid() == 0 || m.uid() == 65534));
            std::fs::remove_file(p).unwrap();
        }
    }
}

#[test]
fn a_perf_map_deleted_after_it_was_found_is_read_to_its_end() {
    // clrprobe's perf-map guard deletes the map when the target exits; methods the runtime
    // appended before that, read only afterwards, must still be named.
    let t = Target::start();
    let [map, _] = t.files();
    std::fs::write(&map, "0x1000 0x10 First::Method()\n").unwrap();
    let mut s = ProcessSymbolizer::new(t.pid()).expect("symbolizer");
    assert_eq!(s.symbolize(&[0x1004])[0].name, "First::Method");
    std::fs::OpenOptions::new().append(true).open(&map).unwrap().write_all(b"0x2000 0x10 Late::Method()\n").unwrap();
    std::fs::remove_file(&map).unwrap();
    s.refresh_perf_map().unwrap();
    assert_eq!(s.symbolize(&[0x2004])[0].name, "Late::Method");
    // A new map at the path (switched off and on again) is read from its start.
    std::fs::write(&map, "0x3000 0x10 Again::Method()\n").unwrap();
    s.refresh_perf_map().unwrap();
    assert_eq!(s.symbolize(&[0x3004])[0].name, "Again::Method");
    // Replaced while the held file keeps a link elsewhere (so it still looks current from its
    // descriptor): the path is looked at again within a second, and the new map read.
    let kept = format!("{map}.kept");
    std::fs::hard_link(&map, &kept).unwrap();
    std::fs::remove_file(&map).unwrap();
    std::fs::write(&map, "0x4000 0x10 Renamed::Method()\n").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    s.refresh_perf_map().unwrap();
    assert_eq!(s.symbolize(&[0x4004])[0].name, "Renamed::Method");
    std::fs::remove_file(&kept).unwrap();
}
