//! Live end-to-end of `clrprobe agent --all`: a real Prometheus server (Debian's package)
//! scrapes it every second while .NET workloads started after the agent throw known
//! exceptions and run known GCs, and the counters Prometheus stored are compared with the
//! workloads' own counts; `go tool pprof` reads the pprof endpoints. Runs as root; never skips.
use std::{
    collections::BTreeMap,
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::Mutex,
    time::{Duration, Instant},
};

use clrprobe_tests::{Runtime, Running, Workload, require_root};
use serde_json::Value;

/// One agent at a time: each follows every .NET process on the host.
static SERIAL: Mutex<()> = Mutex::new(());

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A plain HTTP/1.0 GET (the response ends with the connection): (status, body).
fn get(port: u16, path: &str) -> Option<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]);
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, buf[end + 4..].to_vec()))
}

fn get_text(port: u16, path: &str) -> String {
    let (status, body) = get(port, path).unwrap_or_else(|| panic!("GET {path} on port {port}"));
    let text = String::from_utf8_lossy(&body).into_owned();
    assert_eq!(status, 200, "GET {path}: {text}");
    text
}

struct Agent {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Agent {
    fn start(extra: &[&str]) -> Agent {
        let port = free_port();
        let log = clrprobe_tests::scratch_file("agent", &format!("{port}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_clrprobe"))
            .args(["agent", "--listen", &format!("127.0.0.1:{port}")])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start clrprobe agent");
        let a = Agent { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(20);
        while get(port, "/metrics").is_none_or(|(s, _)| s != 200) {
            assert!(Instant::now() < deadline, "agent not serving: {}", a.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
        a
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn metrics(&self) -> String {
        get_text(self.port, "/metrics")
    }

    /// Waits until the agent follows `pid` (its series appear).
    fn wait_followed(&self, pid: u32, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let needle = format!("dotnet_process_cpu_time_seconds_total{{pid=\"{pid}\"");
        while !self.metrics().contains(&needle) {
            assert!(Instant::now() < deadline, "agent did not find {pid} within {timeout:?}: {}", self.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // SIGTERM: a clean stop (sessions stopped, perf maps off), then reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Prometheus {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Prometheus {
    /// Debian's Prometheus server with its own config and storage in a temp dir, on a
    /// loopback port, scraping the agent every second.
    fn start(agent_port: u16) -> Prometheus {
        let port = free_port();
        let dir = clrprobe_tests::scratch_dir(&format!("prometheus-{port}"));
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: clrprobe\n    static_configs:\n      - targets: ['127.0.0.1:{agent_port}']\n"
            ),
        )
        .unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).unwrap())
            .spawn()
            .expect("prometheus (Debian's package, installed by cargo xtask test) runs");
        let p = Prometheus { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while get(port, "/-/ready").is_none_or(|(s, _)| s != 200) {
            assert!(Instant::now() < deadline, "prometheus not ready: {}", std::fs::read_to_string(p.dir.join("log")).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    /// An instant query: label `by` → value of each series.
    fn query(&self, expr: &str, by: &str) -> BTreeMap<String, f64> {
        let enc: String = expr
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() || b"_-.".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect();
        let text = get_text(self.port, &format!("/api/v1/query?query={enc}"));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["status"], "success", "{text}");
        v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["metric"][by].as_str().unwrap_or_default().to_string(), r["value"][1].as_str().unwrap().parse().unwrap()))
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn numbers_after(w: &Running, prefix: &str) -> Vec<u64> {
    let line = w.wait_for_line(prefix, Duration::from_secs(1)).unwrap_or_else(|| panic!("no {prefix} line: {:?}", w.output()));
    line[prefix.len()..].split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect()
}

#[test]
fn prometheus_reads_exact_exception_and_gc_counts_of_processes_started_after_the_agent() {
    require_root();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let agent = Agent::start(&["--all", "--parent", &std::process::id().to_string()]);
    let prom = Prometheus::start(agent.port);
    // Both wait 4 s after "ready" before they throw or collect: the agent must find them first.
    let mut exc = Workload::new("Exceptions", Runtime::Net8).arg(7).arg(37).arg(23).arg(4000).arg(11).start().unwrap();
    let mut gcw = Workload::new("GcWork", Runtime::Net8).arg(7).arg(4000).arg(5).arg(300).start().unwrap();
    for w in [&exc, &gcw] {
        assert!(w.wait_for_line("ready", Duration::from_secs(20)).is_some(), "{:?}", w.output());
    }
    agent.wait_followed(exc.pid, Duration::from_secs(3));
    agent.wait_followed(gcw.pid, Duration::from_secs(3));
    assert!(exc.wait(Duration::from_secs(40)).success(), "{:?}", exc.output());
    assert!(gcw.wait(Duration::from_secs(40)).success(), "{:?}", gcw.output());
    // Two more scrapes after the last event reached the agent.
    std::thread::sleep(Duration::from_secs(4));

    let thrown = numbers_after(&exc, "thrown ");
    let want: BTreeMap<String, f64> = [
        ("System.InvalidOperationException", thrown[0]),
        ("System.ArgumentException", thrown[1]),
        ("System.FormatException", thrown[2]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v as f64))
    .collect();
    assert_eq!(thrown, [37, 23, 11]);
    let got = prom.query(&format!("dotnet_exceptions_total{{pid=\"{}\"}}", exc.pid), "error_type");
    assert_eq!(got, want, "exceptions by type in Prometheus vs thrown; agent log: {}", agent.log_text());

    // GC.CollectionCount(g) counts collections of generation g and older: per condemned
    // generation it is c0 - c1, c1 - c2, c2. No GC ran before the phases (first index 1).
    let first = numbers_after(&gcw, "phase gcs=")[0];
    assert_eq!(first, 1, "a GC ran before the agent could see it: {:?}", gcw.output());
    let c = numbers_after(&gcw, "gc_count=");
    let mut want = BTreeMap::new();
    for (g, n) in [("gen0", c[0] - c[1]), ("gen1", c[1] - c[2]), ("gen2", c[2])] {
        if n > 0 {
            want.insert(g.to_string(), n as f64);
        }
    }
    let got = prom.query(&format!("dotnet_gc_collections_total{{pid=\"{}\"}}", gcw.pid), "gc_heap_generation");
    eprintln!("GC collections: workload {c:?} → {want:?}; Prometheus {got:?}");
    assert_eq!(got, want, "GCs by generation in Prometheus vs GC.CollectionCount");
    let pause = prom.query(&format!("dotnet_gc_pause_time_seconds_total{{pid=\"{}\"}}", gcw.pid), "pid");
    assert!(pause.values().all(|&s| s > 0.0) && !pause.is_empty(), "{pause:?}");
    let own = prom.query("clrprobe_agent_resident_memory_bytes", "job");
    assert!(own.values().all(|&b| b > 1e6), "{own:?}");
}

fn go_pprof_raw(url: &str) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof", "-raw", "-symbolize=none"])
        .arg(url)
        .env("HOME", clrprobe_tests::scratch_dir("go-home"))
        .output()
        .expect("go (Debian golang-go, installed by cargo xtask test) runs");
    assert!(out.status.success(), "go tool pprof {url}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn go_tool_pprof_reads_cpu_allocs_mutex_and_block_endpoints() {
    require_root();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Slices of 1 s every 5 s (the default is every 30 s): the allocations start after the
    // first slice, and the second must come within the test.
    let agent = Agent::start(&["--all", "--parent", &std::process::id().to_string(), "--alloc-period", "5"]);
    let cpu = Workload::new("Cpu", Runtime::Net8).arg(20).start().unwrap();
    let alloc = Workload::new("AllocTypes", Runtime::Net8).arg(20).arg(2500).start().unwrap();
    let cont = Workload::new("Contention", Runtime::Net8).arg(20).arg(30).arg(2).start().unwrap();
    let sleeper = Workload::new("Sleeper", Runtime::Net8).arg(100).arg(2500).start().unwrap();
    for w in [&cpu, &alloc, &cont, &sleeper] {
        assert!(w.wait_for_line("ready", Duration::from_secs(20)).is_some(), "{:?}", w.output());
        agent.wait_followed(w.pid, Duration::from_secs(5));
    }
    let base = format!("http://127.0.0.1:{}/debug/pprof", agent.port);
    let raw = go_pprof_raw(&format!("{base}/profile?seconds=3&pid={}", cpu.pid));
    assert!(raw.contains("samples/count[dflt] cpu/nanoseconds"), "{raw}");
    assert!(raw.contains("Cpu::Spin"), "CPU profile lacks the workload's managed frames:\n{raw}");
    assert!(!raw.contains("AllocTypes::"), "the pid filter keeps one process:\n{raw}");
    // Allocation events come in slices (1 s of every 5 s here): the allocations start
    // 2.5 s after "ready", so within two periods a slice has seen them.
    let deadline = Instant::now() + Duration::from_secs(12);
    let raw = loop {
        std::thread::sleep(Duration::from_secs(1));
        let raw = go_pprof_raw(&format!("{base}/allocs?pid={}", alloc.pid));
        if (raw.contains("Four") && raw.contains("One")) || Instant::now() >= deadline {
            break raw;
        }
    };
    assert!(raw.contains("alloc_objects/count[dflt] alloc_space/bytes"), "{raw}");
    assert!(raw.contains("Four") && raw.contains("One"), "allocs lack the allocated types:\n{raw}");
    let raw = go_pprof_raw(&format!("{base}/mutex?pid={}", cont.pid));
    assert!(raw.contains("contentions/count[dflt] delay/nanoseconds"), "{raw}");
    assert!(raw.contains("Contention::Wait"), "mutex lacks the contended site:\n{raw}");
    let raw = go_pprof_raw(&format!("{base}/block?pid={}", sleeper.pid));
    assert!(raw.contains("contentions/count[dflt] delay/nanoseconds"), "{raw}");
    assert!(raw.contains("futex_wait") || raw.contains("nanosleep"), "block lacks the sleeper's waits:\n{raw}");
    let raw = go_pprof_raw(&format!("{base}/exceptions"));
    assert!(raw.contains("exceptions/count[dflt]"), "{raw}");
}

/// GC CPU (GC threads + user threads inside their own pauses) of `pid` from a `record --json`
/// summary, seconds.
fn record_gc_cpu_s(summary: &Value, pid: u32) -> f64 {
    let events = summary["events"].as_array().expect("events");
    let r = events.iter().find(|e| e[0].as_u64() == Some(u64::from(pid))).unwrap_or_else(|| panic!("{pid} not in {summary}"));
    let cpu = &r[1]["gc"]["cpu"];
    eprintln!("record: pid {pid}: gc cpu {cpu}; paused {} ms in {} GCs", r[1]["gc"]["pause_total_ms"], r[1]["gc"]["collections"]);
    (cpu["gc_threads_ns"].as_f64().unwrap_or(0.0) + cpu["user_thread_gc_ns"].as_f64().unwrap_or(0.0)) / 1e9
}

fn agent_gc_cpu_s(metrics: &str, pid: u32) -> f64 {
    let prefix = format!("clrprobe_gc_cpu_seconds_total{{pid=\"{pid}\"");
    metrics.lines().filter(|l| l.starts_with(&prefix)).map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap()).sum()
}

#[test]
fn gc_cpu_of_record_all_and_of_the_agent_agree_with_record_p_within_10_percent() {
    require_root();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let agent = Agent::start(&["--all", "--parent", &std::process::id().to_string(), "-F", "999"]);
    let dir = clrprobe_tests::scratch_dir("agent-gc");
    let spawn = |args: &[&str], name: &str| {
        Command::new(env!("CARGO_BIN_EXE_clrprobe"))
            .args(["record", "--json", "--quiet", "--cpu", "-F", "999", "--format", "pprof", "-o"])
            .arg(dir.join(name))
            .args(args)
            // GC CPU counts samples, not frames: frame-pointer stacks as the agent's (the
            // stack copies of every process on a busy host make a debug build's drains slow).
            .env("CLRPROBE_UNWIND", "fp")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // `record --all` runs before the workload starts and finds it, as the agent does.
    // Scoped to this test's children: other .NET processes on the host are not attached.
    let me = std::process::id().to_string();
    let all = spawn(&["--all", "--parent", &me, "-d", "14"], "all");
    std::thread::sleep(Duration::from_secs(2));
    // Non-concurrent workstation GC: the GC work runs on the allocating thread, inside its
    // pauses; 4 s after "ready" it starts, so every recorder is attached by then.
    let mut w = Workload::new("GcWork", Runtime::Net8).env("DOTNET_gcConcurrent", "0").arg(5).arg(4000).arg(5).arg(400).start().unwrap();
    let by_pid = spawn(&["-p", &w.pid.to_string()], "p");
    // The runtime's start-up takes seconds on a loaded machine; the GCs start 4 s after it.
    assert!(w.wait_for_line("ready", Duration::from_secs(20)).is_some(), "{:?}", w.output());
    agent.wait_followed(w.pid, Duration::from_secs(3));
    assert!(w.wait(Duration::from_secs(30)).success(), "{:?}", w.output());
    // The agent checks the last samples against the GC pauses a second after the exit.
    std::thread::sleep(Duration::from_secs(4));
    let metrics = agent.metrics();
    let summary = |c: Child| {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let p = record_gc_cpu_s(&summary(by_pid), w.pid);
    let a = record_gc_cpu_s(&summary(all), w.pid);
    let g = agent_gc_cpu_s(&metrics, w.pid);
    let samples = format!("clrprobe_cpu_samples_total{{pid=\"{}\"", w.pid);
    let dropped = format!("clrprobe_dropped_events_total{{pid=\"{}\"", w.pid);
    for l in metrics.lines().filter(|l| l.starts_with("clrprobe_lost_total") || l.starts_with(&samples) || l.starts_with(&dropped)) {
        eprintln!("agent: {l}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("GC CPU: record -p {p:.3} s, record --all {a:.3} s ({:+.1}%), agent {g:.3} s ({:+.1}%)", (a / p - 1.0) * 100.0, (g / p - 1.0) * 100.0);
    assert!(p > 0.2, "too little GC CPU to compare: {p} s");
    assert!((a / p - 1.0).abs() <= 0.10, "record --all {a} s vs -p {p} s");
    assert!((g / p - 1.0).abs() <= 0.10, "agent {g} s vs -p {p} s");
}

/// The value of the series `name{pid="P",…}` in the agent's metrics text.
fn metric(metrics: &str, name: &str, pid: u32) -> Option<f64> {
    let prefix = format!("{name}{{pid=\"{pid}\"");
    metrics.lines().find(|l| l.starts_with(&prefix)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn thread_pool_metrics_equal_the_runtimes_own_counts() {
    require_root();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let agent = Agent::start(&["--all", "--parent", &std::process::id().to_string(), "--counters-interval", "1"]);
    // 2000 work items of 200 µs each, 4 s after "ready"; the counts are printed a second
    // before the end (10 s).
    let mut w = Workload::new("ThreadPoolWork", Runtime::Net8).arg(10).arg(4000).arg(2000).arg(200).start().unwrap();
    assert!(w.wait_for_line("ready", Duration::from_secs(20)).is_some(), "{:?}", w.output());
    agent.wait_followed(w.pid, Duration::from_secs(3));
    assert!(w.wait_for_line("threadpool threads=", Duration::from_secs(30)).is_some(), "{:?}", w.output());
    // The runtime polls its counters every second: one more poll after the counts were read.
    std::thread::sleep(Duration::from_millis(1500));
    let metrics = agent.metrics();
    assert!(w.wait(Duration::from_secs(10)).success(), "{:?}", w.output());
    let ba = numbers_after(&w, "threadpool before=");
    let now = numbers_after(&w, "threadpool threads=");
    let (threads, queue) = (now[0] as f64, now[1] as f64);
    let done = (ba[1] - ba[0]) as f64;
    let got = |name: &str| metric(&metrics, name, w.pid).unwrap_or_else(|| panic!("no {name} for {} in\n{metrics}", w.pid));
    eprintln!(
        "thread pool: runtime threads {threads} queue {queue} completed {done} ({ba:?}); agent {} {} {}",
        got("dotnet_thread_pool_thread_count"),
        got("dotnet_thread_pool_queue_length"),
        got("dotnet_thread_pool_work_item_count_total")
    );
    assert!(done >= 2000.0, "{ba:?}");
    assert_eq!(got("dotnet_thread_pool_thread_count"), threads);
    assert_eq!(got("dotnet_thread_pool_queue_length"), queue);
    assert_eq!(got("dotnet_thread_pool_work_item_count_total"), done);
}

#[test]
fn allocated_bytes_equal_the_runtimes_own_total_while_allocation_events_are_sliced() {
    require_root();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The default slices (1 s of every 30 s): AllocationTick amounts cover a part of the time;
    // the metric must still be the runtime's GC.GetTotalAllocatedBytes() increments.
    let agent = Agent::start(&["--all", "--parent", &std::process::id().to_string(), "--counters-interval", "1"]);
    // Allocates for 6 s, 2.5 s after "ready"; idles 2.5 s after its last reading.
    let mut w = Workload::new("AllocTypes", Runtime::Net8).arg(6).arg(2500).arg(2500).start().unwrap();
    assert!(w.wait_for_line("ready", Duration::from_secs(20)).is_some(), "{:?}", w.output());
    agent.wait_followed(w.pid, Duration::from_secs(2));
    assert!(w.wait_for_line("allocated before=", Duration::from_secs(30)).is_some(), "{:?}", w.output());
    // The runtime polls its counters every second: two polls after the reading.
    std::thread::sleep(Duration::from_millis(2000));
    let metrics = agent.metrics();
    assert!(w.wait(Duration::from_secs(10)).success(), "{:?}", w.output());
    let ba = numbers_after(&w, "allocated before=");
    let runtime = (ba[1] - ba[0]) as f64;
    let got = metric(&metrics, "dotnet_gc_heap_total_allocated_bytes_total", w.pid).unwrap_or_else(|| panic!("no allocated bytes in\n{metrics}"));
    eprintln!("allocated: runtime {runtime} bytes while allocating ({ba:?}); agent {got} ({:+.3} %)", (got / runtime - 1.0) * 100.0);
    assert!(runtime > 50e6, "the workload allocated too little: {ba:?}");
    // The allocation events were sliced: the first slice opens as the process is found, the
    // next 30 s later (the process is followed ~12 s).
    let ratio = metric(&metrics, "clrprobe_alloc_sampled_ratio", w.pid).unwrap_or_else(|| panic!("no sampled ratio in
{metrics}"));
    eprintln!("allocation events collected {:.1} % of the time", ratio * 100.0);
    assert!(ratio > 0.05 && ratio < 0.5, "{ratio}");
    // The agent's total spans the allocating phase and a few idle seconds around it (the
    // counters' own payloads, the prints): never less, at most 2 MB more.
    assert!(got >= runtime && got <= runtime + 2e6, "agent {got} bytes vs the runtime's {runtime}");
}
