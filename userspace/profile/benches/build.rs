//! How fast the builder takes samples: 1 M `add_sample` calls over 5 000 distinct stacks
//! (depth 20..40 over 2 000 frames) and 64 threads, aggregated and timed; then encoding the
//! result as pprof.

use std::hint::black_box;

use clrprobe_profile::{Frame, FrameKind, LabelSet, LabelSetId, ProfileBuilder, SampleType, StackId, kinds, units};
use criterion::{Criterion, criterion_group, criterion_main};

const SAMPLES: usize = 1_000_000;

struct Setup {
    builder: ProfileBuilder,
    stacks: Vec<StackId>,
    labels: Vec<LabelSetId>,
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn setup() -> Setup {
    let mut b = ProfileBuilder::new(vec![
        SampleType::new(kinds::CPU, units::SAMPLES),
        SampleType::new(kinds::ALLOC_BYTES, units::BYTES),
    ]);
    let frames: Vec<_> = (0..2000)
        .map(|i| {
            let kind = [FrameKind::Jit, FrameKind::Native, FrameKind::Kernel, FrameKind::ReadyToRun][i % 4];
            b.intern_frame(Frame::new(format!("Namespace.Type{}.Method{i}()", i / 10), format!("mod{}.dll", i % 17), kind))
                .unwrap()
        })
        .collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let stacks = (0..5000)
        .map(|_| {
            let depth = 20 + (xorshift(&mut x) % 21) as usize;
            let s: Vec<_> = (0..depth).map(|_| frames[(xorshift(&mut x) % 2000) as usize]).collect();
            b.intern_stack(&s).unwrap()
        })
        .collect();
    let labels = (0..64).map(|t| b.intern_labels(LabelSet::thread(4242, 4242 + t)).unwrap()).collect();
    Setup { builder: b, stacks, labels }
}

/// The (stack, labels) sequence the benchmark feeds: skewed like a real profile (most samples
/// in a few hot stacks).
fn sequence(s: &Setup) -> Vec<(StackId, LabelSetId)> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..SAMPLES)
        .map(|_| {
            let r = xorshift(&mut x);
            let stack = if r.is_multiple_of(4) { (r >> 8) % 5000 } else { (r >> 8) % 50 };
            (s.stacks[stack as usize], s.labels[((r >> 32) % 64) as usize])
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let base = setup();
    let seq = sequence(&base);
    let mut g = c.benchmark_group("build");
    g.sample_size(10);
    g.bench_function("add_sample 1M aggregated", |bench| {
        bench.iter_batched(
            || ProfileBuilder::from_profile(setup().builder.build()),
            |mut b| {
                for &(stack, labels) in &seq {
                    b.add_sample(stack, &[1, 64], labels).unwrap();
                }
                black_box(b.build())
            },
            criterion::BatchSize::LargeInput,
        )
    });
    g.bench_function("add_timed_sample 1M", |bench| {
        bench.iter_batched(
            || ProfileBuilder::from_profile(setup().builder.build()),
            |mut b| {
                for (i, &(stack, labels)) in seq.iter().enumerate() {
                    b.add_timed_sample(stack, &[1, 64], labels, i as u64 * 1000).unwrap();
                }
                black_box(b.build())
            },
            criterion::BatchSize::LargeInput,
        )
    });
    let mut b = setup().builder;
    for &(stack, labels) in &seq {
        b.add_sample(stack, &[1, 64], labels).unwrap();
    }
    let profile = b.build();
    eprintln!("aggregated profile: {} samples from {SAMPLES} adds", profile.sample_count());
    g.bench_function("pprof encode+gzip (aggregated 1M)", |bench| {
        bench.iter(|| {
            let mut out = Vec::new();
            clrprobe_profile::pprof::to_writer(&profile, &mut out).unwrap();
            black_box(out.len())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
