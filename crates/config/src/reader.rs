//! A checked walk over a spanned TOML tree: every read records what is wrong with its key path
//! and line, and every table reports the keys nobody read as unknown. Collecting instead of
//! stopping at the first error is what lets `tollgate check` print every problem at once.

use std::borrow::Cow;
use std::ops::Range;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

pub type Value<'i> = Spanned<DeValue<'i>>;

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted key path, e.g. `limits.per_ip.rate` or `routes[1].upstream`.
    pub path: String,
    /// 1-based line of the offending key or value; 0 when not known.
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = if self.path.is_empty() {
            "(document)"
        } else {
            &self.path
        };
        if self.line > 0 {
            write!(f, "{}: {} (line {})", path, self.message, self.line)
        } else {
            write!(f, "{}: {}", path, self.message)
        }
    }
}

/// Collects problems; knows the source to turn byte offsets into lines.
pub struct Cx<'s> {
    src: &'s str,
    pub problems: Vec<Problem>,
    /// Upstream host names are resolved (to serve); when false (`tollgate check`, which may
    /// run where the cluster's DNS is not), they are only checked for form.
    pub resolve: bool,
    /// Files under this folder are mounted where the config will run (an `import-ingress`
    /// output's Secrets): one absent here is not an error.
    pub mounted_elsewhere: Option<&'static str>,
    /// `[server] underscores_in_headers = false` (the default): a request header whose name
    /// holds `_` is dropped before anything reads it, so a config that reads one is refused.
    pub drops_underscores: bool,
}

impl<'s> Cx<'s> {
    pub fn new(src: &'s str) -> Self {
        Self {
            src,
            problems: Vec::new(),
            resolve: true,
            mounted_elsewhere: None,
            drops_underscores: true,
        }
    }

    /// Whether the gateway will ever see a client's header `name`: one holding `_` is dropped
    /// unless `[server] underscores_in_headers = true`, so reading it (a key, a credential)
    /// would silently read nothing. Reported at `path`; `false` then.
    pub fn client_header(&mut self, path: &str, span: Range<usize>, name: &str) -> bool {
        if !(self.drops_underscores && name.contains('_')) {
            return true;
        }
        self.err(
            path,
            span,
            format!("\"{name}\": request headers whose names hold `_` are dropped before anything reads them ([server] underscores_in_headers = false, as nginx): write it with `-`, or set underscores_in_headers = true"),
        );
        false
    }

    /// `path` is absent here and will be mounted where the config runs.
    pub fn mounted_later(&self, path: &std::path::Path) -> bool {
        self.mounted_elsewhere
            .is_some_and(|m| path.starts_with(m) && !path.exists())
    }

    pub fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.src.len());
        self.src.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    pub fn err(&mut self, path: &str, span: Range<usize>, message: impl Into<String>) {
        let line = if span.start == 0 && span.end == 0 {
            0
        } else {
            self.line_of(span.start)
        };
        self.problems.push(Problem {
            path: path.to_string(),
            line,
            message: message.into(),
        });
    }
}

pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

thread_local! {
    /// While [`keys_asked`] runs: every key name a reader asked for.
    static ASKED: std::cell::RefCell<Option<std::collections::BTreeSet<String>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` and returns, with its result, every key name the readers asked for meanwhile:
/// what the parser accepts (a reader asks for each key it knows, given or not), for the test
/// that keeps the reference and the parser in step.
pub fn keys_asked<R>(f: impl FnOnce() -> R) -> (R, std::collections::BTreeSet<String>) {
    ASKED.with(|a| *a.borrow_mut() = Some(Default::default()));
    let r = f();
    let keys = ASKED.with(|a| a.borrow_mut().take()).unwrap_or_default();
    (r, keys)
}

/// A table being read. Keys that are read are marked; [`Tbl::finish`] reports the rest.
pub struct Tbl<'a, 'i> {
    pub path: String,
    table: &'a DeTable<'i>,
    pub span: Range<usize>,
    used: Vec<bool>,
}

impl<'a, 'i> Tbl<'a, 'i> {
    pub fn new(path: String, table: &'a DeTable<'i>, span: Range<usize>) -> Self {
        let used = vec![false; table.len()];
        Self {
            path,
            table,
            span,
            used,
        }
    }

    /// Reads `value` as a table, or records that it is not one.
    pub fn of(cx: &mut Cx, path: String, value: &'a Value<'i>) -> Option<Self> {
        match value.get_ref() {
            DeValue::Table(t) => Some(Self::new(path, t, value.span())),
            other => {
                cx.err(
                    &path,
                    value.span(),
                    format!("expected a table, found {}", other.type_str()),
                );
                None
            }
        }
    }

    pub fn get(&mut self, key: &str) -> Option<&'a Value<'i>> {
        ASKED.with(|asked| {
            if let Some(set) = asked.borrow_mut().as_mut() {
                set.insert(key.to_string());
            }
        });
        let (i, (_, v)) = self
            .table
            .iter()
            .enumerate()
            .find(|(_, (k, _))| k.get_ref().as_ref() == key)?;
        self.used[i] = true;
        Some(v)
    }

    /// The boolean at `key`, when given and one (a wrong type is reported).
    pub fn bool(&mut self, cx: &mut Cx, key: &str) -> Option<bool> {
        let v = self.get(key)?;
        as_bool(cx, &self.key_path(key), v)
    }

    /// The integer at `key`, when given and within `lo..=hi` (otherwise reported).
    pub fn int_in(&mut self, cx: &mut Cx, key: &str, lo: i64, hi: i64) -> Option<i64> {
        let v = self.get(key)?;
        as_int_in(cx, &self.key_path(key), v, lo, hi)
    }

    pub fn key_path(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// Entries in source order, all marked as read (for maps like `[limits.*]`).
    pub fn entries(&mut self) -> Vec<(&'a str, &'a Value<'i>, Range<usize>)> {
        self.used.iter_mut().for_each(|u| *u = true);
        self.table
            .iter()
            .map(|(k, v)| {
                let name: &Cow<'i, str> = k.get_ref();
                (name.as_ref(), v, k.span())
            })
            .collect()
    }

    /// Reports every key never read as unknown (strict TOML: a misspelt key is an error).
    pub fn finish(self, cx: &mut Cx) {
        for (i, (k, _)) in self.table.iter().enumerate() {
            if !self.used[i] {
                let name: &str = k.get_ref().as_ref();
                cx.err(&join(&self.path, name), k.span(), "unknown key");
            }
        }
    }
}

pub fn type_err(cx: &mut Cx, path: &str, v: &Value, want: &str) {
    cx.err(
        path,
        v.span(),
        format!("expected {want}, found {}", v.get_ref().type_str()),
    );
}

pub fn as_str<'a>(cx: &mut Cx, path: &str, v: &'a Value) -> Option<&'a str> {
    match v.get_ref() {
        DeValue::String(s) => Some(s.as_ref()),
        _ => {
            type_err(cx, path, v, "a string");
            None
        }
    }
}

pub fn as_bool(cx: &mut Cx, path: &str, v: &Value) -> Option<bool> {
    match v.get_ref() {
        DeValue::Boolean(b) => Some(*b),
        _ => {
            type_err(cx, path, v, "true or false");
            None
        }
    }
}

pub fn as_int(cx: &mut Cx, path: &str, v: &Value) -> Option<i64> {
    match v.get_ref() {
        DeValue::Integer(i) => {
            let digits: String = i.as_str().chars().filter(|c| *c != '_').collect();
            let (neg, digits) = match digits.strip_prefix('-') {
                Some(d) => (true, d.to_string()),
                None => (false, digits.trim_start_matches('+').to_string()),
            };
            let digits = digits
                .trim_start_matches("0x")
                .trim_start_matches("0o")
                .trim_start_matches("0b");
            match i64::from_str_radix(digits, i.radix()) {
                Ok(n) => Some(if neg { -n } else { n }),
                Err(_) => {
                    cx.err(path, v.span(), "integer out of range");
                    None
                }
            }
        }
        _ => {
            type_err(cx, path, v, "an integer");
            None
        }
    }
}

/// An integer within `lo..=hi`.
pub fn as_int_in(cx: &mut Cx, path: &str, v: &Value, lo: i64, hi: i64) -> Option<i64> {
    let n = as_int(cx, path, v)?;
    if n < lo || n > hi {
        cx.err(
            path,
            v.span(),
            format!("must be between {lo} and {hi}, got {n}"),
        );
        return None;
    }
    Some(n)
}

pub fn as_array<'a, 'i>(cx: &mut Cx, path: &str, v: &'a Value<'i>) -> Option<&'a [Value<'i>]> {
    match v.get_ref() {
        DeValue::Array(a) => Some(a.as_ref()),
        _ => {
            type_err(cx, path, v, "an array");
            None
        }
    }
}

/// An array of strings, each with its own path `key[i]` for errors; a bare string is accepted
/// as a one-element list where `single_ok`.
pub fn as_str_list<'a>(
    cx: &mut Cx,
    path: &str,
    v: &'a Value,
    single_ok: bool,
) -> Option<Vec<(String, &'a str, Range<usize>)>> {
    if single_ok {
        if let DeValue::String(s) = v.get_ref() {
            return Some(vec![(path.to_string(), s.as_ref(), v.span())]);
        }
    }
    let items = as_array(cx, path, v)?;
    let mut out = Vec::with_capacity(items.len());
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let p = format!("{path}[{i}]");
        match as_str(cx, &p, item) {
            Some(s) => out.push((p, s, item.span())),
            None => ok = false,
        }
    }
    ok.then_some(out)
}
