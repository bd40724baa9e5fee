//! Every field path of the config file, read off the schema types themselves: a
//! `Deserializer` that answers `RawConfig::deserialize` with each struct's own field list
//! (serde's derive passes every name to `deserialize_struct`), one element per array and
//! one entry per map, and notes the TOML type each leaf asks for. A field added to a
//! `Raw*` struct appears here without anything else to change.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};

use super::super::raw::RawConfig;

/// The TOML type a field takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Integer,
    Float,
    String,
    Boolean,
    /// `[...]` of one kind.
    Array(Box<Kind>),
    /// A table of free keys, each holding one kind (`margins = { ttft_p99 = 0.25 }`).
    Table(Box<Kind>),
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Integer => f.write_str("integer"),
            Self::Float => f.write_str("float"),
            Self::String => f.write_str("string"),
            Self::Boolean => f.write_str("boolean"),
            Self::Array(element) => write!(f, "array of {element}s"),
            Self::Table(value) => write!(f, "table of {value}s"),
        }
    }
}

/// One key a config file may set, by its path: `health.interval_ms`, `replicas[].url`
/// (`[]`: any element of an array of tables), `canary.margins` (a table of free keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub path: String,
    pub kind: Kind,
}

/// A construct the walk does not know how to enumerate (a self-describing or enum field).
#[derive(Debug)]
pub struct SchemaError(String);

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot list the config's fields: {}", self.0)
    }
}

impl std::error::Error for SchemaError {}

impl de::Error for SchemaError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Self(message.to_string())
    }
}

/// Every field of the config file, in the order the schema declares them.
pub fn fields() -> Result<Vec<Field>, SchemaError> {
    let mut found = Vec::new();
    RawConfig::deserialize(Recorder { path: String::new(), found: &mut found })?;
    Ok(found)
}

/// Deserializes one value at `path`, recording the leaves it reaches.
struct Recorder<'a> {
    path: String,
    found: &'a mut Vec<Field>,
}

impl Recorder<'_> {
    fn leaf(self, kind: Kind) {
        self.found.push(Field { path: self.path, kind });
    }

    fn unsupported(&self, what: &str) -> SchemaError {
        SchemaError(format!("`{}` is {what}, which the reference cannot enumerate", self.path))
    }
}

macro_rules! leaves {
    ($($method:ident => $kind:expr, $visit:ident($value:expr);)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SchemaError> {
                self.leaf($kind);
                visitor.$visit($value)
            }
        )*
    };
}

macro_rules! unsupported {
    ($($method:ident),*) => {
        $(
            fn $method<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, SchemaError> {
                Err(self.unsupported(stringify!($method)))
            }
        )*
    };
}

impl<'de> de::Deserializer<'de> for Recorder<'_> {
    type Error = SchemaError;

    leaves! {
        deserialize_bool => Kind::Boolean, visit_bool(false);
        deserialize_i8 => Kind::Integer, visit_i64(0);
        deserialize_i16 => Kind::Integer, visit_i64(0);
        deserialize_i32 => Kind::Integer, visit_i64(0);
        deserialize_i64 => Kind::Integer, visit_i64(0);
        deserialize_u8 => Kind::Integer, visit_u64(0);
        deserialize_u16 => Kind::Integer, visit_u64(0);
        deserialize_u32 => Kind::Integer, visit_u64(0);
        deserialize_u64 => Kind::Integer, visit_u64(0);
        deserialize_f32 => Kind::Float, visit_f64(0.0);
        deserialize_f64 => Kind::Float, visit_f64(0.0);
        deserialize_char => Kind::String, visit_char('x');
        deserialize_str => Kind::String, visit_str("");
        deserialize_string => Kind::String, visit_str("");
    }

    unsupported!(
        deserialize_any,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_unit,
        deserialize_identifier
    );

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SchemaError> {
        visitor.visit_some(self)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _visitor: V,
    ) -> Result<V::Value, SchemaError> {
        Err(self.unsupported("a unit struct"))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, SchemaError> {
        visitor.visit_newtype_struct(self)
    }

    /// An array: one element is walked. A scalar element makes the array one field; a
    /// table element (`[[replicas]]`) contributes its own fields under `path[]`.
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SchemaError> {
        let element = format!("{}[]", self.path);
        let mut inside = Vec::new();
        let value =
            visitor.visit_seq(OneElement { path: Some(element.clone()), found: &mut inside })?;
        match inside.as_slice() {
            [only] if only.path == element => {
                let kind = Kind::Array(Box::new(only.kind.clone()));
                self.leaf(kind);
            }
            _ => self.found.extend(inside),
        }
        Ok(value)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        _visitor: V,
    ) -> Result<V::Value, SchemaError> {
        Err(self.unsupported("a tuple"))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        _visitor: V,
    ) -> Result<V::Value, SchemaError> {
        Err(self.unsupported("a tuple struct"))
    }

    /// A table of free keys: one field, typed by what one value of it takes.
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SchemaError> {
        let mut inside = Vec::new();
        let entry = OneEntry { path: format!("{}.*", self.path), key_read: false };
        let value = visitor.visit_map(MapOfOne { entry, found: &mut inside })?;
        match inside.as_slice() {
            [only] => {
                let kind = Kind::Table(Box::new(only.kind.clone()));
                self.leaf(kind);
                Ok(value)
            }
            _ => Err(self.unsupported("a table whose values are tables")),
        }
    }

    /// A section: each of its fields is walked under `path.field`.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, SchemaError> {
        visitor.visit_map(StructFields { fields, next: 0, path: self.path, found: self.found })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, SchemaError> {
        Err(self.unsupported("an enum"))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SchemaError> {
        visitor.visit_unit()
    }
}

/// Hands a struct's visitor every one of its fields, each with a recorder for its value.
struct StructFields<'a> {
    fields: &'static [&'static str],
    next: usize,
    path: String,
    found: &'a mut Vec<Field>,
}

impl<'de> MapAccess<'de> for StructFields<'_> {
    type Error = SchemaError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, SchemaError> {
        let Some(&name) = self.fields.get(self.next) else { return Ok(None) };
        seed.deserialize(name.into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, SchemaError> {
        let name = self.fields[self.next];
        self.next += 1;
        let path =
            if self.path.is_empty() { name.to_string() } else { format!("{}.{name}", self.path) };
        seed.deserialize(Recorder { path, found: &mut *self.found })
    }
}

/// An array of exactly one element.
struct OneElement<'a> {
    path: Option<String>,
    found: &'a mut Vec<Field>,
}

impl<'de> SeqAccess<'de> for OneElement<'_> {
    type Error = SchemaError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, SchemaError> {
        match self.path.take() {
            None => Ok(None),
            Some(path) => seed.deserialize(Recorder { path, found: &mut *self.found }).map(Some),
        }
    }
}

/// The one key of [`MapOfOne`] and where its value is recorded.
struct OneEntry {
    path: String,
    key_read: bool,
}

/// A table of exactly one free key.
struct MapOfOne<'a> {
    entry: OneEntry,
    found: &'a mut Vec<Field>,
}

impl<'de> MapAccess<'de> for MapOfOne<'_> {
    type Error = SchemaError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, SchemaError> {
        if self.entry.key_read {
            return Ok(None);
        }
        self.entry.key_read = true;
        seed.deserialize("key".into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, SchemaError> {
        let path = self.entry.path.clone();
        seed.deserialize(Recorder { path, found: &mut *self.found })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_reaches_nested_sections_arrays_of_tables_and_maps() {
        let found = fields().unwrap();
        let kind = |path: &str| {
            found.iter().find(|field| field.path == path).map(|field| field.kind.to_string())
        };
        assert_eq!(kind("listen").as_deref(), Some("string"));
        assert_eq!(kind("health.interval_ms").as_deref(), Some("integer"));
        assert_eq!(kind("entries.long.slo.hedge_percent").as_deref(), Some("integer"));
        assert_eq!(kind("entries.short.variants[].weight").as_deref(), Some("integer"));
        assert_eq!(kind("replicas[].capacity_rps").as_deref(), Some("float"));
        assert_eq!(kind("replicas[].nodes").as_deref(), Some("array of strings"));
        assert_eq!(kind("canary.margins").as_deref(), Some("table of floats"));
        assert_eq!(kind("models.aliases").as_deref(), Some("table of strings"));
        assert_eq!(kind("discovery.dns.port").as_deref(), Some("integer"));
        assert_eq!(kind("tls.cert").as_deref(), Some("string"));
        assert_eq!(kind("access_log").as_deref(), Some("boolean"));
        // Sections themselves are not fields, only what they hold.
        assert_eq!(kind("replicas"), None);
        assert_eq!(kind("health"), None);
    }
}
