//! Generic EventSource payload decoding from a schema.

mod common;

use clr_events::schema::{EventSchema, Field, FieldType, TypeCode};
use clr_events::{DecodeError, Value, decode_fields};
use common::Payload;

fn prim(name: &str, tc: TypeCode) -> Field {
    Field {
        name: name.into(),
        ty: FieldType::Primitive(tc),
    }
}

fn array(name: &str, elem: FieldType) -> Field {
    Field {
        name: name.into(),
        ty: FieldType::Array(Box::new(elem)),
    }
}

#[test]
fn every_primitive_type() {
    use TypeCode::*;
    let schema = EventSchema {
        fields: vec![
            prim("b", Boolean),
            prim("c", Char),
            prim("i8", SByte),
            prim("u8", Byte),
            prim("i16", Int16),
            prim("u16", UInt16),
            prim("i32", Int32),
            prim("u32", UInt32),
            prim("i64", Int64),
            prim("u64", UInt64),
            prim("f32", Single),
            prim("f64", Double),
            prim("dec", Decimal),
            prim("dt", DateTime),
            prim("g", Guid),
            prim("s", String),
            prim("e", Empty),
        ],
    };
    let p = Payload::new(8)
        .u32(1)
        .u16('é' as u16)
        .u8(0xFE)
        .u8(200)
        .i16(-3)
        .u16(65000)
        .i32(-70000)
        .u32(4_000_000_000)
        .i64(-5)
        .u64(u64::MAX)
        .f32(1.5)
        .f64(-2.25)
        .bytes(&[9; 16])
        .i64(133_000_000_000_000_000)
        .guid(
            0x3c98ebf4,
            0xc98a,
            0x410f,
            [0xab, 0x1e, 0x6e, 0xa2, 0xfa, 0xa6, 0x00, 0xde],
        )
        .str("héllo");
    let got = decode_fields(&schema, &p.buf).unwrap();
    let want = vec![
        Value::Bool(true),
        Value::Char('é'),
        Value::I8(-2),
        Value::U8(200),
        Value::I16(-3),
        Value::U16(65000),
        Value::I32(-70000),
        Value::U32(4_000_000_000),
        Value::I64(-5),
        Value::U64(u64::MAX),
        Value::F32(1.5),
        Value::F64(-2.25),
        Value::Decimal([9; 16]),
        Value::DateTime(133_000_000_000_000_000),
        Value::Guid(clr_events::Guid::from_bytes_le([
            0xf4, 0xeb, 0x98, 0x3c, 0x8a, 0xc9, 0x0f, 0x41, 0xab, 0x1e, 0x6e, 0xa2, 0xfa, 0xa6,
            0x00, 0xde,
        ])),
        Value::String("héllo".into()),
        Value::Null,
    ];
    let names: Vec<_> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        schema
            .fields
            .iter()
            .map(|f| f.name.as_str())
            .collect::<Vec<_>>()
    );
    assert_eq!(got.into_iter().map(|(_, v)| v).collect::<Vec<_>>(), want);

    // Every truncation is an error naming a field; a longer payload is fine.
    for n in 0..p.buf.len() {
        let err = decode_fields(&schema, &p.buf[..n]).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::Truncated { .. } | DecodeError::UnterminatedString { .. }
            ),
            "{err:?}"
        );
    }
    let mut longer = p.buf.clone();
    longer.extend_from_slice(&[1, 2, 3]);
    assert_eq!(decode_fields(&schema, &longer).unwrap().len(), 17);
}

#[test]
fn arrays_like_the_arraytypes_oracle() {
    // The arraytypes.nettrace oracle: TestEvent1(uint[] arg0, short[] arg1, int arg2).
    let schema = EventSchema {
        fields: vec![
            array("arg0", FieldType::Primitive(TypeCode::UInt32)),
            array("arg1", FieldType::Primitive(TypeCode::Int16)),
            prim("arg2", TypeCode::Int32),
        ],
    };
    let a0 = [
        2032854139u32,
        1608221689,
        1470019200,
        199494339,
        1238846140,
        1366609043,
    ];
    let a1 = [26494i16, 17115, -7229, 18850, 27931];
    let mut p = Payload::new(8).u16(a0.len() as u16);
    for v in a0 {
        p = p.u32(v);
    }
    p = p.u16(a1.len() as u16);
    for v in a1 {
        p = p.i16(v);
    }
    p = p.i32(2033417279);
    let got = decode_fields(&schema, &p.buf).unwrap();
    assert_eq!(
        got[0].1,
        Value::Array(a0.iter().map(|v| Value::U32(*v)).collect())
    );
    assert_eq!(
        got[1].1,
        Value::Array(a1.iter().map(|v| Value::I16(*v)).collect())
    );
    assert_eq!(got[2], ("arg2".to_string(), Value::I32(2033417279)));
    for n in 0..p.buf.len() {
        assert!(decode_fields(&schema, &p.buf[..n]).is_err(), "prefix {n}");
    }
}

#[test]
fn nested_structs_and_arrays_of_structs() {
    let point = FieldType::Struct(vec![
        prim("x", TypeCode::Int32),
        prim("name", TypeCode::String),
    ]);
    let schema = EventSchema {
        fields: vec![
            Field {
                name: "origin".into(),
                ty: point.clone(),
            },
            array("points", point),
            array("names", FieldType::Primitive(TypeCode::String)),
        ],
    };
    let p = Payload::new(8)
        .i32(1)
        .str("o")
        .u16(2)
        .i32(2)
        .str("a")
        .i32(3)
        .str("")
        .u16(1)
        .str("z");
    let got = decode_fields(&schema, &p.buf).unwrap();
    let s = |x: i32, n: &str| {
        Value::Struct(vec![
            ("x".into(), Value::I32(x)),
            ("name".into(), Value::String(n.into())),
        ])
    };
    assert_eq!(got[0].1, s(1, "o"));
    assert_eq!(got[1].1, Value::Array(vec![s(2, "a"), s(3, "")]));
    assert_eq!(got[2].1, Value::Array(vec![Value::String("z".into())]));
}

#[test]
fn corrupt_inputs_are_errors_not_panics() {
    // Array count far beyond the payload.
    let schema = EventSchema {
        fields: vec![array("a", FieldType::Primitive(TypeCode::UInt64))],
    };
    let err = decode_fields(&schema, &[0xFF, 0xFF, 1, 2, 3]).unwrap_err();
    assert!(
        matches!(err, DecodeError::CountTooLarge { count: 65535, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("a"));

    // An Array type code without an element type.
    let schema = EventSchema {
        fields: vec![prim("bad", TypeCode::Array)],
    };
    assert!(matches!(
        decode_fields(&schema, &[0, 0]),
        Err(DecodeError::InvalidSchema { .. })
    ));

    // Absurdly deep nesting is refused instead of recursing without bound.
    let mut ty = FieldType::Primitive(TypeCode::Byte);
    for _ in 0..100 {
        ty = FieldType::Struct(vec![Field {
            name: "n".into(),
            ty,
        }]);
    }
    let schema = EventSchema {
        fields: vec![Field {
            name: "deep".into(),
            ty,
        }],
    };
    assert!(matches!(
        decode_fields(&schema, &[1]),
        Err(DecodeError::SchemaTooDeep { .. })
    ));

    // Unterminated string.
    let schema = EventSchema {
        fields: vec![prim("s", TypeCode::String)],
    };
    assert!(matches!(
        decode_fields(&schema, &[b'a', 0, b'b']),
        Err(DecodeError::UnterminatedString { .. })
    ));
}

#[test]
fn value_accessors() {
    assert_eq!(Value::U16(7).as_u64(), Some(7));
    assert_eq!(Value::I32(-1).as_u64(), None);
    assert_eq!(Value::I32(-1).as_i64(), Some(-1));
    assert_eq!(Value::U64(u64::MAX).as_i64(), None);
    assert_eq!(Value::String("x".into()).as_str(), Some("x"));
}
