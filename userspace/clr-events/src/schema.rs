//! Self-describing event schemas (EventSource/TraceLogging field lists), as carried by NetTrace
//! metadata events or built from ETW/TDH information. The NetTrace reader produces these;
//! the generic decoder in this crate consumes them.

/// TypeCode of a field (System.TypeCode values, plus Array = 19 as NetTrace V5 metadata uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum TypeCode {
    Empty = 0,
    /// A nested struct: its fields follow in the schema.
    Object = 1,
    DbNull = 2,
    Boolean = 3,
    Char = 4,
    SByte = 5,
    Byte = 6,
    Int16 = 7,
    UInt16 = 8,
    Int32 = 9,
    UInt32 = 10,
    Int64 = 11,
    UInt64 = 12,
    Single = 13,
    Double = 14,
    Decimal = 15,
    DateTime = 16,
    Guid = 17,
    /// NUL-terminated UTF-16 string.
    String = 18,
    /// Variable-length array: a u16 count then the elements.
    Array = 19,
}

impl TypeCode {
    pub fn from_u32(v: u32) -> Option<Self> {
        use TypeCode::*;
        Some(match v {
            0 => Empty,
            1 => Object,
            2 => DbNull,
            3 => Boolean,
            4 => Char,
            5 => SByte,
            6 => Byte,
            7 => Int16,
            8 => UInt16,
            9 => Int32,
            10 => UInt32,
            11 => Int64,
            12 => UInt64,
            13 => Single,
            14 => Double,
            15 => Decimal,
            16 => DateTime,
            17 => Guid,
            18 => String,
            19 => Array,
            _ => return None,
        })
    }
}

/// The type of one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldType {
    Primitive(TypeCode),
    /// A struct with named fields (TypeCode::Object).
    Struct(Vec<Field>),
    /// A variable-length array of the element type (TypeCode::Array).
    Array(Box<FieldType>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub ty: FieldType,
}

/// The fields of one event, in payload order. Empty for events whose metadata carries no
/// field list (runtime events: decoded by their typed decoders instead).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventSchema {
    pub fields: Vec<Field>,
}
