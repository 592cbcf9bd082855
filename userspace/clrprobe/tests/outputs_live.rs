//! Live: the files `clrprobe record` writes, read by their real consumers — `go tool pprof`
//! (each kind's file, and a file it rewrote), speedscope's own JSON schema (npm package
//! `speedscope`, fetched by `cargo xtask test`), and the Firefox Profiler's processed format
//! (the samples' real times on a timeline: CPU, off-CPU, allocations, exceptions, lock waits).
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use clrprobe_tests::{Runtime, Workload, require_root};
use serde_json::Value;

const SECONDS: f64 = 4.0;

fn out_dir(name: &str) -> PathBuf {
        clrprobe_tests::scratch_dir(&format!("outputs-{name}"))
}

fn clrprobe(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_clrprobe")).args(args).output().expect("run clrprobe");
    let (o, e) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert!(out.status.success(), "clrprobe {args:?} failed: {e}");
    (o, e)
}

fn go_pprof(args: &[&str], file: &Path) -> Vec<u8> {
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .env("HOME", clrprobe_tests::scratch_dir("go-home"))
        .output()
        .expect("go (Debian golang-go, installed by cargo xtask test) runs");
    assert!(out.status.success(), "go tool pprof {args:?} {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// The top self frames of `report --json` per kind: (kind, [(name, self value)]).
fn report_top(files: &[&Path]) -> BTreeMap<String, Vec<(String, i64)>> {
    let mut args = vec!["report", "--json", "--top", "8"];
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    args.extend(names.iter().map(String::as_str));
    let (json, _) = clrprobe(&args);
    let v: Value = serde_json::from_str(&json).unwrap();
    v["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let top = k["top_self"].as_array().unwrap().iter().map(|t| (t[0].as_str().unwrap().to_owned(), t[2].as_i64().unwrap())).collect();
            (k["kind"].as_str().unwrap().to_owned(), top)
        })
        .collect()
}

#[test]
fn every_kind_in_go_pprof_firefox_timeline_and_speedscope_schema() {
    require_root();
    let w = Workload::new("Mixed", Runtime::Net8).arg(SECONDS + 4.0).start().unwrap();
    let dir = out_dir("all");
    let prefix = dir.join("mixed");
    let (_, stderr) = clrprobe(&[
        "record", "--quiet", "-p", &w.pid.to_string(), "-d", &format!("{SECONDS}s"), "-F", "499",
        "--format", "pprof,firefox,speedscope,svg", "-o", prefix.to_str().unwrap(),
    ]);

    // 1. One pprof per kind, with Go's sample types; real mappings and addresses.
    let expected = [
        ("cpu", "samples/count cpu/nanoseconds"),
        ("alloc", "alloc_objects/count alloc_space/bytes"),
        ("contention", "contentions/count delay/nanoseconds"),
        ("offcpu", "contentions/count delay/nanoseconds"),
        ("exceptions", "exceptions/count"),
    ];
    for (kind, types) in expected {
        let file = PathBuf::from(format!("{}.{kind}.pb.gz", prefix.display()));
        assert!(file.is_file(), "{} missing: {stderr}", file.display());
        let raw = String::from_utf8(go_pprof(&["-raw", "-symbolize=none"], &file)).unwrap();
        assert!(raw.lines().any(|l| l.replace("[dflt]", "").trim() == types), "{kind}: no `{types}` line:\n{}", &raw[..raw.len().min(2000)]);
        // Mappings: `ID: 0xSTART/0xLIMIT/0xOFFSET PATH [BUILDID]`, at least one real one.
        let maps = raw.split("Mappings").nth(1).unwrap_or("");
        let real: Vec<&str> = maps.lines().filter(|l| l.contains("/0x") && !l.contains(": 0x0/0x0/")).collect();
        assert!(!real.is_empty(), "{kind}: no mapping with an address range:\n{maps}");
        // Kernel-sampled stacks go through the runtime; event stacks (EventPipe) are managed only.
        if kind == "cpu" || kind == "offcpu" {
            assert!(real.iter().any(|l| l.contains("libcoreclr.so")), "{kind}: libcoreclr not mapped:\n{maps}");
        }
        // Locations: `ID: 0xADDRESS M=N name ...`, addresses not 0.
        let locs = raw.split("Locations").nth(1).unwrap_or("").split("Mappings").next().unwrap_or("");
        let with_addr = locs.lines().filter(|l| l.contains(": 0x") && !l.contains(": 0x0 ")).count();
        assert!(with_addr > 0, "{kind}: no location with an address:\n{locs}");
        eprintln!("{kind}: {} real mappings, {with_addr} locations with addresses", real.len());
    }
    let cpu_raw = String::from_utf8(go_pprof(&["-raw", "-symbolize=none"], &prefix.with_extension("cpu.pb.gz"))).unwrap();
    assert!(cpu_raw.contains("Mixed::Spin"), "the hot method is missing:\n{}", &cpu_raw[..cpu_raw.len().min(3000)]);
    // A GNU build id on some native mapping (libcoreclr, libc, ...).
    assert!(
        cpu_raw.split("Mappings").nth(1).unwrap_or("").lines().any(|l| l.contains("libcoreclr.so") && l.split_whitespace().any(|b| b.len() >= 32 && b.chars().all(|c| c.is_ascii_hexdigit()))),
        "no build id:\n{cpu_raw}"
    );
    // No clrprobe comments in the pprof header that `-top` prints.
    let top = String::from_utf8(go_pprof(&["-top", "-symbolize=none"], &prefix.with_extension("cpu.pb.gz"))).unwrap();
    assert!(!top.contains("clrprobe:") && top.len() < 20_000, "{top}");

    // 2. Rewritten by `go tool pprof -proto` (every kind), `report` gives the same top frames.
    let mut originals = Vec::new();
    let mut rewritten = Vec::new();
    for (kind, _) in expected {
        let file = PathBuf::from(format!("{}.{kind}.pb.gz", prefix.display()));
        let out = dir.join(format!("rewritten.{kind}.pb.gz"));
        std::fs::write(&out, go_pprof(&["-proto", "-symbolize=none"], &file)).unwrap();
        originals.push(file);
        rewritten.push(out);
    }
    let before = report_top(&originals.iter().map(PathBuf::as_path).collect::<Vec<_>>());
    let after = report_top(&rewritten.iter().map(PathBuf::as_path).collect::<Vec<_>>());
    for kind in ["cpu", "alloc-bytes", "alloc-count", "contention-ns", "contention-count", "off-cpu", "exceptions"] {
        assert!(before.get(kind).is_some_and(|t| !t.is_empty()), "{kind} missing from the report: {before:?}");
    }
    assert_eq!(before, after, "report of the rewritten files differs");
    // The report text names the hot method under cpu.
    let (text, _) = clrprobe(&["report", prefix.to_str().unwrap()]);
    assert!(text.contains("== cpu") && text.contains("Mixed::Spin"), "{text}");

    // 3. Firefox: CPU samples at their real times, spanning the recording; names; markers.
    let ff: Value = serde_json::from_slice(&std::fs::read(format!("{}.cpu.firefox.json", prefix.display())).unwrap()).unwrap();
    let interval_ms = ff["meta"]["interval"].as_f64().unwrap();
    assert!((interval_ms - 1000.0 / 499.0).abs() < 0.01, "interval {interval_ms}");
    let mut times: Vec<f64> = Vec::new();
    let mut main_thread = None;
    for t in ff["threads"].as_array().unwrap() {
        assert_eq!(t["processName"], "dotnet", "process name of {}", t["name"]);
        let deltas = t["samples"]["timeDeltas"].as_array().unwrap();
        let mut at = 0.0;
        let mut own = Vec::new();
        for d in deltas {
            let d = d.as_f64().unwrap();
            assert!(d >= 0.0, "time goes back in {}", t["name"]);
            at += d;
            own.push(at);
        }
        if t["pid"] == t["tid"] {
            main_thread = Some(own.clone());
        }
        times.extend(own);
    }
    let main = main_thread.expect("the main thread has samples");
    let (first, last) = (main.first().copied().unwrap(), main.last().copied().unwrap());
    let span_ms = SECONDS * 1000.0;
    // (Within a second of either end: a loaded machine delays a runnable thread that long.)
    assert!(first < 1000.0 && last > span_ms - 1000.0 && last < span_ms + 500.0, "main thread samples span {first:.0}..{last:.0} ms of {span_ms} ms");
    // Real times: the busy main thread's samples are about one period apart, not all at 0.
    let distinct = main.windows(2).filter(|w| w[1] > w[0]).count();
    assert!(distinct as f64 > main.len() as f64 * 0.9, "{distinct} distinct times of {}", main.len());
    eprintln!("firefox: {} cpu samples, main thread {first:.1}..{last:.1} ms, {} samples", times.len(), main.len());
    // Off-CPU: traced milliseconds on the Holder thread (it sleeps 20 ms at a time).
    let off: Value = serde_json::from_slice(&std::fs::read(format!("{}.off-cpu.firefox.json", prefix.display())).unwrap()).unwrap();
    let holder = off["threads"].as_array().unwrap().iter().find(|t| t["name"] == "Holder").expect("Holder thread off CPU");
    assert_eq!(holder["samples"]["weightType"], "tracing-ms");
    let ms: i64 = holder["samples"]["weight"].as_array().unwrap().iter().map(|w| w.as_i64().unwrap()).sum();
    assert!(ms as f64 > span_ms * 0.5, "Holder off CPU only {ms} ms");

    // 3b. Allocation, exception and contention samples sit at their event times too.
    let alloc = firefox_thread(&prefix, "alloc-bytes", |t| t["pid"] == t["tid"]);
    assert_eq!(alloc.weight_type, "bytes");
    let (first, last) = (alloc.times[0], alloc.times[alloc.times.len() - 1]);
    let distinct = alloc.times.windows(2).filter(|w| w[1] > w[0]).count();
    assert!(alloc.times.len() >= 20 && first < 1000.0 && last > span_ms - 1000.0 && last < span_ms + 500.0, "main thread allocation samples span {first:.0}..{last:.0} ms of {span_ms} ms ({} samples)", alloc.times.len());
    assert!(distinct as f64 > alloc.times.len() as f64 * 0.8, "{distinct} distinct allocation times of {}", alloc.times.len());
    eprintln!("firefox: main thread {} allocation samples {first:.1}..{last:.1} ms, {distinct} distinct times", alloc.times.len());
    let exc = firefox_thread(&prefix, "exceptions", |t| t["pid"] == t["tid"]);
    let (first, last) = (exc.times[0], exc.times[exc.times.len() - 1]);
    assert!(first < 1500.0 && last > span_ms - 1500.0, "exceptions span {first:.0}..{last:.0} ms ({} samples)", exc.times.len());
    let waits = firefox_thread(&prefix, "contention-ns", |t| t["name"] == "Waiter");
    assert_eq!(waits.weight_type, "tracing-ms");
    let distinct = waits.times.windows(2).filter(|w| w[1] > w[0]).count();
    assert!(distinct >= 10 && waits.times[waits.times.len() - 1] - waits.times[0] > span_ms * 0.5, "Waiter's waits at {:?}", waits.times);
    eprintln!("firefox: {} exception samples {first:.1}..{last:.1} ms; Waiter {} waits, {distinct} distinct times", exc.times.len(), waits.times.len());

    // 4. speedscope against the package's own schema.
    let schema = clrprobe_tests::cache_dir().join("speedscope-1.25.0").join("file-format-schema.json");
    assert!(schema.is_file(), "{} missing: `cargo xtask test` fetches it (npm pack speedscope@1.25.0)", schema.display());
    let ss = PathBuf::from(format!("{}.speedscope.json", prefix.display()));
    validate_speedscope(&ss, &schema);
    let v: Value = serde_json::from_slice(&std::fs::read(&ss).unwrap()).unwrap();
    let evented = v["profiles"].as_array().unwrap().iter().filter(|p| p["type"] == "evented" && p["unit"] == "nanoseconds").count();
    assert!(evented > 0, "no evented (timed) profile");
    // The Waiter thread's lock waits are timed events too.
    let waiter = v["profiles"].as_array().unwrap().iter().find(|p| p["name"].as_str().is_some_and(|n| n.starts_with("contention-ns") && n.contains("Waiter")));
    assert_eq!(waiter.map(|p| p["type"].clone()), Some(Value::from("evented")), "Waiter's contention is not evented");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One thread of a kind's Firefox Profiler file: its samples' times (ms) and weight type.
struct FirefoxThread {
    times: Vec<f64>,
    weight_type: String,
}

fn firefox_thread(prefix: &Path, kind: &str, pick: impl Fn(&Value) -> bool) -> FirefoxThread {
    let file = format!("{}.{kind}.firefox.json", prefix.display());
    let ff: Value = serde_json::from_slice(&std::fs::read(&file).unwrap_or_else(|e| panic!("{file}: {e}"))).unwrap();
    let t = ff["threads"].as_array().unwrap().iter().find(|t| pick(t)).unwrap_or_else(|| panic!("{file}: no such thread"));
    let mut at = 0.0;
    let times = t["samples"]["timeDeltas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            at += d.as_f64().unwrap();
            at
        })
        .collect::<Vec<_>>();
    assert!(!times.is_empty(), "{file}: thread {} has no samples", t["name"]);
    FirefoxThread { times, weight_type: t["samples"]["weightType"].as_str().unwrap_or("samples").to_owned() }
}

fn validate_speedscope(file: &Path, schema: &Path) {
    let out = Command::new("python3")
        .args(["-c", "import json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))); print('valid')"])
        .arg(file)
        .arg(schema)
        .output()
        .expect("python3 with jsonschema (Debian python3-jsonschema, installed by cargo xtask test)");
    assert!(
        out.status.success(),
        "{} does not validate against speedscope's schema: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `trace --format speedscope` of a real NetTrace (the runtime's sample profiler on .NET 5)
/// validates against the schema and names managed frames from the trace's rundown.
#[test]
fn nettrace_samples_to_speedscope_validate_against_the_schema() {
    // shared/ beside the checkout (as CI has it), or where CLRPROBE_SHARED says.
    let nettrace = clrprobe_tests::corpus::path("perfview__speedscope__only_managed_samples.nettrace");
    let dir = out_dir("trace");
    let out = dir.join("t.speedscope.json");
    clrprobe(&["trace", "--dump", nettrace.to_str().unwrap(), "--format", "speedscope", "-o", out.to_str().unwrap()]);
    let schema = clrprobe_tests::cache_dir().join("speedscope-1.25.0").join("file-format-schema.json");
    assert!(schema.is_file(), "{} missing: `cargo xtask test` fetches it", schema.display());
    validate_speedscope(&out, &schema);
    let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let frames = v["shared"]["frames"].as_array().unwrap();
    let named = frames.iter().filter(|f| !f["name"].as_str().unwrap().starts_with("0x")).count();
    assert!(named * 2 > frames.len(), "{named} of {} frames named", frames.len());
    assert!(v["profiles"].as_array().unwrap().iter().all(|p| p["type"] == "evented"));
    // A schema check that can fail: the file without its profiles' units does not validate.
    let mut broken = v.clone();
    broken["profiles"][0].as_object_mut().unwrap().remove("unit");
    let bad = dir.join("broken.json");
    std::fs::write(&bad, broken.to_string()).unwrap();
    let status = Command::new("python3")
        .args(["-c", "import json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))"])
        .arg(&bad)
        .arg(&schema)
        .output()
        .unwrap()
        .status;
    assert!(!status.success(), "the schema accepted a profile without a unit");
    let _ = std::fs::remove_dir_all(&dir);
}
