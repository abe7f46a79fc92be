//! One JSON object per line, read key by key without building a map: strings borrow from the
//! line when they hold no escapes, and values the format does not use are skipped unread.

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

/// What a format keeps of an object's keys.
pub(super) trait Fields<'de>: Default {
    /// Reads the value of `key` from `map`, or skips it (`map.next_value::<IgnoredAny>()`).
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

/// Reads `line`, which must hold one JSON object and nothing else.
pub(super) fn object<'de, T: Fields<'de>>(line: &'de [u8]) -> Result<T, String> {
    let mut de = serde_json::Deserializer::from_slice(line);
    let fields = (&mut de)
        .deserialize_map(ObjectVisitor(PhantomData))
        .map_err(error)?;
    de.end().map_err(error)?;
    Ok(fields)
}

/// serde_json's message without its "at line 1 column N" (the line is the file's, not 1).
fn error(e: serde_json::Error) -> String {
    let text = e.to_string();
    let text = text.split(" at line ").next().unwrap_or_default();
    format!("bad JSON at column {}: {text}", e.column())
}

struct ObjectVisitor<T>(PhantomData<T>);

impl<'de, T: Fields<'de>> Visitor<'de> for ObjectVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut fields = T::default();
        while let Some(key) = map.next_key::<Str<'de>>()? {
            fields.field(&key.0, &mut map)?;
        }
        Ok(fields)
    }
}

/// A JSON string, borrowed from the line when it has no escapes.
pub(super) struct Str<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(StrVisitor)
    }
}

struct StrVisitor;

impl<'de> Visitor<'de> for StrVisitor {
    type Value = Str<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Str(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Str(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Str(Cow::Owned(v)))
    }
}

/// Any JSON value, of which only strings and numbers are kept.
#[derive(Debug, Default)]
pub(super) enum Val<'a> {
    Str(Cow<'a, str>),
    Num(f64),
    /// null, absent, a boolean, an array or an object.
    #[default]
    Other,
}

impl<'a> Val<'a> {
    /// The string, unless it is empty or nginx's "-" (no value).
    pub(super) fn text(&self) -> Option<&str> {
        match self {
            Val::Str(s) if !s.is_empty() && s != "-" => Some(s),
            _ => None,
        }
    }

    /// As [`Val::text`], owned.
    pub(super) fn into_text(self) -> Option<Cow<'a, str>> {
        match self {
            Val::Str(s) if !s.is_empty() && s != "-" => Some(s),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Val<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValVisitor)
    }
}

struct ValVisitor;

impl<'de> Visitor<'de> for ValVisitor {
    type Value = Val<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Val::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Val::Str(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Val::Str(Cow::Owned(v)))
    }

    #[allow(clippy::cast_precision_loss)] // times and counts, far below 2^53
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Val::Num(v as f64))
    }

    #[allow(clippy::cast_precision_loss)]
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Val::Num(v as f64))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Val::Num(v))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Val::Other)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Val::Other)
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Val::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Val::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Val::Other)
    }
}

/// The keys that tell the two JSON formats apart.
#[derive(Default)]
pub(super) struct Keys {
    pub event: bool,
    pub timestamp_and_level: (bool, bool),
    pub nginx: bool,
}

/// Keys only an nginx `log_format` writes (Tollgate's lines carry none of them).
pub(super) const NGINX_KEYS: [&str; 14] = [
    "remote_addr",
    "request_method",
    "request_uri",
    "request",
    "time_iso8601",
    "time_local",
    "msec",
    "http_user_agent",
    "http_host",
    "vhost",
    "request_query",
    "request_time",
    "upstream_addr",
    "body_bytes_sent",
];

impl<'de> Fields<'de> for Keys {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "event" => self.event = true,
            "timestamp" => self.timestamp_and_level.0 = true,
            "level" => self.timestamp_and_level.1 = true,
            k if NGINX_KEYS.contains(&k) => self.nginx = true,
            _ => {}
        }
        map.next_value::<IgnoredAny>()?;
        Ok(())
    }
}
