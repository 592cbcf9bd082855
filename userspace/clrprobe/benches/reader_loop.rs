//! The EventPipe reader thread's CPU per runtime event, without the socket: each
//! `PID.nettrace` of a `record --save-raw` directory (`CLRPROBE_BENCH_RAW=DIR`; without it the
//! bench says so and does nothing) read by the live reader loop (the stream read through
//! `io::Read`, as a session's is), its batches taken off the channel by another thread that
//! reads each record's bytes and hands the batch back as the aggregator does. Prints the
//! median of the reader thread's CPU time (ns) per event over `CLRPROBE_BENCH_ROUNDS` rounds
//! (default 9).
#[cfg(target_os = "linux")]
fn main() {
    use std::{path::PathBuf, time::Duration};

    use clrprobe::pipeline::sources::{read_stream, received, recycle};
    use clrprobe_pipeline::stream::Record;

    let Some(dir) = std::env::var_os("CLRPROBE_BENCH_RAW").map(PathBuf::from) else {
        eprintln!("reader_loop: set CLRPROBE_BENCH_RAW to a `record --save-raw` directory; nothing measured");
        return;
    };
    let rounds: usize = std::env::var("CLRPROBE_BENCH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(9);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "nettrace"))
        .collect();
    files.sort();
    let thread_ns = || {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes the timespec it is given.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
    };
    for f in files {
        let bytes = std::fs::read(&f).expect("the stream");
        let mut per_event = Vec::with_capacity(rounds);
        let mut events = 0;
        for _ in 0..rounds {
            let (tx, rx) = crossbeam_channel::bounded::<Record>(1024);
            let consumer = std::thread::spawn(move || {
                let mut n = 0usize;
                let mut sum = 0u64;
                while let Ok(r) = rx.recv_timeout(Duration::from_secs(30)) {
                    received(&r);
                    if let Record::ClrBatch(v) = r {
                        n += v.len();
                        for c in &v {
                            sum = sum.wrapping_add(c.time_ns ^ c.payload.len() as u64 ^ c.stack.len() as u64);
                        }
                        recycle(v);
                    }
                }
                std::hint::black_box(sum);
                n
            });
            let t0 = thread_ns();
            read_stream(1, &bytes[..], &tx);
            let cpu = thread_ns() - t0;
            drop(tx);
            events = consumer.join().expect("consumer");
            per_event.push(cpu / events.max(1) as f64);
        }
        per_event.sort_by(f64::total_cmp);
        println!(
            "reader_loop/{}: {} bytes, {events} events: median {:.1} ns per event (min {:.1}, max {:.1}, {rounds} rounds)",
            f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            bytes.len(),
            per_event[per_event.len() / 2],
            per_event[0],
            per_event[per_event.len() - 1]
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {}
