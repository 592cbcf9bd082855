//! Random and mutated payloads never panic: every decoder returns a value or a typed error.

use clr_events::ids::{rundown, runtime, sample_profiler};
use clr_events::providers::{RUNDOWN, RUNTIME, SAMPLE_PROFILER};
use clr_events::schema::{EventSchema, Field, FieldType, TypeCode};
use clr_events::{DecodeError, RawEvent, decode, decode_fields};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        // Mostly zeros and small values so strings terminate sometimes and counts stay small.
        (0..len)
            .map(|_| match self.below(4) {
                0 => 0,
                1 => self.below(4) as u8,
                _ => self.next() as u8,
            })
            .collect()
    }
}

fn known_ids() -> Vec<(&'static str, u16)> {
    let mut v: Vec<(&'static str, u16)> = [
        runtime::GC_START,
        runtime::GC_END,
        runtime::GC_RESTART_EE_END,
        runtime::GC_HEAP_STATS,
        runtime::GC_RESTART_EE_BEGIN,
        runtime::GC_SUSPEND_EE_END,
        runtime::GC_SUSPEND_EE_BEGIN,
        runtime::GC_ALLOCATION_TICK,
        runtime::GC_SAMPLED_OBJECT_ALLOCATION_HIGH,
        runtime::GC_SAMPLED_OBJECT_ALLOCATION_LOW,
        runtime::GC_TRIGGERED,
        runtime::EXCEPTION_THROWN,
        runtime::CONTENTION_START,
        runtime::THREAD_CREATED,
        runtime::CONTENTION_LOCK_CREATED,
        runtime::CONTENTION_STOP,
        runtime::METHOD_LOAD,
        runtime::METHOD_UNLOAD,
        runtime::METHOD_LOAD_VERBOSE,
        runtime::METHOD_UNLOAD_VERBOSE,
        runtime::MODULE_LOAD,
        runtime::MODULE_UNLOAD,
        runtime::GC_PER_HEAP_HISTORY,
        runtime::GC_GLOBAL_HEAP_HISTORY,
        runtime::EXCEPTION_CATCH_START,
        runtime::EXCEPTION_FINALLY_START,
        runtime::EXCEPTION_FILTER_START,
        runtime::ALLOCATION_SAMPLED,
    ]
    .into_iter()
    .map(|id| (RUNTIME, id))
    .collect();
    for id in [
        rundown::METHOD_DC_START,
        rundown::METHOD_DC_END,
        rundown::METHOD_DC_START_VERBOSE,
        rundown::METHOD_DC_END_VERBOSE,
        rundown::MODULE_DC_START,
        rundown::MODULE_DC_END,
        rundown::THREAD_DC,
        rundown::DC_END_COMPLETE,
    ] {
        v.push((RUNDOWN, id));
    }
    v.push((SAMPLE_PROFILER, sample_profiler::THREAD_SAMPLE));
    v
}

#[test]
fn random_payloads_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut errors = 0usize;
    let mut decoded = 0usize;
    for (provider, id) in known_ids() {
        for version in 0..=6u8 {
            for pointer_size in [4u8, 8] {
                for _ in 0..300 {
                    let len = rng.below(200) as usize;
                    let payload = rng.bytes(len);
                    let ev = RawEvent {
                        provider,
                        event_id: id,
                        version,
                        payload: &payload,
                        pointer_size,
                    };
                    match decode(&ev) {
                        Ok(_) => decoded += 1,
                        Err(e) => {
                            // Errors must be the payload kinds and print a message.
                            assert!(
                                matches!(
                                    e,
                                    DecodeError::Truncated { .. }
                                        | DecodeError::UnterminatedString { .. }
                                        | DecodeError::CountTooLarge { .. }
                                ),
                                "{provider}/{id} v{version}: {e:?}"
                            );
                            assert!(!e.to_string().is_empty());
                            errors += 1;
                        }
                    }
                }
            }
        }
    }
    // Both outcomes must actually occur, or the test is not exercising anything.
    assert!(
        decoded > 1000 && errors > 1000,
        "decoded {decoded}, errors {errors}"
    );
}

#[test]
fn random_schemas_and_payloads_never_panic() {
    let mut rng = Rng(0xDEAD_BEEF_CAFE_F00D);
    fn random_type(rng: &mut Rng, depth: u32) -> FieldType {
        match rng.below(if depth > 3 { 1 } else { 4 }) {
            0 | 1 => FieldType::Primitive(
                TypeCode::from_u32(rng.below(20) as u32).unwrap_or(TypeCode::Byte),
            ),
            2 => FieldType::Array(Box::new(random_type(rng, depth + 1))),
            _ => {
                let n = rng.below(4);
                FieldType::Struct(
                    (0..n)
                        .map(|i| Field {
                            name: format!("f{i}"),
                            ty: random_type(rng, depth + 1),
                        })
                        .collect(),
                )
            }
        }
    }
    let mut ok = 0;
    for _ in 0..3000 {
        let n = rng.below(5);
        let schema = EventSchema {
            fields: (0..n)
                .map(|i| Field {
                    name: format!("a{i}"),
                    ty: random_type(&mut rng, 0),
                })
                .collect(),
        };
        let len = rng.below(120) as usize;
        let payload = rng.bytes(len);
        if decode_fields(&schema, &payload).is_ok() {
            ok += 1;
        }
    }
    assert!(ok > 100, "only {ok} random payloads decoded");
}
