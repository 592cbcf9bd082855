//! The reader on live EventPipe sessions of real runtimes (clrprobe-tests test bed): it parses
//! the socket while the session streams, counts exactly what the workload threw, and reports a
//! session cut by a killed process as Truncated. Never skips: a missing runtime is a failure.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use clrprobe_eventpipe::ipc::{Client, SessionConfig, parse_providers};
use clrprobe_eventpipe::nettrace::{NetTraceReader, StreamStatus};
use clrprobe_tests::{Running, Runtime, TestbedError, Workload};

const RT: &str = "Microsoft-Windows-DotNETRuntime";
const EXCEPTION_THROWN: u32 = 80;

/// The test bed rewrites runtimeconfig files on start: one start at a time.
static STARTING: Mutex<()> = Mutex::new(());

fn start(w: Workload) -> Result<Running, TestbedError> {
    let _g = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    w.start()
}

fn utf16z(p: &[u8]) -> String {
    let units: Vec<u16> = p.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).take_while(|&u| u != 0).collect();
    String::from_utf16_lossy(&units)
}

#[derive(Debug, Default)]
struct Seen {
    invalid: usize,
    argument: usize,
    with_stack: usize,
    status: Option<StreamStatus>,
    dropped: u64,
    pid: Option<u64>,
    pointer_size: u32,
    out_of_order: usize,
}

/// Reads a live session on this thread's caller; `progress` counts exceptions as they arrive.
fn read_session<R: std::io::Read>(stream: R, progress: &AtomicUsize) -> Seen {
    let mut r = NetTraceReader::new(stream).expect("trace header from the live session");
    let mut seen = Seen { pid: r.trace_info().process_id, pointer_size: r.trace_info().pointer_size, ..Seen::default() };
    let mut last = i64::MIN;
    while let Some(e) = r.next_event().expect("live event") {
        if e.timestamp() < last {
            seen.out_of_order += 1;
        }
        last = e.timestamp();
        let m = e.metadata();
        if m.provider == RT && m.event_id == EXCEPTION_THROWN {
            match utf16z(e.payload()).as_str() {
                "System.InvalidOperationException" => seen.invalid += 1,
                "System.ArgumentException" => seen.argument += 1,
                other => panic!("unexpected exception type {other:?}"),
            }
            if !e.stack().is_empty() {
                seen.with_stack += 1;
            }
            progress.fetch_add(1, Ordering::SeqCst);
        }
    }
    seen.status = Some(r.status());
    seen.dropped = r.stats().dropped_events;
    seen
}

fn exceptions_streamed(runtime: Runtime) {
    // 100 InvalidOperationException + 50 ArgumentException, thrown 3 s after "ready".
    let w = start(Workload::new("Exceptions", runtime).arg(30).arg(100).arg(50).arg(3000)).expect("start workload");
    let c = Client::for_pid(w.pid).expect("diagnostics endpoint");
    // With the sample profiler on, batches keep coming, and each batch's first event carries
    // the IsSorted flag that lets the reader release what came before. (An exceptions-only
    // session has no later batch: the tail of a burst waits for the sequence point at stop.)
    let providers = parse_providers("exception:verbose,Microsoft-DotNETCore-SampleProfiler").expect("providers");
    let config = SessionConfig { circular_buffer_mb: 64, ..SessionConfig::with_providers(providers) };
    let session = c.start_session(&config).expect("start session");
    let stop = session.stop_handle();
    let progress = Arc::new(AtomicUsize::new(0));
    let p = progress.clone();
    let reader = thread::spawn(move || read_session(session, &p));
    assert!(w.wait_for_line("thrown", Duration::from_secs(20)).is_some(), "workload did not throw: {:?}", w.output());
    // Streaming: the events arrive while the session runs, long before it is stopped.
    let t = Instant::now();
    while progress.load(Ordering::SeqCst) < 150 && t.elapsed() < Duration::from_secs(5) {
        thread::sleep(Duration::from_millis(20));
    }
    let before_stop = progress.load(Ordering::SeqCst);
    eprintln!("{runtime:?}: {before_stop} exceptions parsed {:?} after the workload finished throwing", t.elapsed());
    stop.stop().expect("StopTracing");
    let seen = reader.join().expect("reader thread");
    eprintln!("{runtime:?}: {seen:?}");
    assert_eq!(before_stop, 150, "exceptions must be parsed while the session streams, before StopTracing");
    assert_eq!(seen.status, Some(StreamStatus::Complete));
    assert_eq!((seen.invalid, seen.argument), (100, 50));
    assert_eq!(seen.with_stack, 150, "every ExceptionThrown carries its stack");
    assert_eq!(seen.dropped, 0);
    assert_eq!(seen.out_of_order, 0);
    assert_eq!(seen.pid, Some(u64::from(w.pid)));
    assert_eq!(seen.pointer_size, 8);
}

#[test]
fn live_exceptions_net8() {
    exceptions_streamed(Runtime::Net8);
}

#[test]
fn live_exceptions_core31() {
    exceptions_streamed(Runtime::Core31);
}

#[test]
fn killed_process_gives_a_truncated_stream() {
    // Throws 200000 exceptions over 30 s: a steady stream to cut.
    let mut w = start(Workload::new("Exceptions", Runtime::Net8).arg(30).arg(200_000).arg(0).arg(1000)).expect("start");
    let c = Client::for_pid(w.pid).expect("diagnostics endpoint");
    let config = SessionConfig::with_providers(parse_providers("exception:verbose").expect("providers"));
    let session = c.start_session(&config).expect("start session");
    let progress = Arc::new(AtomicUsize::new(0));
    let p = progress.clone();
    let reader = thread::spawn(move || read_session(session, &p));
    let t = Instant::now();
    while progress.load(Ordering::SeqCst) < 100 && t.elapsed() < Duration::from_secs(20) {
        thread::sleep(Duration::from_millis(10));
    }
    assert!(progress.load(Ordering::SeqCst) >= 100, "no exceptions streamed: {:?}", w.output());
    w.kill();
    let seen = reader.join().expect("reader thread");
    eprintln!("killed: {seen:?}");
    assert_eq!(seen.status, Some(StreamStatus::Truncated));
    assert!(seen.invalid >= 100);
    assert_eq!(seen.argument, 0);
}
