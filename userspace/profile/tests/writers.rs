//! Folded, SVG, speedscope and Firefox writers on the known profile.

mod common;

use clrprobe_profile::folded::{self, FoldedOptions};
use clrprobe_profile::speedscope::{self, Grouping};
use clrprobe_profile::{ProfileError, firefox, svg};
use serde_json::Value;

#[test]
fn folded_exact_text() {
    let p = common::known_profile();
    let mut out = Vec::new();
    folded::to_writer(&p, 0, &FoldedOptions::default(), &mut out).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "Program.Main(string[])_[j];Program.Work()_[j] 4\n\
         Program.Main(string[])_[j];Program.Work()_[j];System.String.Concat(string:string)_[j];__memmove_avx 7\n"
    );
    let off_cpu = folded::lines(&p, 3, &FoldedOptions::default()).unwrap();
    assert_eq!(off_cpu, ["Program.Main(string[])_[j];ksys_read_[k] 1500000"]);
    let opts = FoldedOptions { annotate_kinds: false, include_module: true, thread_roots: true };
    assert_eq!(
        folded::lines(&p, 1, &opts).unwrap(),
        ["app (100);Main (100);app.dll!Program.Main(string[]);app.dll!Program.Work();\
          System.Private.CoreLib.dll!System.String.Concat(string:string);libc.so.6!__memmove_avx 4096"]
    );
    assert!(matches!(folded::lines(&p, 9, &opts), Err(ProfileError::NoSuchSampleType { index: 9, count: 4 })));
}

#[test]
fn folded_one_file_per_sample_type() {
    let p = common::known_profile();
    let dir = common::scratch("folded");
    let paths = folded::write_all(&p, &dir, "run", &FoldedOptions::default()).unwrap();
    let names: Vec<String> = paths.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["run.cpu.folded", "run.alloc-bytes.folded", "run.exceptions.folded", "run.off-cpu.folded"]);
    let exc = std::fs::read_to_string(&paths[2]).unwrap();
    assert_eq!(exc, "Program.Main(string[])_[j];Program.Work()_[j] 1\n");
    // Every line ends in a count that parses; counts add up to the column total.
    for (i, path) in paths.iter().enumerate() {
        let text = std::fs::read_to_string(path).unwrap();
        let sum: i64 = text.lines().map(|l| l.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap()).sum();
        assert_eq!(sum, p.total(i), "{}", path.display());
    }
}

#[test]
fn svg_contains_frame_names() {
    let p = common::known_profile();
    let mut out = Vec::new();
    svg::to_writer(&p, 0, "clrprobe cpu", &mut out).unwrap();
    let svg = String::from_utf8(out).unwrap();
    assert!(svg.starts_with("<?xml"), "{}", &svg[..100]);
    assert!(svg.contains("<svg"));
    assert!(svg.contains("clrprobe cpu"));
    for name in ["Program.Main(string[])", "Program.Work()", "System.String.Concat(string:string)", "__memmove_avx"] {
        assert!(svg.contains(name), "{name} missing from SVG");
    }
    // Each frame is filled with its category's colour; the legend names every category.
    let fill_of = |name: &str| -> String {
        let at = svg.find(&format!("<title>{name}")).unwrap_or_else(|| panic!("no frame {name}"));
        let rect = &svg[at..];
        let fill = &rect[rect.find("fill=\"").unwrap() + 6..];
        fill[..fill.find('"').unwrap()].to_owned()
    };
    let rgb = |hex: &str| {
        let c = |i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap();
        format!("rgb({},{},{})", c(1), c(3), c(5))
    };
    assert_eq!(fill_of("Program.Work()"), rgb(svg::Category::Jit.color()));
    assert_eq!(fill_of("System.String.Concat"), rgb(svg::Category::ReadyToRun.color()));
    assert_eq!(fill_of("__memmove_avx"), rgb(svg::Category::Native.color()));
    assert!(svg.contains("id=\"clrprobe-legend\""));
    for c in svg::Category::LEGEND {
        assert!(svg.contains(&format!("fill=\"{}\"", c.color())) && svg.contains(&format!(">{}</text>", c.label())), "{c:?}");
    }
    // Off-CPU graph has the kernel frame and not the memmove one.
    let mut out = Vec::new();
    svg::to_writer(&p, 3, "off", &mut out).unwrap();
    let svg = String::from_utf8(out).unwrap();
    assert!(svg.contains("ksys_read"));
    assert!(!svg.contains("__memmove_avx"));
}

fn parse(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn speedscope_shape_and_weights() {
    let p = common::known_profile();
    let mut out = Vec::new();
    speedscope::to_writer(&p, "test run", Grouping::PerThread, &mut out).unwrap();
    let v = parse(&out);
    assert_eq!(v["$schema"], speedscope::SCHEMA);
    assert_eq!(v["name"], "test run");
    assert_eq!(v["activeProfileIndex"], 0);
    let frames = v["shared"]["frames"].as_array().unwrap();
    assert_eq!(frames.len(), p.frames().len());
    assert_eq!(frames[3]["name"], "__memmove_avx");
    assert_eq!(frames[3]["file"], "libc.so.6");
    let profiles = v["profiles"].as_array().unwrap();
    let names: Vec<&str> = profiles.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "cpu: app (100) / Main (100)",
            "cpu: app (100) / Worker (101)",
            "alloc-bytes: app (100) / Main (100)",
            "exceptions: app (100) / Worker (101)",
            "off-cpu: app (100) / Worker (101)",
        ]
    );
    let main_cpu = &profiles[0];
    assert_eq!(main_cpu["type"], "sampled");
    // CPU samples of a 1 ms period are time.
    assert_eq!(main_cpu["unit"], "nanoseconds");
    assert_eq!(main_cpu["samples"], serde_json::json!([[0, 1], [0, 1, 2, 3]]));
    assert_eq!(main_cpu["weights"], serde_json::json!([4_000_000, 2_000_000]));
    assert_eq!(main_cpu["startValue"], 0);
    assert_eq!(main_cpu["endValue"], 6_000_000);
    assert_eq!(profiles[2]["unit"], "bytes");
    // The timed off-CPU interval: evented, open at its time for its length.
    let off = &profiles[4];
    assert_eq!((off["type"].as_str(), off["unit"].as_str()), (Some("evented"), Some("nanoseconds")));
    assert_eq!((off["startValue"].as_u64(), off["endValue"].as_u64()), (Some(250_000_000), Some(251_500_000)));
    let events: Vec<(String, u64, u64)> = off["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["type"].as_str().unwrap().to_owned(), e["frame"].as_u64().unwrap(), e["at"].as_u64().unwrap()))
        .collect();
    let ksys_read = frames.iter().position(|f| f["name"] == "ksys_read").unwrap() as u64;
    assert_eq!(
        events,
        [("O".into(), 0, 250_000_000), ("O".into(), ksys_read, 250_000_000), ("C".into(), ksys_read, 251_500_000), ("C".into(), 0, 251_500_000)]
    );
    // Every sample indexes a real frame, and samples/weights line up.
    for prof in profiles.iter().filter(|p| p["type"] == "sampled") {
        let samples = prof["samples"].as_array().unwrap();
        assert_eq!(samples.len(), prof["weights"].as_array().unwrap().len());
        for s in samples {
            for f in s.as_array().unwrap() {
                assert!((f.as_u64().unwrap() as usize) < frames.len());
            }
        }
    }

    let mut out = Vec::new();
    speedscope::to_writer(&p, "k", Grouping::PerKind, &mut out).unwrap();
    let v = parse(&out);
    let weights: Vec<i64> = v["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["weights"].as_array().unwrap().iter().map(|w| w.as_i64().unwrap()).sum())
        .collect();
    assert_eq!(weights, [p.total(0) * 1_000_000, p.total(1), p.total(2), p.total(3)]);
}

#[test]
fn firefox_threads_samples_categories_markers() {
    let p = common::known_profile();
    let mut out = Vec::new();
    firefox::to_writer(&p, 0, "clrprobe", &mut out).unwrap();
    let v = parse(&out);
    assert_eq!(v["meta"]["product"], "clrprobe");
    let categories: Vec<&str> =
        v["meta"]["categories"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    for c in ["Kernel", "Native", ".NET JIT", ".NET R2R", "GC"] {
        assert!(categories.contains(&c), "category {c} missing: {categories:?}");
    }
    let threads = v["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2, "one thread per (pid, tid)");
    let by_tid = |tid: &str| threads.iter().find(|t| t["tid"] == tid).unwrap();
    let main = by_tid("100");
    let worker = by_tid("101");
    assert_eq!(main["pid"], "100");
    assert_eq!(main["samples"]["length"], 2);
    assert_eq!(main["samples"]["weight"], serde_json::json!([4, 2]));
    // CPU delta in µs: weight × the 1 ms period.
    assert_eq!(main["samples"]["threadCPUDelta"], serde_json::json!([4000, 2000]));
    assert_eq!(worker["samples"]["length"], 1);
    assert_eq!(worker["samples"]["weight"], serde_json::json!([5]));
    assert_eq!(worker["name"], "Worker");
    // The GC marker lands on its thread, 100..130 ms, in the GC category.
    let gc = worker["markers"].clone();
    assert_eq!(gc["length"], 1);
    assert_eq!(gc["startTime"], serde_json::json!([100.0]));
    assert_eq!(gc["endTime"], serde_json::json!([130.0]));
    let gc_cat = categories.iter().position(|c| *c == "GC").unwrap();
    assert_eq!(gc["category"][0].as_u64().unwrap() as usize, gc_cat);
    // The memmove frame is in the Native category.
    let strings = main["stringArray"].as_array().unwrap();
    let funcs = &main["funcTable"];
    let frames = &main["frameTable"];
    let native = categories.iter().position(|c| *c == "Native").unwrap();
    let n = frames["length"].as_u64().unwrap() as usize;
    let memmove = (0..n)
        .find(|&i| {
            let func = frames["func"][i].as_u64().unwrap() as usize;
            let name = funcs["name"][func].as_u64().unwrap() as usize;
            strings[name].as_str().unwrap().ends_with("__memmove_avx")
        })
        .expect("memmove frame");
    assert_eq!(frames["category"][memmove].as_u64().unwrap() as usize, native);

    // Allocation bytes: weight type bytes; off-CPU nanoseconds are traced milliseconds.
    let mut out = Vec::new();
    firefox::to_writer(&p, 1, "clrprobe", &mut out).unwrap();
    let v = parse(&out);
    let t = &v["threads"][0];
    assert_eq!(t["samples"]["weightType"], "bytes");
    assert_eq!(t["samples"]["weight"], serde_json::json!([4096]));
    let mut out = Vec::new();
    firefox::to_writer(&p, 3, "clrprobe", &mut out).unwrap();
    let v = parse(&out);
    let t = v["threads"].as_array().unwrap().iter().find(|t| t["tid"] == "101").unwrap();
    assert_eq!(t["samples"]["weightType"], "tracing-ms");
    assert_eq!(t["samples"]["weight"], serde_json::json!([2]), "1.5 ms rounds to 2 ms");
    assert_eq!(t["samples"]["timeDeltas"][0], 250.0);
    assert_eq!(t["samples"]["threadCPUDelta"], serde_json::json!([0]), "off-CPU time is no CPU time");
}

#[test]
fn empty_profile_in_every_format() {
    let p = clrprobe_profile::ProfileBuilder::new(vec![clrprobe_profile::SampleType::new("cpu", "samples")]).build();
    assert!(folded::lines(&p, 0, &FoldedOptions::default()).unwrap().is_empty());
    let mut out = Vec::new();
    svg::to_writer(&p, 0, "empty", &mut out).unwrap();
    assert!(String::from_utf8(out).unwrap().contains("[no samples]"));
    let mut out = Vec::new();
    speedscope::to_writer(&p, "empty", Grouping::PerThread, &mut out).unwrap();
    assert_eq!(parse(&out)["profiles"].as_array().unwrap().len(), 1);
    let mut out = Vec::new();
    firefox::to_writer(&p, 0, "empty", &mut out).unwrap();
    assert_eq!(parse(&out)["threads"].as_array().unwrap().len(), 0);
    let back = clrprobe_profile::pprof::decode(&clrprobe_profile::pprof::encode(&p).unwrap()).unwrap();
    assert_eq!(back, p);
    // No sample types at all: writers that need one say so.
    let none = clrprobe_profile::ProfileBuilder::new(vec![]).build();
    assert!(matches!(svg::to_writer(&none, 0, "x", Vec::new()), Err(ProfileError::NoSuchSampleType { .. })));
    assert!(matches!(firefox::to_writer(&none, 0, "x", Vec::new()), Err(ProfileError::NoSuchSampleType { .. })));
}
