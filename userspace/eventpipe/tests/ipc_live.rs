//! Live tests of the diagnostics IPC client against real .NET 8.0.4 and .NET Core 3.1.23
//! runtimes (clrprobe-tests test bed). They never skip: a missing runtime is a failure.
use std::{
    io::Read,
    sync::{Mutex, mpsc},
    thread,
    time::{Duration, Instant},
};

use clrprobe_eventpipe::ipc::{
    Client, CollectTracingVersion, Endpoint, IpcError, PerfMapType, ServerError, SessionConfig, find_socket,
    parse_providers,
};
use clrprobe_tests::{Running, Runtime, TestbedError, Workload};

/// Serialises workload start-up: the test bed rewrites `<name>.runtimeconfig.json` on every
/// start (non-atomically), which a host starting concurrently can read half-written.
static STARTING: Mutex<()> = Mutex::new(());

fn start(w: Workload) -> Result<Running, TestbedError> {
    let _g = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    w.start()
}

fn client(w: &Running) -> Client {
    Client::for_pid(w.pid).unwrap_or_else(|e| panic!("no diagnostics endpoint for {} ({:?}): {e}", w.pid, w.runtime))
}

fn idle(runtime: Runtime) -> Running {
    // Exceptions with zero throws just waits out its duration.
    start(Workload::new("Exceptions", runtime).arg(60).arg(0).arg(0)).expect("start workload")
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

fn utf16(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

#[test]
fn process_info_and_info2_on_net8() {
    let w = idle(Runtime::Net8);
    let c = client(&w);
    let info = c.process_info().expect("ProcessInfo");
    assert_eq!(info.pid, u64::from(w.pid));
    assert!(info.command_line.contains("Exceptions.dll"), "{info:?}");
    assert_eq!(info.os, "Linux");
    assert_eq!(info.arch.to_ascii_lowercase(), "x64");
    let info2 = c.process_info2().expect("ProcessInfo2");
    assert_eq!(info2.info, info, "same process, same cookie");
    assert_eq!(info2.clr_product_version, "8.0.4");
    // The assembly name (mcs names it after the output file, Exceptions.dll).
    assert_eq!(info2.managed_entrypoint_assembly, "Exceptions");
    let d = c.process_details().expect("details");
    assert_eq!(d.clr_product_version.as_deref(), Some(info2.clr_product_version.as_str()));
    eprintln!("net8: {info2:?} cookie {}", info.runtime_cookie_string());
}

#[test]
fn core31_has_no_process_commands_and_they_map_to_unknown_command() {
    // Measured: .NET Core 3.1.23 answers UNKNOWN_COMMAND (0x80131385) to the whole Process
    // command set (ProcessInfo arrived in .NET 5, ProcessInfo2 in .NET 6, perf maps in .NET 8).
    let w = idle(Runtime::Core31);
    let c = client(&w);
    let err = c.process_info().expect_err("3.1 has no ProcessInfo");
    assert!(matches!(err, IpcError::Server(ServerError::UnknownCommand)), "{err:?}");
    assert_eq!(err.to_string(), "the runtime answered with UNKNOWN_COMMAND (0x80131385)");
    let err = c.process_info2().expect_err("3.1 has no ProcessInfo2");
    assert!(matches!(err, IpcError::Server(ServerError::UnknownCommand)), "{err:?}");
    // The fallback path tries ProcessInfo2, then ProcessInfo, and reports the named error.
    let err = c.process_details().expect_err("no process command on 3.1");
    assert!(err.is_unknown_command(), "{err:?}");
    let err = c.enable_perf_map(PerfMapType::PerfMap).expect_err("3.1 has no EnablePerfMap");
    assert_eq!(err.server_error(), Some(ServerError::UnknownCommand), "{err:?}");
    let err = c.disable_perf_map().expect_err("3.1 has no DisablePerfMap");
    assert_eq!(err.server_error(), Some(ServerError::UnknownCommand), "{err:?}");
    // The server is still usable after the errors (one command per connection).
    let s = c.start_session(&SessionConfig::with_providers(parse_providers("gc").unwrap())).expect("session after errors");
    assert_eq!(s.version(), CollectTracingVersion::CollectTracing2);
}

/// Streams exception events, stops from another thread, checks the NetTrace framing and payloads.
fn exception_session(runtime: Runtime, expect_version: CollectTracingVersion) {
    // 100 InvalidOperationException + 50 ArgumentException, thrown 3 s after "ready".
    let w = start(Workload::new("Exceptions", runtime).arg(30).arg(100).arg(50).arg(3000)).expect("start");
    let c = client(&w);
    let config = SessionConfig { circular_buffer_mb: 64, ..SessionConfig::with_providers(parse_providers("exception:verbose").unwrap()) };
    let mut session = c.start_session(&config).expect("start session");
    assert_eq!(session.version(), expect_version, "{runtime:?}");
    let stop = session.stop_handle();
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        let mut bytes = Vec::new();
        let r = session.read_to_end(&mut bytes);
        tx.send(()).ok();
        (r.map_err(|e| e.to_string()), bytes)
    });
    assert!(w.wait_for_line("thrown", Duration::from_secs(20)).is_some(), "workload did not throw: {:?}", w.output());
    thread::sleep(Duration::from_millis(1500)); // let the session flush
    let t = Instant::now();
    stop.stop().expect("StopTracing");
    rx.recv_timeout(Duration::from_secs(20)).expect("stream did not end after StopTracing");
    let (r, bytes) = reader.join().expect("reader thread");
    r.expect("reading the stream");
    eprintln!("{runtime:?}: {} bytes via {:?}, stream ended {:?} after stop", bytes.len(), expect_version, t.elapsed());
    assert!(bytes.starts_with(b"Nettrace\x14\x00\x00\x00!FastSerialization.1"), "{:02x?}", &bytes[..bytes.len().min(32)]);
    assert_eq!(bytes.last(), Some(&0x01), "stream must end with the NullReference tag");
    let invalid = count(&bytes, &utf16("System.InvalidOperationException"));
    let argument = count(&bytes, &utf16("System.ArgumentException"));
    eprintln!("{runtime:?}: InvalidOperationException x{invalid}, ArgumentException x{argument}");
    assert!(invalid >= 100, "expected ≥100 ExceptionThrown for InvalidOperationException, saw {invalid}");
    assert!(argument >= 50, "expected ≥50 ExceptionThrown for ArgumentException, saw {argument}");
    assert!(stop.is_stopped());
}

#[test]
fn exception_session_on_net8_falls_back_to_collect_tracing2() {
    exception_session(Runtime::Net8, CollectTracingVersion::CollectTracing2);
}

#[test]
fn exception_session_on_core31_falls_back_to_collect_tracing2() {
    exception_session(Runtime::Core31, CollectTracingVersion::CollectTracing2);
}

#[test]
fn core31_rejects_newer_collect_tracing_and_cannot_disable_stackwalk() {
    let w = idle(Runtime::Core31);
    let c = client(&w);
    let mut config = SessionConfig::with_providers(parse_providers("gc").unwrap());
    for v in [CollectTracingVersion::CollectTracing3, CollectTracingVersion::CollectTracing4] {
        let err = c.start_session_with(&config, &[v]).expect_err("3.1 has only CollectTracing/CollectTracing2");
        assert!(matches!(&err, IpcError::NoCollectTracingVersion { tried } if tried == &[v]), "{err:?}");
    }
    config.request_stackwalk = false;
    let err = c.start_session(&config).expect_err("3.1 cannot turn stack walks off");
    match err {
        IpcError::NoCollectTracingVersion { tried } => {
            assert_eq!(tried, [CollectTracingVersion::CollectTracing4, CollectTracingVersion::CollectTracing3])
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn net8_supports_collect_tracing_1_and_2_only() {
    // Measured: .NET 8.0.4 answers UNKNOWN_COMMAND to CollectTracing3/4/5 (0x0204-0x0206).
    let w = idle(Runtime::Net8);
    let c = client(&w);
    let config = SessionConfig { request_rundown: true, ..SessionConfig::with_providers(parse_providers("gc").unwrap()) };
    for v in [CollectTracingVersion::CollectTracing, CollectTracingVersion::CollectTracing2] {
        let s = c.start_session_with(&config, &[v]).unwrap_or_else(|e| panic!("{v:?}: {e}"));
        assert_eq!(s.version(), v);
        let mut rest = Vec::new();
        let n = s.finish(&mut rest).expect("finish");
        assert!(rest.starts_with(b"Nettrace"), "{v:?}: {n} bytes");
        assert_eq!(rest.last(), Some(&0x01), "{v:?}: stream end tag");
        // Rundown was requested: the rundown provider's method events carry UTF-16 method names.
        assert!(count(&rest, &utf16("Main")) > 0, "{v:?}: no rundown method names in {n} bytes");
    }
    // Without rundown (CollectTracing2's bool), no method names are written.
    let quiet = SessionConfig { request_rundown: false, ..config.clone() };
    let s = c.start_session_with(&quiet, &[CollectTracingVersion::CollectTracing2]).expect("no-rundown session");
    let mut rest = Vec::new();
    s.finish(&mut rest).expect("finish");
    assert_eq!(count(&rest, &utf16("Main")), 0, "rundown written although not requested ({} bytes)", rest.len());
    for v in [CollectTracingVersion::CollectTracing3, CollectTracingVersion::CollectTracing4, CollectTracingVersion::CollectTracing5] {
        let err = c.start_session_with(&config, &[v]).expect_err("not in 8.0.4");
        assert!(matches!(&err, IpcError::NoCollectTracingVersion { tried } if tried == &[v]), "{v:?}: {err:?}");
    }
    let mut nostack = config.clone();
    nostack.request_stackwalk = false;
    let err = c.start_session(&nostack).expect_err("8.0.4 cannot turn stack walks off");
    assert!(matches!(err, IpcError::NoCollectTracingVersion { .. }), "{err:?}");
}

#[test]
fn dropped_sessions_are_stopped_so_new_ones_start() {
    // The runtime allows at most 64 sessions: 70 start/drop cycles only succeed if Drop stops them.
    let w = idle(Runtime::Net8);
    let c = client(&w);
    let config = SessionConfig { request_rundown: false, ..SessionConfig::with_providers(parse_providers("gc+exception").unwrap()) };
    let t = Instant::now();
    let mut last_id = 0;
    for i in 0..70 {
        let s = c.start_session(&config).unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        last_id = s.id();
        drop(s);
    }
    eprintln!("70 start/drop cycles in {:?}", t.elapsed());
    // The last dropped session is gone: a new session streams, and stopping it works.
    let mut s = c.start_session(&config).expect("new session after drops");
    assert_ne!(s.id(), 0);
    let mut head = [0u8; 8];
    s.read_exact(&mut head).expect("stream bytes");
    assert_eq!(&head, b"Nettrace");
    let mut rest = Vec::new();
    s.finish(&mut rest).expect("finish");
    assert_eq!(rest.last(), Some(&0x01));
    let _ = last_id;
}

fn read_map(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn wait_for_map(path: &std::path::Path, needle: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let text = read_map(path);
        if text.contains(needle) || Instant::now() > deadline {
            return text;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn perf_map_enable_and_disable_on_net8() {
    // IpcJitStream JITs a new DynamicMethod "IpcJitStream_<n>" every 50 ms.
    let w = start(Workload::new("IpcJitStream", Runtime::Net8).arg(60).arg(50)).expect("start IpcJitStream");
    let c = client(&w);
    let map = std::path::PathBuf::from(format!("/tmp/perf-{}.map", w.pid));
    let info = std::path::PathBuf::from(format!("/tmp/perfinfo-{}.map", w.pid));
    assert!(!map.exists(), "{} exists before EnablePerfMap", map.display());
    thread::sleep(Duration::from_millis(300));

    c.enable_perf_map(PerfMapType::PerfMap).expect("EnablePerfMap");
    let text = wait_for_map(&map, "IpcJitStream::Main", Duration::from_secs(10));
    // Methods jitted before the enable are written too (Main has been running since start).
    assert!(text.contains("IpcJitStream::Main"), "{} lacks already-jitted Main:\n{text}", map.display());
    let line = w.wait_for_line("jitted ", Duration::from_secs(5)).expect("jitting");
    let n: u32 = line["jitted ".len()..].trim().parse().expect("jitted <n>");
    let later = format!("IpcJitStream_{}", n + 5);
    let text = wait_for_map(&map, &later, Duration::from_secs(10));
    assert!(text.contains(&later), "new method {later} not in the perf map");
    for line in text.lines() {
        let mut f = line.splitn(3, ' ');
        let (a, s) = (f.next().unwrap_or(""), f.next().unwrap_or(""));
        let hex = |t: &str| u64::from_str_radix(t.trim_start_matches("0x"), 16).is_ok();
        assert!(hex(a) && hex(s) && f.next().is_some_and(|n| !n.is_empty()), "bad perf map line {line:?}");
    }
    eprintln!("perf map while enabled: {} lines, perfinfo exists: {}", text.lines().count(), info.exists());

    c.disable_perf_map().expect("DisablePerfMap");
    let at_disable = read_map(&map);
    thread::sleep(Duration::from_millis(1500)); // ~30 more methods get jitted meanwhile
    let after = read_map(&map);
    let dyn_lines = |t: &str| t.lines().filter(|l| l.contains("IpcJitStream_")).count();
    eprintln!(
        "perf map after disable: exists={} lines {} -> {} (dynamic methods {} -> {})",
        map.exists(),
        at_disable.lines().count(),
        after.lines().count(),
        dyn_lines(&at_disable),
        dyn_lines(&after)
    );
    // Measured on 8.0.4: the file is kept (not deleted or truncated) and stops growing.
    assert!(map.exists(), "DisablePerfMap removed the file");
    assert_eq!(dyn_lines(&after), dyn_lines(&at_disable), "perf map still grows after DisablePerfMap");
    assert!(after.starts_with(&at_disable[..at_disable.len().min(after.len())]), "file was rewritten");

    // Re-enabling resumes writing new methods.
    c.enable_perf_map(PerfMapType::PerfMap).expect("EnablePerfMap again");
    let line = w.wait_for_line("jitted ", Duration::from_secs(5)).expect("jitting");
    let _ = line;
    let n = w.output().iter().filter_map(|l| l.strip_prefix("jitted ")?.trim().parse::<u32>().ok()).max().unwrap_or(0);
    let later = format!("IpcJitStream_{}", n + 3);
    let text = wait_for_map(&map, &later, Duration::from_secs(10));
    assert!(text.contains(&later), "{later} not written after re-enable");
    c.disable_perf_map().expect("DisablePerfMap again");
    let _ = std::fs::remove_file(&map);
    let _ = std::fs::remove_file(&info);
}

#[test]
fn discovery_finds_the_socket_and_reports_missing_ones() {
    let w = idle(Runtime::Net8);
    let ep = find_socket(w.pid).expect("socket");
    assert!(matches!(ep, Endpoint::UnixSocket(_)));
    let name = ep.path().file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", w.pid)).expect("stat");
    let start_time = stat[stat.rfind(')').expect(")") + 1..].split_whitespace().nth(19).expect("starttime").to_string();
    assert_eq!(name, format!("dotnet-diagnostic-{}-{start_time}-socket", w.pid));

    // TMPDIR of the target is honoured.
    let dir = clrprobe_tests::scratch_dir("ipc-tmpdir");
    let w2 = start(Workload::new("Exceptions", Runtime::Net8).arg(60).arg(0).arg(0).env("TMPDIR", dir.to_str().expect("utf8"))).expect("start");
    let ep = find_socket(w2.pid).expect("socket in TMPDIR");
    assert!(ep.path().starts_with(&dir) || ep.path().starts_with(format!("/proc/{}/root", w2.pid)), "{ep:?}");
    assert_eq!(Client::new(ep).process_info().expect("ProcessInfo via TMPDIR socket").pid, u64::from(w2.pid));
    drop(w2);
    let _ = std::fs::remove_dir_all(&dir);

    // Diagnostics disabled: no socket, typed error.
    let w3 = start(Workload::new("Exceptions", Runtime::Net8).arg(60).arg(0).arg(0).env("DOTNET_EnableDiagnostics", "0")).expect("start");
    let err = find_socket(w3.pid).expect_err("no socket with DOTNET_EnableDiagnostics=0");
    assert!(matches!(err, IpcError::NoSocket { pid, .. } if pid == w3.pid), "{err:?}");
    let mut w3 = w3;
    let pid = w3.pid;
    w3.kill();
    drop(w3);
    assert!(matches!(find_socket(pid), Err(IpcError::NoSuchProcess { .. })), "dead pid");
}

/// Provider arguments reach the runtime: System.Runtime counters only flow when the
/// `EventCounterIntervalSec=1` argument is decoded, and several providers can be combined.
fn counters_via_arguments(runtime: Runtime) {
    let w = idle(runtime);
    let c = client(&w);
    let providers = parse_providers("System.Runtime:0:4:EventCounterIntervalSec=1,Microsoft-DotNETCore-SampleProfiler,gc+exception:verbose").unwrap();
    assert_eq!(providers.len(), 3);
    let config = SessionConfig { request_rundown: false, ..SessionConfig::with_providers(providers) };
    let mut s = c.start_session(&config).expect("session");
    let stop = s.stop_handle();
    let reader = thread::spawn(move || {
        let mut bytes = Vec::new();
        let r = s.read_to_end(&mut bytes).map(|_| ()).map_err(|e| e.to_string());
        (r, bytes)
    });
    thread::sleep(Duration::from_millis(3500));
    stop.stop().expect("stop");
    let (r, bytes) = reader.join().expect("reader");
    r.expect("read");
    let cpu = count(&bytes, &utf16("cpu-usage"));
    let sampler = count(&bytes, &utf16("Microsoft-DotNETCore-SampleProfiler"));
    eprintln!("{runtime:?}: {} bytes, cpu-usage x{cpu}, SampleProfiler metadata x{sampler}", bytes.len());
    assert!(cpu >= 2, "expected ≥2 cpu-usage counter payloads in 3.5 s at 1 s interval, saw {cpu}");
    assert!(sampler >= 1, "SampleProfiler provider did not appear in the metadata");
}

#[test]
fn provider_arguments_and_multiple_providers_on_net8() {
    counters_via_arguments(Runtime::Net8);
}

#[test]
fn provider_arguments_and_multiple_providers_on_core31() {
    counters_via_arguments(Runtime::Core31);
}

#[test]
fn session_of_a_runtime_that_exits_ends_and_drops_promptly() {
    let mut w = start(Workload::new("Exceptions", Runtime::Net8).arg(30).arg(0).arg(0)).expect("start");
    let c = client(&w);
    let mut s = c.start_session(&SessionConfig::with_providers(parse_providers("gc").unwrap())).expect("session");
    let stop = s.stop_handle();
    w.kill();
    let t = Instant::now();
    let mut bytes = Vec::new();
    let _ = s.read_to_end(&mut bytes); // EOF or a reset: the peer is gone either way
    drop(s);
    assert!(t.elapsed() < Duration::from_secs(3), "ending a dead session took {:?}", t.elapsed());
    // Drop already tried to stop: the handle reports it and does not reconnect.
    assert!(stop.is_stopped());
    stop.stop().expect("idempotent");
    let err = c.process_info().expect_err("runtime is gone");
    assert!(matches!(err, IpcError::Connect { .. }), "{err:?}");
}

#[test]
fn jitdump_perf_map_type_on_net8() {
    let w = start(Workload::new("IpcJitStream", Runtime::Net8).arg(60).arg(50)).expect("start IpcJitStream");
    let c = client(&w);
    let dump = std::path::PathBuf::from(format!("/tmp/jit-{}.dump", w.pid));
    let map = std::path::PathBuf::from(format!("/tmp/perf-{}.map", w.pid));
    c.enable_perf_map(PerfMapType::JitDump).expect("EnablePerfMap(JitDump)");
    let size = || std::fs::metadata(&dump).map(|m| m.len()).unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while size() < 4096 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(100));
    }
    let bytes = std::fs::read(&dump).unwrap_or_default();
    assert!(bytes.len() >= 40, "{} not written ({} bytes)", dump.display(), bytes.len());
    assert_eq!(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]), 0x4A69_5444, "jitdump magic 'JiTD'");
    assert!(!map.exists(), "JitDump mode also wrote {}", map.display());
    let s1 = size();
    thread::sleep(Duration::from_millis(600));
    assert!(size() > s1, "jitdump does not grow while enabled ({s1} bytes)");
    c.disable_perf_map().expect("DisablePerfMap");
    thread::sleep(Duration::from_millis(200));
    let at_disable = size();
    thread::sleep(Duration::from_millis(1500));
    eprintln!("jitdump: {} bytes at disable, {} bytes 1.5 s later", at_disable, size());
    assert_eq!(size(), at_disable, "jitdump still grows after DisablePerfMap");
    let _ = std::fs::remove_file(&dump);
}
