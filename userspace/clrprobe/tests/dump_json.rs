//! `trace --dump [--json]` on real NetTrace files from ../shared: every line is JSON, every
//! field value equals what the typed decoders (runtime events) and the generic EventSource
//! decoder give for the same event, stacks are declared once before their first use, and
//! events without a decoder carry their payload as hex.

use std::collections::HashMap;

use clr_events::{ClrEvent, Value, decode, decode_fields};
use clrprobe_eventpipe::nettrace::NetTraceReader;
use serde_json::Value as Json;

use clrprobe_tests::corpus::path as corpus;

const OBJVER4: &str = "perfview__eventpipe-dotnetcore3.0-win-x64-objver4.nettrace";
const ARRAYTYPES: &str = "perfview__eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace";

fn dump(name: &str, json: bool) -> (Vec<u8>, clrprobe::trace::DumpStats) {
    let mut out = Vec::new();
    let stats = clrprobe::trace::dump(&corpus(name), json, &mut out).expect("dump");
    (out, stats)
}

/// The events of the file as the reader and decoders see them: (provider, id, payload, stack,
/// pointer size).
struct Truth {
    provider: String,
    name: String,
    id: u32,
    payload: Vec<u8>,
    stack: Vec<u64>,
    thread: u64,
    time_ns: i64,
    schema: Option<clr_events::schema::EventSchema>,
}

fn truth(name: &str) -> (Vec<Truth>, u8) {
    let bytes = std::fs::read(corpus(name)).unwrap();
    let mut r = NetTraceReader::new(&bytes[..]).unwrap();
    let ps = r.trace_info().pointer_size as u8;
    let mut out = Vec::new();
    while let Some(ev) = r.next_event().unwrap() {
        let md = ev.metadata();
        out.push(Truth {
            provider: md.provider.clone(),
            name: md.name.clone(),
            id: md.event_id,
            payload: ev.payload().to_vec(),
            stack: ev.stack().to_vec(),
            thread: ev.thread_id(),
            time_ns: ev.time_ns(),
            schema: md.schema.clone().filter(|s| !s.fields.is_empty()),
        });
    }
    (out, ps)
}

fn events_and_stacks(out: &[u8]) -> (Vec<Json>, HashMap<u64, Vec<u64>>) {
    let text = std::str::from_utf8(out).expect("UTF-8 output");
    let mut events = Vec::new();
    let mut stacks = HashMap::new();
    for line in text.lines() {
        let v: Json = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        match v["type"].as_str() {
            Some("stack") => {
                let id = v["stack_id"].as_u64().unwrap();
                let ips = v["ips"].as_array().unwrap().iter().map(|ip| u64::from_str_radix(ip.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()).collect();
                assert!(stacks.insert(id, ips).is_none(), "stack {id} declared twice");
            }
            Some("event") => {
                if let Some(id) = v["stack_id"].as_u64() {
                    assert!(stacks.contains_key(&id), "stack {id} used before it is declared");
                }
                events.push(v);
            }
            other => panic!("unknown line type {other:?}: {line}"),
        }
    }
    (events, stacks)
}

/// A generic EventSource value as the JSON the dump must write for it.
fn value_json(v: &Value) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::from(*b),
        Value::Char(c) => Json::from(c.to_string()),
        Value::I8(x) => Json::from(*x),
        Value::U8(x) => Json::from(*x),
        Value::I16(x) => Json::from(*x),
        Value::U16(x) => Json::from(*x),
        Value::I32(x) => Json::from(*x),
        Value::U32(x) => Json::from(*x),
        Value::I64(x) => Json::from(*x),
        Value::U64(x) => Json::from(*x),
        Value::F32(x) => Json::from(*x),
        Value::F64(x) => Json::from(*x),
        Value::Decimal(b) => Json::from(b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
        Value::DateTime(t) => Json::from(*t),
        Value::Guid(g) => Json::from(g.to_string()),
        Value::String(s) => Json::from(s.as_str()),
        Value::Struct(f) => Json::Object(f.iter().map(|(k, v)| (k.clone(), value_json(v))).collect()),
        Value::Array(items) => Json::Array(items.iter().map(value_json).collect()),
    }
}

fn hex(v: &Json) -> u64 {
    u64::from_str_radix(v.as_str().unwrap_or_else(|| panic!("{v} is no hex string")).trim_start_matches("0x"), 16).unwrap()
}

fn check_against_decoders(file: &str) -> HashMap<String, usize> {
    let (out, stats) = dump(file, true);
    let (events, stacks) = events_and_stacks(&out);
    let (truth, ps) = truth(file);
    assert_eq!(events.len() as u64, stats.events);
    assert_eq!(events.len(), truth.len(), "one line per event");
    assert_eq!(stats.decode_errors, 0);
    let mut names: HashMap<String, usize> = HashMap::new();
    for (e, t) in events.iter().zip(&truth) {
        assert_eq!(e["provider"], t.provider.as_str());
        assert_eq!(e["id"], t.id);
        assert_eq!(e["thread"], t.thread);
        assert_eq!(e["time_ns"], t.time_ns);
        let name = e["name"].as_str().unwrap();
        assert!(!name.is_empty(), "every event is named: {e}");
        *names.entry(name.to_owned()).or_default() += 1;
        match e["stack_id"].as_u64() {
            Some(id) => assert_eq!(stacks[&id], t.stack),
            None => assert!(t.stack.is_empty()),
        }
        let fields = e["fields"].as_object().unwrap_or_else(|| panic!("fields is an object: {e}"));
        if let Some(schema) = &t.schema {
            let want = decode_fields(schema, &t.payload).unwrap();
            assert_eq!(fields.len(), want.len(), "{e}");
            for (k, v) in &want {
                assert_eq!(fields[k], value_json(v), "{k} of {e}");
            }
            assert_eq!(name, t.name);
            continue;
        }
        let raw = clr_events::RawEvent { provider: &t.provider, event_id: t.id as u16, version: e["version"].as_u64().unwrap() as u8, payload: &t.payload, pointer_size: ps };
        match decode(&raw).unwrap() {
            ClrEvent::Unknown => {
                assert_eq!(name, if t.name.is_empty() { format!("Event{}", t.id) } else { t.name.clone() });
                let want: String = t.payload.iter().map(|b| format!("{b:02x}")).collect();
                match fields.get("payload_hex") {
                    Some(h) => assert_eq!(h, &Json::from(want)),
                    None => assert!(t.payload.is_empty()),
                }
            }
            ClrEvent::AllocationTick(a) => {
                assert_eq!(name, "GCAllocationTick");
                assert_eq!(fields["AllocationAmount"], a.allocation_amount);
                assert_eq!(fields["AllocationKind"], a.kind.name());
                assert_eq!(fields.get("TypeName").and_then(Json::as_str), a.type_name.map(|s| s.to_string_lossy()).as_deref());
                assert_eq!(fields.get("TypeID").map(hex), a.type_id);
            }
            ClrEvent::GcStart(g) => {
                assert_eq!(fields["Count"], g.count);
                assert_eq!(fields["Reason"], g.reason.name());
                assert_eq!(fields.get("Depth").and_then(Json::as_u64), g.depth.map(u64::from));
            }
            ClrEvent::GcHeapStats(h) => {
                assert_eq!(fields["GenerationSize0"], h.generation_size[0]);
                assert_eq!(fields["TotalPromotedSize3"], h.total_promoted_size[3]);
                assert_eq!(fields["GCHandleCount"], h.gc_handle_count);
            }
            ClrEvent::MethodLoadVerbose(m) | ClrEvent::MethodDcEndVerbose(m) | ClrEvent::MethodDcStartVerbose(m) => {
                assert_eq!(hex(&fields["MethodStartAddress"]), m.start_address);
                assert_eq!(fields["MethodSize"], m.size);
                assert_eq!(fields["MethodName"].as_str().unwrap(), m.name.unwrap().to_string_lossy());
                assert_eq!(fields["MethodSignature"].as_str().unwrap(), m.signature.unwrap().to_string_lossy());
            }
            ClrEvent::ModuleLoad(m) | ClrEvent::ModuleDcEnd(m) => {
                assert_eq!(fields["ModuleILPath"].as_str().unwrap(), m.il_path.to_string_lossy());
                assert_eq!(hex(&fields["ModuleID"]), m.module_id);
            }
            ClrEvent::ThreadSample(s) => {
                let want = match s.sample_type {
                    clr_events::threads::SampleType::External => "External",
                    clr_events::threads::SampleType::Managed => "Managed",
                    clr_events::threads::SampleType::Error => "Error",
                    clr_events::threads::SampleType::Other(_) => unreachable!(),
                };
                assert_eq!(fields["Type"], want);
            }
            ClrEvent::ContentionStop(c) => {
                assert_eq!(fields.get("DurationNs").and_then(Json::as_f64), c.duration_ns);
            }
            ClrEvent::GcPerHeapHistory(h) => {
                assert_eq!(fields["Values"].as_array().unwrap().len(), h.generations.len());
                assert_eq!(fields["Values"][0]["SizeBefore"], h.generations[0].size_before);
            }
            other => assert_eq!(name, other.name()),
        }
    }
    names
}

#[test]
fn objver4_runtime_events_as_json_values() {
    let names = check_against_decoders(OBJVER4);
    // The file's kinds (counted by hand with the reader): CPU samples and allocation ticks.
    assert_eq!(names["ThreadSample"], 35161);
    assert_eq!(names["GCAllocationTick"], 35458);
    assert_eq!(names["GCStart"], 478);
    assert!(names.contains_key("MethodLoadVerbose") && names.contains_key("GCPerHeapHistory"));
}

#[test]
fn arraytypes_eventsource_fields_as_json_values() {
    let names = check_against_decoders(ARRAYTYPES);
    assert!(names.len() > 5, "{names:?}");
    // EventSource events with array fields: their values are JSON arrays.
    let (out, _) = dump(ARRAYTYPES, true);
    let (events, _) = events_and_stacks(&out);
    let arrays = events.iter().filter(|e| e["fields"].as_object().unwrap().values().any(Json::is_array)).count();
    assert!(arrays > 0, "array fields are JSON arrays");
}

#[test]
fn text_dump_is_name_value() {
    let (out, stats) = dump(OBJVER4, false);
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count() as u64, stats.events, "one line per event, no stack lines");
    let sample = text.lines().find(|l| l.contains("/ThreadSample ")).unwrap();
    assert!(sample.contains(r#"Type="External""#) || sample.contains(r#"Type="Managed""#), "{sample}");
    assert!(sample.contains("stack #"), "{sample}");
    let gc = text.lines().find(|l| l.contains("/GCStart ")).unwrap();
    assert!(gc.contains("Count=") && gc.contains("Reason=\""), "{gc}");
    assert!(!text.contains("ThreadSample {") && !text.contains("Some("), "no Rust Debug text");
}
