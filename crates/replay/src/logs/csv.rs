//! CSV with a header line: `time,method,host,path,client` in any order, other columns being
//! request headers. RFC 4180 quoting within a line.

use super::{client_ip, show, target, time, Parsed, Record};
use std::borrow::Cow;

/// The five columns every CSV log has.
const REQUIRED: [&str; 5] = ["time", "method", "host", "path", "client"];

/// What a column holds.
enum Column {
    Time,
    Method,
    Host,
    Path,
    Client,
    Header(String),
    /// A column with an empty name.
    Ignored,
}

/// The header line, read.
pub(super) struct Columns {
    columns: Vec<Column>,
    /// The header's text: the same line later (logs joined together) is skipped.
    header: Vec<u8>,
}

impl Columns {
    /// Reads a header line; one that lacks a required column is an error naming it.
    pub(super) fn new(line: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(line).map_err(|_| "the CSV header is not UTF-8")?;
        let mut columns = Vec::new();
        let mut seen = [false; 5];
        for name in Fields::new(text) {
            let name = name?.trim().to_ascii_lowercase();
            let column = match REQUIRED.iter().position(|r| *r == name) {
                Some(i) if seen[i] => return Err(format!("column {name:?} appears twice")),
                Some(i) => {
                    seen[i] = true;
                    match i {
                        0 => Column::Time,
                        1 => Column::Method,
                        2 => Column::Host,
                        3 => Column::Path,
                        _ => Column::Client,
                    }
                }
                None if name.is_empty() => Column::Ignored,
                None => Column::Header(name),
            };
            columns.push(column);
        }
        let missing: Vec<_> = REQUIRED
            .iter()
            .zip(seen)
            .filter(|(_, seen)| !seen)
            .map(|(name, _)| format!("{name:?}"))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "the CSV header lacks column{} {} (it needs time,method,host,path,client)",
                if missing.len() > 1 { "s" } else { "" },
                missing.join(", ")
            ));
        }
        Ok(Columns {
            columns,
            header: line.to_vec(),
        })
    }

    pub(super) fn parse(&self, line: &[u8]) -> Result<Parsed, String> {
        if line == self.header {
            return Ok(Parsed::Skip);
        }
        let text = std::str::from_utf8(line).map_err(|_| "not UTF-8")?;
        let empty = || Cow::Borrowed("");
        let (mut time, mut method, mut host, mut path, mut client) =
            (empty(), empty(), empty(), empty(), empty());
        let mut headers = Vec::new();
        let mut n = 0;
        for field in Fields::new(text) {
            let field = field?;
            let Some(column) = self.columns.get(n) else {
                return Err(format!(
                    "more fields than the header's {}",
                    self.columns.len()
                ));
            };
            n += 1;
            // Spaces around a time, method, host or address are not theirs.
            match column {
                Column::Time => time = trimmed(field),
                Column::Method => method = trimmed(field),
                Column::Host => host = trimmed(field),
                Column::Path => path = field,
                Column::Client => client = trimmed(field),
                Column::Header(name) if !field.is_empty() => {
                    headers.push((name.clone(), field.into_owned()));
                }
                Column::Header(_) | Column::Ignored => {}
            }
        }
        if n < self.columns.len() {
            return Err(format!(
                "{n} field{}, the header has {}",
                if n == 1 { "" } else { "s" },
                self.columns.len()
            ));
        }
        if time.is_empty() {
            return Err("no time".to_owned());
        }
        let time = time::any(&time).ok_or_else(|| format!("bad time {}", show(&time)))?;
        if method.is_empty() {
            return Err("no method".to_owned());
        }
        let method = super::method(&method)?;
        let mut host = (!host.is_empty()).then(|| host.into_owned());
        if path.is_empty() {
            return Err("no path".to_owned());
        }
        let target = target(&path, &mut host)?;
        let client = if client.is_empty() {
            None
        } else {
            client_ip(&client)?
        };
        Ok(Parsed::Record(Record {
            time,
            method,
            host,
            target,
            client,
            headers,
        }))
    }
}

fn trimmed(field: Cow<'_, str>) -> Cow<'_, str> {
    match field {
        Cow::Borrowed(s) => Cow::Borrowed(s.trim()),
        Cow::Owned(s) if s.trim().len() == s.len() => Cow::Owned(s),
        Cow::Owned(s) => Cow::Owned(s.trim().to_owned()),
    }
}

/// Whether a line reads as a CSV header: cells that name at least two of the required columns.
pub(super) fn looks_like_header(line: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(line) else {
        return false;
    };
    let named = Fields::new(text)
        .filter_map(Result::ok)
        .filter(|f| REQUIRED.iter().any(|r| f.trim().eq_ignore_ascii_case(r)))
        .count();
    named >= 2
}

/// The fields of a CSV line.
struct Fields<'a> {
    s: &'a str,
    pos: usize,
    done: bool,
}

impl<'a> Fields<'a> {
    fn new(s: &'a str) -> Self {
        Fields {
            s,
            pos: 0,
            done: false,
        }
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Cow<'a, str>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let b = self.s.as_bytes();
        if b.get(self.pos) != Some(&b'"') {
            let rest = &self.s[self.pos..];
            return Some(Ok(Cow::Borrowed(match rest.find(',') {
                Some(i) => {
                    self.pos += i + 1;
                    &rest[..i]
                }
                None => {
                    self.done = true;
                    rest
                }
            })));
        }
        let start = self.pos + 1;
        let mut i = start;
        let mut doubled = false;
        let end = loop {
            match b[i..].iter().position(|&c| c == b'"') {
                None => {
                    self.done = true;
                    return Some(Err("unterminated quote".to_owned()));
                }
                Some(j) if b.get(i + j + 1) == Some(&b'"') => {
                    doubled = true;
                    i += j + 2;
                }
                Some(j) => break i + j,
            }
        };
        let field = &self.s[start..end];
        match b.get(end + 1) {
            None => self.done = true,
            Some(b',') => self.pos = end + 2,
            Some(_) => {
                self.done = true;
                return Some(Err("text after a closing quote".to_owned()));
            }
        }
        Some(Ok(if doubled {
            Cow::Owned(field.replace("\"\"", "\""))
        } else {
            Cow::Borrowed(field)
        }))
    }
}
