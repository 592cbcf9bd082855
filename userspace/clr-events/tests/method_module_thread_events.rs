//! Method, module, thread and sample decoders (runtime and rundown providers).

mod common;

use clr_events::ClrEvent;
use clr_events::ids::{rundown as rid, runtime as id, sample_profiler};
use clr_events::providers::{RUNDOWN, RUNTIME, SAMPLE_PROFILER};
use clr_events::threads::SampleType;
use common::{Payload, check_event, raw};

fn method(version: u8, verbose: bool) -> Payload {
    // Values of the objver4 baseline's Method/LoadVerbose example.
    let mut p = Payload::new(8)
        .u64(0x7FFE_A93E_45B0)
        .u64(0x7FFE_A901_4020)
        .u64(0x7FFE_A917_7390)
        .u32(0x1052)
        .u32(0x0600_2783)
        .u32(0x8 | (1 << 7));
    if verbose {
        p = p
            .str("System.Text.Unicode.Utf16Utility")
            .str("GetPointerToFirstInvalidChar")
            .str("wchar*  (wchar*,int32,int64&,int32&)");
    }
    if version >= 1 {
        p = p.u16(3);
    }
    if version >= 2 {
        p = p.u64(0);
    }
    p
}

#[test]
fn method_events_every_id_and_version() {
    type Pick = fn(&ClrEvent<'_>) -> Option<bool>;
    let cases: [(&str, u16, bool, &str, Pick); 8] = [
        (RUNTIME, id::METHOD_LOAD, false, "MethodLoad", |e| {
            matches!(e, ClrEvent::MethodLoad(_)).then_some(false)
        }),
        (RUNTIME, id::METHOD_UNLOAD, false, "MethodUnload", |e| {
            matches!(e, ClrEvent::MethodUnload(_)).then_some(false)
        }),
        (
            RUNTIME,
            id::METHOD_LOAD_VERBOSE,
            true,
            "MethodLoadVerbose",
            |e| matches!(e, ClrEvent::MethodLoadVerbose(_)).then_some(true),
        ),
        (
            RUNTIME,
            id::METHOD_UNLOAD_VERBOSE,
            true,
            "MethodUnloadVerbose",
            |e| matches!(e, ClrEvent::MethodUnloadVerbose(_)).then_some(true),
        ),
        (RUNDOWN, rid::METHOD_DC_START, false, "MethodDCStart", |e| {
            matches!(e, ClrEvent::MethodDcStart(_)).then_some(false)
        }),
        (RUNDOWN, rid::METHOD_DC_END, false, "MethodDCEnd", |e| {
            matches!(e, ClrEvent::MethodDcEnd(_)).then_some(false)
        }),
        (
            RUNDOWN,
            rid::METHOD_DC_START_VERBOSE,
            true,
            "MethodDCStartVerbose",
            |e| matches!(e, ClrEvent::MethodDcStartVerbose(_)).then_some(true),
        ),
        (
            RUNDOWN,
            rid::METHOD_DC_END_VERBOSE,
            true,
            "MethodDCEndVerbose",
            |e| matches!(e, ClrEvent::MethodDcEndVerbose(_)).then_some(true),
        ),
    ];
    for (provider, event_id, verbose, base, pick) in cases {
        for version in 0..=2u8 {
            let layout = match version {
                0 => base.to_string(),
                v => format!("{base}_V{v}"),
            };
            let p = method(version, verbose);
            check_event(provider, event_id, version, &p, &layout, |ev| {
                assert_eq!(pick(ev), Some(verbose), "{layout}: wrong variant {ev:?}");
                let m = match ev {
                    ClrEvent::MethodLoad(m)
                    | ClrEvent::MethodUnload(m)
                    | ClrEvent::MethodLoadVerbose(m)
                    | ClrEvent::MethodUnloadVerbose(m)
                    | ClrEvent::MethodDcStart(m)
                    | ClrEvent::MethodDcEnd(m)
                    | ClrEvent::MethodDcStartVerbose(m)
                    | ClrEvent::MethodDcEndVerbose(m) => m,
                    other => panic!("{other:?}"),
                };
                assert_eq!(m.method_id, 0x7FFE_A93E_45B0);
                assert_eq!(m.module_id, 0x7FFE_A901_4020);
                assert_eq!(m.code_range(), 0x7FFE_A917_7390..0x7FFE_A917_7390 + 0x1052);
                assert_eq!(m.token, 0x0600_2783);
                assert!(m.flags.is_jitted() && !m.flags.is_generic() && !m.flags.is_dynamic());
                assert_eq!(m.flags.optimization_tier(), 1);
                assert_eq!(m.clr_instance_id, (version >= 1).then_some(3));
                assert_eq!(m.rejit_id, (version >= 2).then_some(0));
                if verbose {
                    assert_eq!(
                        m.full_name(),
                        "System.Text.Unicode.Utf16Utility.GetPointerToFirstInvalidChar"
                    );
                    assert!(m.signature.unwrap() == "wchar*  (wchar*,int32,int64&,int32&)");
                } else {
                    assert_eq!((m.namespace, m.name, m.signature), (None, None, None));
                }
            });
        }
    }
}

fn module(version: u8) -> Payload {
    // Values of the objver4 baseline's Loader/ModuleLoad example.
    let mut p = Payload::new(8)
        .u64(0x7FFE_A945_E338)
        .u64(0x0000_019A_7836_2840)
        .u32(0x8 | 0x20)
        .u32(0)
        .str(r"C:\Program Files\dotnet\shared\Microsoft.NETCore.App\3.0.0-preview5-27626-15\System.Collections.dll")
        .str("");
    if version >= 1 {
        p = p.u16(3);
    }
    if version >= 2 {
        p = p
            .guid(
                0x3c98ebf4,
                0xc98a,
                0x410f,
                [0xab, 0x1e, 0x6e, 0xa2, 0xfa, 0xa6, 0x00, 0xde],
            )
            .u32(1)
            .str("System.Collections.pdb")
            .guid(
                0xf10f6b8d,
                0x9367,
                0x3d71,
                [0x18, 0xb8, 0x96, 0xd8, 0x3a, 0xbb, 0x8c, 0xff],
            )
            .u32(1)
            .str("System.Collections.ni.pdb");
    }
    p
}

#[test]
fn module_events_every_id_and_version() {
    let cases = [
        (RUNTIME, id::MODULE_LOAD, "ModuleLoad"),
        (RUNTIME, id::MODULE_UNLOAD, "ModuleUnload"),
        (RUNDOWN, rid::MODULE_DC_START, "ModuleDCStart"),
        (RUNDOWN, rid::MODULE_DC_END, "ModuleDCEnd"),
    ];
    for (provider, event_id, base) in cases {
        for version in 0..=2u8 {
            let layout = match version {
                0 => base.to_string(),
                v => format!("{base}_V{v}"),
            };
            check_event(
                provider,
                event_id,
                version,
                &module(version),
                &layout,
                |ev| {
                    let m = match (ev, base) {
                        (ClrEvent::ModuleLoad(m), "ModuleLoad")
                        | (ClrEvent::ModuleUnload(m), "ModuleUnload")
                        | (ClrEvent::ModuleDcStart(m), "ModuleDCStart")
                        | (ClrEvent::ModuleDcEnd(m), "ModuleDCEnd") => m,
                        other => panic!("{layout}: {other:?}"),
                    };
                    assert_eq!(m.module_id, 0x7FFE_A945_E338);
                    assert_eq!(m.assembly_id, 0x0000_019A_7836_2840);
                    assert!(m.flags.is_ready_to_run() && !m.flags.is_dynamic());
                    assert!(m.il_path.to_string().ends_with(r"\System.Collections.dll"));
                    assert!(m.native_path.is_empty());
                    assert_eq!(m.clr_instance_id, (version >= 1).then_some(3));
                    if version >= 2 {
                        let managed = m.managed_pdb.as_ref().unwrap();
                        assert_eq!(
                            managed.signature.to_string(),
                            "3c98ebf4-c98a-410f-ab1e-6ea2faa600de"
                        );
                        assert_eq!(managed.age, 1);
                        assert!(managed.build_path == "System.Collections.pdb");
                        let native = m.native_pdb.as_ref().unwrap();
                        assert_eq!(
                            native.signature.to_string(),
                            "f10f6b8d-9367-3d71-18b8-96d83abb8cff"
                        );
                        assert!(native.build_path == "System.Collections.ni.pdb");
                    } else {
                        assert!(m.managed_pdb.is_none() && m.native_pdb.is_none());
                    }
                },
            );
        }
    }
}

#[test]
fn thread_created_and_rundown_thread_dc() {
    // Values of the objver4 baseline's ThreadCreated example.
    let p = Payload::new(8)
        .u64(0x0000_019A_7A32_1810)
        .u64(0x0000_019A_783A_12A0)
        .u32(0x4)
        .u32(3)
        .u32(3444)
        .u16(3);
    assert_eq!(p.buf.len(), 30);
    check_event(RUNTIME, id::THREAD_CREATED, 0, &p, "ThreadCreated", |ev| {
        let ClrEvent::ThreadCreated(t) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(t.managed_thread_id, 0x0000_019A_7A32_1810);
        assert_eq!(t.app_domain_id, 0x0000_019A_783A_12A0);
        assert!(t.flags.is_thread_pool_worker() && !t.flags.is_finalizer());
        assert_eq!(
            (t.managed_thread_index, t.os_thread_id, t.clr_instance_id),
            (3, 3444, 3)
        );
    });
    check_event(RUNDOWN, rid::THREAD_DC, 0, &p, "ThreadDC", |ev| {
        assert!(matches!(ev, ClrEvent::ThreadDcEnd(t) if t.os_thread_id == 3444));
    });
}

#[test]
fn sample_profiler_thread_sample() {
    for (v, want) in [
        (0u32, SampleType::Error),
        (1, SampleType::External),
        (2, SampleType::Managed),
        (9, SampleType::Other(9)),
    ] {
        let p = Payload::new(8).u32(v);
        check_event(
            SAMPLE_PROFILER,
            sample_profiler::THREAD_SAMPLE,
            0,
            &p,
            "ThreadSample",
            |ev| {
                assert_eq!(
                    ev,
                    &ClrEvent::ThreadSample(clr_events::threads::ThreadSample {
                        sample_type: want
                    })
                );
            },
        );
    }
}

#[test]
fn unknown_events_and_providers() {
    let junk = [1u8, 2, 3];
    assert_eq!(
        clr_events::decode(&raw(RUNTIME, 9999, 0, 8, &junk)).unwrap(),
        ClrEvent::Unknown
    );
    assert_eq!(
        clr_events::decode(&raw("My-EventSource", 1, 0, 8, &junk)).unwrap(),
        ClrEvent::Unknown
    );
    assert_eq!(
        clr_events::decode(&raw(RUNDOWN, id::GC_START, 0, 8, &junk)).unwrap(),
        ClrEvent::Unknown
    );
    // Provider names compare case-insensitively (ETW sources may spell them differently).
    let p = Payload::new(8).u32(2);
    let ev =
        clr_events::decode(&raw("microsoft-dotnetcore-sampleprofiler", 0, 0, 8, &p.buf)).unwrap();
    assert!(matches!(ev, ClrEvent::ThreadSample(_)));
}

#[test]
fn bad_pointer_size_is_an_error() {
    let p = Payload::new(8).u8(0).u16(3);
    let err = clr_events::decode(&raw(RUNTIME, id::CONTENTION_START, 1, 3, &p.buf)).unwrap_err();
    assert!(
        matches!(err, clr_events::DecodeError::BadPointerSize { size: 3, .. }),
        "{err:?}"
    );
}

#[test]
fn rundown_init_and_complete_markers() {
    let p = Payload::new(8).u16(5);
    for (event_id, layout) in [
        (rid::DC_START_INIT, "DCStartInit"),
        (rid::DC_START_COMPLETE, "DCStartComplete"),
        (rid::DC_END_INIT, "DCEndInit"),
        (rid::DC_END_COMPLETE, "DCEndComplete"),
    ] {
        check_event(RUNDOWN, event_id, 1, &p, layout, |ev| {
            let id = match (ev, layout) {
                (ClrEvent::DcStartInit { clr_instance_id }, "DCStartInit")
                | (ClrEvent::DcStartComplete { clr_instance_id }, "DCStartComplete")
                | (ClrEvent::DcEndInit { clr_instance_id }, "DCEndInit")
                | (ClrEvent::DcEndComplete { clr_instance_id }, "DCEndComplete") => {
                    *clr_instance_id
                }
                other => panic!("{layout}: {other:?}"),
            };
            assert_eq!(id, Some(5));
        });
    }
}
