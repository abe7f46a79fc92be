//! envoyproxy/ratelimit's YAML as its Go loader reads it (`gopkg.in/yaml.v2`, YAML 1.1): the
//! document as a tree of nodes that keep their line, and plain scalars resolved as yaml.v2
//! resolves them (`yes`/`on` are booleans, `0x10` an integer, `~` null, a float a float), so
//! the loader's checks see what the service's see.
//!
//! Only the first document of a file counts (yaml.v2's `Unmarshal` reads no further); the
//! others are reported. Aliases are resolved, within a bound on the nodes they expand to.

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// At most this many nodes in a document, aliases expanded (a "billion laughs" file stops).
const MAX_NODES: usize = 1_000_000;
/// At most this deep.
const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Scalar {
        text: String,
        /// Quoted or a block: always a string.
        quoted: bool,
        tag: Option<String>,
    },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub kind: Kind,
    /// 1-based.
    pub line: usize,
}

/// A scalar as yaml.v2 resolves it.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
}

impl Node {
    /// The scalar this node resolves to (`None` for a sequence or a mapping).
    pub fn scalar(&self) -> Option<Scalar> {
        let Kind::Scalar { text, quoted, tag } = &self.kind else {
            return None;
        };
        Some(resolve(text, *quoted, tag.as_deref()))
    }

    /// The node's text as yaml.v2 sets a string field from a scalar: its text, whatever it
    /// resolves to, but null (which leaves the field empty).
    pub fn text(&self) -> Option<String> {
        match (&self.kind, self.scalar()?) {
            (_, Scalar::Null) => Some(String::new()),
            (Kind::Scalar { text, .. }, _) => Some(text.clone()),
            _ => None,
        }
    }

    /// yaml.v2's tag of the node, for its unmarshal errors (`!!str`, `!!map`, ...).
    pub fn tag_name(&self) -> &'static str {
        match &self.kind {
            Kind::Seq(_) => "!!seq",
            Kind::Map(_) => "!!map",
            Kind::Scalar { .. } => match self.scalar() {
                Some(Scalar::Null) => "!!null",
                Some(Scalar::Bool(_)) => "!!bool",
                Some(Scalar::Int(_)) => "!!int",
                Some(Scalar::Float(_)) => "!!float",
                _ => "!!str",
            },
        }
    }

    /// The value as Go's `%v` prints it (the loader's messages quote keys and list items so).
    pub fn go_print(&self) -> String {
        match &self.kind {
            Kind::Scalar { text, .. } => match self.scalar() {
                Some(Scalar::Null) => "<nil>".into(),
                Some(Scalar::Bool(b)) => b.to_string(),
                Some(Scalar::Int(i)) => i.to_string(),
                Some(Scalar::Float(f)) => go_float(f),
                _ => text.clone(),
            },
            Kind::Seq(items) => format!(
                "[{}]",
                items
                    .iter()
                    .map(Node::go_print)
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            Kind::Map(entries) => {
                // Go prints a map's keys sorted.
                let mut parts: Vec<String> = entries
                    .iter()
                    .map(|(k, v)| format!("{}:{}", k.go_print(), v.go_print()))
                    .collect();
                parts.sort();
                format!("map[{}]", parts.join(" "))
            }
        }
    }

    /// A mapping's value at `key` (each key is once: see [`settle`]).
    pub fn get(&self, key: &str) -> Option<&Node> {
        let Kind::Map(entries) = &self.kind else {
            return None;
        };
        entries
            .iter()
            .find(|(k, _)| k.scalar() == Some(Scalar::Str(key.to_string())))
            .map(|(_, v)| v)
    }
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): the shortest text that
/// reads back, exponent from 1e21 and below 1e-4.
fn go_float(f: f64) -> String {
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f.is_nan() {
        return "NaN".into();
    }
    let a = f.abs();
    if a != 0.0 && !(1e-4..1e21).contains(&a) {
        let s = format!("{f:e}");
        // Rust writes 1e21 and 1.5e-5; Go writes 1e+21 and 1.5e-05.
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match e.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', e),
        };
        return format!("{m}e{sign}{digits:0>2}");
    }
    let s = format!("{f}");
    s
}

/// yaml.v2's resolution of a scalar (its `resolve`: YAML 1.1's null, booleans, integers with
/// `0x`/`0o`/`0b`/leading-zero octal and `_`, floats with `.inf` and `.nan`); a quoted or
/// block scalar, or one tagged `!!str`, is a string.
pub fn resolve(text: &str, quoted: bool, tag: Option<&str>) -> Scalar {
    // An explicit tag decides, quoted or not (yaml.v2 resolves `!!int "10"` to 10, `!!float 10`
    // to 10.0); a tag of an application's own leaves the text a string.
    match tag {
        Some("!!str") => return Scalar::Str(text.to_string()),
        Some("!!binary") => {
            use base64::Engine;
            let clean: String = text.split_whitespace().collect();
            return match base64::engine::general_purpose::STANDARD.decode(clean) {
                Ok(b) => Scalar::Str(String::from_utf8_lossy(&b).into_owned()),
                Err(_) => Scalar::Str(text.to_string()),
            };
        }
        Some("!!float") => {
            return match resolve(text, false, None) {
                Scalar::Int(i) => Scalar::Float(i as f64),
                Scalar::Float(f) => Scalar::Float(f),
                _ => Scalar::Str(text.to_string()),
            }
        }
        Some("!!int") | Some("!!bool") | Some("!!null") => return resolve(text, false, None),
        Some(t) if !t.starts_with("!!") => return Scalar::Str(text.to_string()),
        _ => {}
    }
    if quoted {
        return Scalar::Str(text.to_string());
    }
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Scalar::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Scalar::Bool(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Scalar::Bool(false)
        }
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Scalar::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return Scalar::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Scalar::Float(f64::NAN),
        _ => {}
    }
    let first = text.as_bytes()[0];
    if first.is_ascii_digit() || first == b'-' || first == b'+' || first == b'.' {
        let plain = text.replace('_', "");
        if let Some(i) = go_int(&plain) {
            return Scalar::Int(i);
        }
        if let Some(rest) = plain.strip_prefix("0b") {
            if let Ok(i) = i128::from_str_radix(rest, 2) {
                return Scalar::Int(i);
            }
        }
        if let Some(rest) = plain.strip_prefix("-0b") {
            if let Ok(i) = i128::from_str_radix(rest, 2) {
                return Scalar::Int(-i);
            }
        }
        if float_syntax(&plain) {
            if let Ok(f) = plain.parse::<f64>() {
                return Scalar::Float(f);
            }
        }
    }
    Scalar::Str(text.to_string())
}

/// Go's `strconv.ParseInt(s, 0, 64)` (or ParseUint): a sign, then `0x`, `0o`, `0b`, a leading
/// `0` (octal) or decimal digits.
fn go_int(s: &str) -> Option<i128> {
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if body.is_empty() {
        return None;
    }
    let (radix, digits) =
        if let Some(d) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (16, d)
        } else if let Some(d) = body.strip_prefix("0o").or_else(|| body.strip_prefix("0O")) {
            (8, d)
        } else if let Some(d) = body.strip_prefix("0b").or_else(|| body.strip_prefix("0B")) {
            (2, d)
        } else if body.len() > 1 && body.starts_with('0') {
            (8, &body[1..])
        } else {
            (10, body)
        };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let v = i128::from_str_radix(digits, radix).ok()?;
    let v = if neg { -v } else { v };
    // ParseInt's int64, else ParseUint's uint64.
    (v >= i128::from(i64::MIN) && v <= i128::from(u64::MAX)).then_some(v)
}

/// yaml.v2's float pattern: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`.
fn float_syntax(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    let start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_digits = i - start;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let f = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if int_digits == 0 && i == f {
            return false;
        }
    } else if int_digits == 0 {
        return false;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
            i += 1;
        }
        let e = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == e {
            return false;
        }
    }
    i == b.len()
}

/// What reading a file gave: its first document, and how many more it held.
pub struct Read {
    pub doc: Option<Node>,
    pub more_documents: usize,
}

/// Reads `text`'s first document (what follows it is counted, never read, as yaml.v2's
/// `Unmarshal` reads no further); the error in the words `error loading config file: ...`
/// follows.
pub fn read(text: &str) -> Result<Read, String> {
    let mut b = Builder::default();
    let mut p = Parser::new_from_str(text);
    loop {
        let (ev, mark) = p
            .next_token()
            .map_err(|e| format!("yaml: line {}: {}", e.marker().line(), e.info()))?;
        let end = matches!(ev, Event::StreamEnd);
        let doc_end = matches!(ev, Event::DocumentEnd);
        b.on_event(ev, mark);
        if let Some(e) = b.error {
            return Err(e);
        }
        if end || (doc_end && !b.docs.is_empty()) {
            break;
        }
    }
    let doc = b.docs.into_iter().next();
    // The rest is only counted (a document it cannot read is one more all the same).
    let mut more = 0;
    loop {
        match p.next_token() {
            Ok((Event::DocumentStart, _)) => more += 1,
            Ok((Event::StreamEnd, _)) | Err(_) => break,
            Ok(_) => {}
        }
    }
    Ok(Read {
        doc,
        more_documents: more,
    })
}

/// yaml.v2's mapping: a key given twice keeps its last value (`Unmarshal` is not strict), and
/// `<<` merges the mappings it names (one, or a list), keys written here winning.
fn settle(entries: Vec<(Node, Node)>) -> Vec<(Node, Node)> {
    let is_merge = |k: &Node| matches!(&k.kind, Kind::Scalar { text, quoted: false, tag } if text == "<<" && tag.as_deref().is_none_or(|t| t == "!!merge"));
    let mut own: Vec<(Node, Node)> = Vec::new();
    let mut merged: Vec<(Node, Node)> = Vec::new();
    for (k, v) in entries {
        if is_merge(&k) {
            let sources: Vec<Node> = match v.kind {
                Kind::Seq(items) => items,
                _ => vec![v],
            };
            for src in sources {
                if let Kind::Map(e) = src.kind {
                    for (mk, mv) in e {
                        if !merged.iter().any(|(x, _)| same_key(x, &mk)) {
                            merged.push((mk, mv));
                        }
                    }
                }
            }
            continue;
        }
        match own.iter().position(|(x, _)| same_key(x, &k)) {
            Some(i) => own[i].1 = v,
            None => own.push((k, v)),
        }
    }
    for (k, v) in merged {
        if !own.iter().any(|(x, _)| same_key(x, &k)) {
            own.push((k, v));
        }
    }
    own
}

fn same_key(a: &Node, b: &Node) -> bool {
    match (a.scalar(), b.scalar()) {
        (Some(x), Some(y)) => x == y,
        _ => a.kind == b.kind,
    }
}

#[derive(Default)]
struct Builder {
    docs: Vec<Node>,
    /// Open sequences and mappings, with a mapping's pending key.
    stack: Vec<(Node, Option<Node>)>,
    anchors: std::collections::HashMap<usize, Node>,
    /// Anchors being built (their id, and where on the stack).
    open_anchors: Vec<(usize, usize)>,
    nodes: usize,
    error: Option<String>,
}

impl Builder {
    fn push_value(&mut self, n: Node) {
        self.nodes += n_count(&n);
        if self.nodes > MAX_NODES {
            self.error
                .get_or_insert_with(|| format!("yaml: more than {MAX_NODES} nodes"));
            return;
        }
        match self.stack.last_mut() {
            None => self.docs.push(n),
            Some((
                Node {
                    kind: Kind::Seq(items),
                    ..
                },
                _,
            )) => items.push(n),
            Some((
                Node {
                    kind: Kind::Map(entries),
                    ..
                },
                pending,
            )) => match pending.take() {
                None => *pending = Some(n),
                Some(k) => entries.push((k, n)),
            },
            Some(_) => {}
        }
    }
}

fn n_count(n: &Node) -> usize {
    match &n.kind {
        Kind::Scalar { .. } => 1,
        Kind::Seq(items) => 1 + items.iter().map(n_count).sum::<usize>(),
        Kind::Map(e) => {
            1 + e
                .iter()
                .map(|(k, v)| n_count(k) + n_count(v))
                .sum::<usize>()
        }
    }
}

fn tag_text(t: &Option<Tag>) -> Option<String> {
    t.as_ref().map(|t| {
        if t.handle == "!!" || t.handle == "tag:yaml.org,2002:" {
            format!("!!{}", t.suffix)
        } else {
            format!("{}{}", t.handle, t.suffix)
        }
    })
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        let line = mark.line().max(1);
        match ev {
            Event::Scalar(text, style, anchor, tag) => {
                let n = Node {
                    kind: Kind::Scalar {
                        text,
                        quoted: !matches!(style, TScalarStyle::Plain),
                        tag: tag_text(&tag),
                    },
                    line,
                };
                if anchor > 0 {
                    self.anchors.insert(anchor, n.clone());
                }
                self.push_value(n);
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if self.stack.len() >= MAX_DEPTH {
                    self.error = Some(format!("yaml: nested deeper than {MAX_DEPTH}"));
                    return;
                }
                let kind = match ev {
                    Event::SequenceStart(..) => Kind::Seq(Vec::new()),
                    _ => Kind::Map(Vec::new()),
                };
                if anchor > 0 {
                    self.open_anchors.push((anchor, self.stack.len()));
                }
                self.stack.push((Node { kind, line }, None));
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some((mut n, _)) = self.stack.pop() else {
                    return;
                };
                if let Kind::Map(entries) = n.kind {
                    n.kind = Kind::Map(settle(entries));
                }
                if let Some(&(id, depth)) = self.open_anchors.last() {
                    if depth == self.stack.len() {
                        self.open_anchors.pop();
                        self.anchors.insert(id, n.clone());
                    }
                }
                self.push_value(n);
            }
            Event::Alias(id) => match self.anchors.get(&id).cloned() {
                Some(n) => self.push_value(n),
                None => self.error = Some(format!("yaml: line {line}: unknown anchor")),
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_resolve_as_yaml_v2_resolves_them() {
        let r = |s: &str| resolve(s, false, None);
        assert_eq!(r("yes"), Scalar::Bool(true));
        assert_eq!(r("Off"), Scalar::Bool(false));
        assert_eq!(r("~"), Scalar::Null);
        assert_eq!(r(""), Scalar::Null);
        assert_eq!(r("10"), Scalar::Int(10));
        assert_eq!(r("0x1A"), Scalar::Int(26));
        assert_eq!(r("010"), Scalar::Int(8));
        assert_eq!(r("1_000"), Scalar::Int(1000));
        assert_eq!(r("-5"), Scalar::Int(-5));
        assert_eq!(r("0.25"), Scalar::Float(0.25));
        assert_eq!(r("1e3"), Scalar::Float(1000.0));
        assert_eq!(r("second"), Scalar::Str("second".into()));
        assert_eq!(r("1.2.3"), Scalar::Str("1.2.3".into()));
        assert_eq!(resolve("10", true, None), Scalar::Str("10".into()));
        assert_eq!(
            resolve("yes", false, Some("!!str")),
            Scalar::Str("yes".into())
        );
    }

    #[test]
    fn documents_keep_their_lines_and_go_prints_as_go() {
        let y = "domain: d\ndescriptors:\n  - key: a\n    value: 1\n  - 0.25: x\n---\ndomain: e\n";
        let got = read(y).expect("yaml");
        assert_eq!(got.more_documents, 1);
        let doc = got.doc.expect("doc");
        let Kind::Seq(items) = &doc.get("descriptors").expect("d").kind else {
            panic!("seq")
        };
        assert_eq!(items[0].line, 3);
        assert_eq!(
            items[0].get("value").and_then(Node::text).as_deref(),
            Some("1")
        );
        let Kind::Map(e) = &items[1].kind else {
            panic!()
        };
        assert_eq!(e[0].0.go_print(), "0.25");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(0.00001), "1e-05");
        assert!(read_err("a: [1"));
        // Only the first document is read: a broken second one is counted, not refused.
        let r = read("domain: a\n---\n: : [\n").expect("first document");
        assert_eq!(r.more_documents, 1);
    }

    #[test]
    fn tags_merges_and_duplicates_as_yaml_v2() {
        assert_eq!(resolve("10", true, Some("!!int")), Scalar::Int(10));
        assert_eq!(resolve("10", false, Some("!!float")), Scalar::Float(10.0));
        assert_eq!(resolve("10", false, Some("!foo")), Scalar::Str("10".into()));
        assert_eq!(
            resolve("aGVsbG8=", false, Some("!!binary")),
            Scalar::Str("hello".into())
        );
        let doc = read("base: &b {unit: minute, requests_per_unit: 5}\nnode:\n  <<: *b\n  requests_per_unit: 7\n  name: x\n  name: y\n")
            .expect("yaml")
            .doc
            .expect("doc");
        let n = doc.get("node").expect("node");
        assert_eq!(
            n.get("unit").and_then(Node::text).as_deref(),
            Some("minute")
        );
        assert_eq!(
            n.get("requests_per_unit").and_then(Node::scalar),
            Some(Scalar::Int(7))
        );
        assert_eq!(n.get("name").and_then(Node::text).as_deref(), Some("y"));
        let Kind::Map(e) = &n.kind else { panic!() };
        assert_eq!(e.len(), 3, "no `<<`, one `name`");
    }

    fn read_err(y: &str) -> bool {
        read(y).is_err()
    }

    #[test]
    fn aliases_expand_within_a_bound() {
        let mut y = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            y.push_str(&format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n", p = i - 1));
        }
        assert!(read(&y).is_err(), "a billion laughs stops");
    }
}
