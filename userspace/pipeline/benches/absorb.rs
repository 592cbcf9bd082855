//! The aggregator's CPU per runtime event: the records of a `record --save-raw` directory
//! (`CLRPROBE_BENCH_RAW=DIR`; without it the bench says so and does nothing) read once, then
//! absorbed into a fresh [`Aggregator`] again and again, as `report --replay` configures it and
//! as a recording does (`keep_times`). Prints the median ns per record of each over
//! `CLRPROBE_BENCH_ROUNDS` rounds (default 15). The records are cloned before each round (not
//! timed) and dropped as they are absorbed (as the live aggregator drops them).
use std::{path::PathBuf, time::Instant};

use clrprobe_pipeline::stream::{Aggregator, AggregatorConfig, Record, Replay};

fn main() {
    let Some(dir) = std::env::var_os("CLRPROBE_BENCH_RAW").map(PathBuf::from) else {
        eprintln!("absorb: set CLRPROBE_BENCH_RAW to a `record --save-raw` directory; nothing measured");
        return;
    };
    let rounds: usize = std::env::var("CLRPROBE_BENCH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(15);
    let replay = Replay::open(&dir).expect("a saved directory");
    let config = replay.aggregator_config();
    let mut records = Vec::new();
    replay.run_into(&mut |r| records.push(r), &mut |_| {}).expect("replayed");
    let events = records.iter().filter(|r| matches!(r, Record::Clr(_))).count();
    let recording = AggregatorConfig { keep_times: true, events_end_ns: None, ..config.clone() };
    for (name, cfg) in [("replay", config), ("recording", recording)] {
        let mut ns = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let batch = records.clone();
            let mut agg = Aggregator::new(cfg.clone());
            let t = Instant::now();
            for r in batch {
                agg.absorb(r);
            }
            ns.push(t.elapsed().as_nanos() as f64 / records.len() as f64);
            std::hint::black_box(&agg);
        }
        ns.sort_by(f64::total_cmp);
        println!("absorb/{name}: {} records ({events} runtime events): median {:.1} ns per record (min {:.1}, max {:.1}, {rounds} rounds)", records.len(), ns[ns.len() / 2], ns[0], ns[ns.len() - 1]);
    }
}
