//! envoyproxy/ratelimit's loader (`src/config/config_impl.go`), check for check: the keys of
//! every mapping (`validateYamlKeys`: known names, string keys, lists of mappings, leaf
//! types), the typed read (`yaml.Unmarshal` into its structs: a `uint32`, a `bool`, ...), then
//! `loadConfig` and `loadDescriptors` (a domain, each key, each composite key once per level,
//! units, `unlimited` without a unit, `replaces`, `share_threshold` on wildcards). Each problem
//! in the service's own words after `FILE: `, then where it is (the key path and line).

use super::yaml::{Kind, Node, Scalar};
use crate::model::{EnvoyLimit, EnvoyUnit, RlsDomain, RlsNode};

/// The keys the service knows, anywhere in a file (its `validKeys`).
const VALID_KEYS: [&str; 16] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

/// One file to load: its name (as messages say it) and first document.
pub struct File<'a> {
    pub name: &'a str,
    pub doc: Option<&'a Node>,
}

/// Problems, each a line.
pub type Problems = Vec<String>;

fn problem(out: &mut Problems, file: &str, msg: impl std::fmt::Display, path: &str, line: usize) {
    let at = if path.is_empty() {
        format!("line {line}")
    } else {
        format!("{path}, line {line}")
    };
    out.push(format!("{file}: {msg} ({at})"));
}

/// The domains of `files`, in order; with `merge`, a domain named again adds its descriptors to
/// the first (`MERGE_DOMAIN_CONFIG`), else it is an error.
pub fn load(files: &[File], merge: bool) -> Result<Vec<RlsDomain>, Problems> {
    let mut problems = Problems::new();
    let mut domains: Vec<RlsDomain> = Vec::new();
    for f in files {
        let Some(doc) = f.doc else {
            problem(
                &mut problems,
                f.name,
                "config file cannot have empty domain",
                "",
                1,
            );
            continue;
        };
        let before = problems.len();
        if !matches!(doc.kind, Kind::Map(_)) && doc.scalar() != Some(Scalar::Null) {
            problem(
                &mut problems,
                f.name,
                format!(
                    "error loading config file: yaml: unmarshal errors: cannot unmarshal {} into map[interface {{}}]interface {{}}",
                    doc.tag_name()
                ),
                "",
                doc.line,
            );
            continue;
        }
        validate_keys(&mut problems, f.name, doc, "");
        if problems.len() > before {
            continue;
        }
        let root = match typed_root(f.name, doc) {
            Ok(r) => r,
            Err(p) => {
                problems.extend(p);
                continue;
            }
        };
        let (domain, line) = root.domain;
        if domain.is_empty() {
            problem(
                &mut problems,
                f.name,
                "config file cannot have empty domain",
                "domain",
                line,
            );
            continue;
        }
        let existing = domains.iter().position(|d| d.domain == domain);
        if existing.is_some() && !merge {
            problem(
                &mut problems,
                f.name,
                format!("duplicate domain '{domain}' in config file"),
                "domain",
                line,
            );
            continue;
        }
        let mut into = match existing {
            Some(i) => std::mem::take(&mut domains[i].descriptors),
            None => Vec::new(),
        };
        load_descriptors(
            &mut problems,
            f.name,
            &format!("{domain}."),
            &mut into,
            root.descriptors,
            "descriptors",
        );
        match existing {
            Some(i) => domains[i].descriptors = into,
            None => domains.push(RlsDomain {
                domain,
                descriptors: into,
            }),
        }
    }
    if problems.is_empty() {
        Ok(domains)
    } else {
        Err(problems)
    }
}

/// `validateYamlKeys`: every key a string the service knows; a list holds mappings; leaves
/// are strings, integers, booleans or null (a float is "error checking config").
fn validate_keys(out: &mut Problems, file: &str, node: &Node, path: &str) {
    let Kind::Map(entries) = &node.kind else {
        return;
    };
    for (k, v) in entries {
        let key = match k.scalar() {
            Some(Scalar::Str(s)) => s,
            _ => {
                problem(
                    out,
                    file,
                    format!("config error, key is not of type string: {}", k.go_print()),
                    path,
                    k.line,
                );
                continue;
            }
        };
        let p = crate::reader::join(path, &key);
        if !VALID_KEYS.contains(&key.as_str()) {
            problem(
                out,
                file,
                format!("config error, unknown key '{key}'"),
                &p,
                k.line,
            );
            continue;
        }
        if key == "metadata" {
            continue;
        }
        match &v.kind {
            Kind::Seq(items) => {
                for (i, e) in items.iter().enumerate() {
                    let ip = format!("{p}[{i}]");
                    if !matches!(e.kind, Kind::Map(_)) {
                        problem(
                            out,
                            file,
                            format!(
                                "config error, yaml file contains list of type other than map: {}",
                                e.go_print()
                            ),
                            &ip,
                            e.line,
                        );
                        continue;
                    }
                    validate_keys(out, file, e, &ip);
                }
            }
            Kind::Map(_) => validate_keys(out, file, v, &p),
            Kind::Scalar { .. } => match v.scalar() {
                Some(Scalar::Float(_)) => problem(out, file, "error checking config", &p, v.line),
                Some(Scalar::Int(i)) if i > i128::from(i64::MAX) => {
                    problem(out, file, "error checking config", &p, v.line)
                }
                _ => {}
            },
        }
    }
}

/// The service's `YamlRoot`, read.
struct Root<'a> {
    domain: (String, usize),
    descriptors: Vec<Desc<'a>>,
}

/// Its `YamlDescriptor`.
struct Desc<'a> {
    node: &'a Node,
    path: String,
    key: String,
    value: String,
    rate_limit: Option<RateLimit>,
    descriptors: Vec<Desc<'a>>,
    shadow_mode: bool,
    quota_mode: bool,
    detailed_metric: bool,
    value_to_metric: bool,
    share_threshold: bool,
    metadata: Option<serde_json::Value>,
}

/// Its `YamlRateLimit`.
struct RateLimit {
    requests_per_unit: u32,
    unit: String,
    unlimited: bool,
    name: String,
    replaces: Vec<(String, usize, String)>,
}

/// yaml.v2's unmarshal errors, each `line N: cannot unmarshal TAG `TEXT` into TYPE`, said
/// together as its error is.
struct Typed<'a> {
    file: &'a str,
    errors: Vec<(String, usize, String)>,
}

impl<'a> Typed<'a> {
    fn wrong(&mut self, n: &Node, into: &str, path: &str) {
        let shown = match &n.kind {
            Kind::Scalar { text, .. } => format!(" `{text}`"),
            _ => String::new(),
        };
        self.errors.push((
            format!("cannot unmarshal {}{shown} into {into}", n.tag_name()),
            n.line,
            path.to_string(),
        ));
    }

    fn string(&mut self, n: Option<&Node>, path: &str) -> String {
        let Some(n) = n else { return String::new() };
        match n.text() {
            Some(s) => s,
            None => {
                self.wrong(n, "string", path);
                String::new()
            }
        }
    }

    fn boolean(&mut self, n: Option<&Node>, path: &str) -> bool {
        let Some(n) = n else { return false };
        match n.scalar() {
            Some(Scalar::Bool(b)) => b,
            Some(Scalar::Null) => false,
            _ => {
                self.wrong(n, "bool", path);
                false
            }
        }
    }

    fn uint32(&mut self, n: Option<&Node>, path: &str) -> u32 {
        let Some(n) = n else { return 0 };
        match n.scalar() {
            Some(Scalar::Int(i)) if (0..=i128::from(u32::MAX)).contains(&i) => i as u32,
            Some(Scalar::Null) => 0,
            _ => {
                self.wrong(n, "uint32", path);
                0
            }
        }
    }

    fn list(&mut self, n: Option<&'a Node>, into: &str, path: &str) -> &'a [Node] {
        match n.map(|n| (&n.kind, n)) {
            None => &[],
            Some((Kind::Seq(items), _)) => items,
            Some((_, n)) if n.scalar() == Some(Scalar::Null) => &[],
            Some((_, n)) => {
                self.wrong(n, into, path);
                &[]
            }
        }
    }

    fn descriptors(&mut self, n: Option<&'a Node>, path: &str) -> Vec<Desc<'a>> {
        self.list(n, "[]config.YamlDescriptor", path)
            .iter()
            .enumerate()
            .map(|(i, d)| self.descriptor(d, &format!("{path}[{i}]")))
            .collect()
    }

    fn descriptor(&mut self, d: &'a Node, path: &str) -> Desc<'a> {
        let at = |k: &str| crate::reader::join(path, k);
        let rate_limit = d.get("rate_limit").and_then(|r| match &r.kind {
            Kind::Map(_) => Some(self.rate_limit(r, &at("rate_limit"))),
            _ if r.scalar() == Some(Scalar::Null) => None,
            _ => {
                self.wrong(r, "config.YamlRateLimit", &at("rate_limit"));
                None
            }
        });
        let metadata = d.get("metadata").and_then(|m| match &m.kind {
            Kind::Map(_) => json(m),
            _ if m.scalar() == Some(Scalar::Null) => None,
            _ => {
                self.wrong(m, "map[string]interface {}", &at("metadata"));
                None
            }
        });
        Desc {
            node: d,
            path: path.to_string(),
            key: self.string(d.get("key"), &at("key")),
            value: self.string(d.get("value"), &at("value")),
            rate_limit,
            descriptors: self.descriptors(d.get("descriptors"), &at("descriptors")),
            shadow_mode: self.boolean(d.get("shadow_mode"), &at("shadow_mode")),
            quota_mode: self.boolean(d.get("quota_mode"), &at("quota_mode")),
            detailed_metric: self.boolean(d.get("detailed_metric"), &at("detailed_metric")),
            value_to_metric: self.boolean(d.get("value_to_metric"), &at("value_to_metric")),
            share_threshold: self.boolean(d.get("share_threshold"), &at("share_threshold")),
            metadata,
        }
    }

    fn rate_limit(&mut self, r: &'a Node, path: &str) -> RateLimit {
        let at = |k: &str| crate::reader::join(path, k);
        let replaces = self
            .list(r.get("replaces"), "[]config.yamlReplaces", &at("replaces"))
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let p = format!("{}[{i}]", at("replaces"));
                (self.string(e.get("name"), &format!("{p}.name")), e.line, p)
            })
            .collect();
        RateLimit {
            requests_per_unit: self.uint32(r.get("requests_per_unit"), &at("requests_per_unit")),
            unit: self.string(r.get("unit"), &at("unit")),
            unlimited: self.boolean(r.get("unlimited"), &at("unlimited")),
            name: self.string(r.get("name"), &at("name")),
            replaces,
        }
    }
}

/// A descriptor's metadata as the service makes its `structpb.Struct` (`parseMetadata`): the
/// top level's keys as yaml.v2 sets a string (their text), deeper keys as Go's `%v` prints them
/// (`convertMap`), every number a double. `None` when a top-level key is not a scalar (yaml.v2
/// refuses to unmarshal the file).
fn json(n: &Node) -> Option<serde_json::Value> {
    let Kind::Map(entries) = &n.kind else {
        return None;
    };
    let mut m = serde_json::Map::new();
    for (k, v) in entries {
        m.insert(k.text()?, json_value(v));
    }
    Some(serde_json::Value::Object(m))
}

/// One value: a null, NaN or infinity is JSON's null (the import leaves it out, saying so).
fn json_value(n: &Node) -> serde_json::Value {
    match &n.kind {
        Kind::Map(entries) => serde_json::Value::Object(
            entries
                .iter()
                .map(|(k, v)| (k.go_print(), json_value(v)))
                .collect(),
        ),
        Kind::Seq(items) => serde_json::Value::Array(items.iter().map(json_value).collect()),
        Kind::Scalar { .. } => match n.scalar() {
            Some(Scalar::Bool(b)) => serde_json::Value::Bool(b),
            Some(Scalar::Int(i)) => match i64::try_from(i) {
                Ok(i) => serde_json::Value::from(i),
                Err(_) => serde_json::Number::from_f64(i as f64)
                    .map_or(serde_json::Value::Null, serde_json::Value::Number),
            },
            Some(Scalar::Float(f)) => serde_json::Number::from_f64(f)
                .map_or(serde_json::Value::Null, serde_json::Value::Number),
            Some(Scalar::Str(s)) => serde_json::Value::String(s),
            Some(Scalar::Null) | None => serde_json::Value::Null,
        },
    }
}

fn typed_root<'a>(file: &'a str, doc: &'a Node) -> Result<Root<'a>, Problems> {
    let mut t = Typed {
        file,
        errors: Vec::new(),
    };
    let domain_line = doc.get("domain").map_or(doc.line, |d| d.line);
    let domain = t.string(doc.get("domain"), "domain");
    let descriptors = t.descriptors(doc.get("descriptors"), "descriptors");
    if t.errors.is_empty() {
        return Ok(Root {
            domain: (domain, domain_line),
            descriptors,
        });
    }
    let mut out = Problems::new();
    for (msg, line, path) in &t.errors {
        problem(
            &mut out,
            t.file,
            format!("error loading config file: yaml: unmarshal errors: line {line}: {msg}"),
            path,
            *line,
        );
    }
    Err(out)
}

/// `loadDescriptors`: the level's nodes into `into` (more of them, when a domain is merged).
fn load_descriptors(
    out: &mut Problems,
    file: &str,
    parent: &str,
    into: &mut Vec<RlsNode>,
    descs: Vec<Desc>,
    _path: &str,
) {
    for d in descs {
        let line = d.node.line;
        if d.key.is_empty() {
            problem(out, file, "descriptor has empty key", &d.path, line);
            continue;
        }
        let final_key = if d.value.is_empty() {
            d.key.clone()
        } else {
            format!("{}_{}", d.key, d.value)
        };
        let full_key = format!("{parent}{final_key}");
        if into.iter().any(|n| n.final_key() == final_key) {
            problem(
                out,
                file,
                format!("duplicate descriptor composite key '{full_key}'"),
                &d.path,
                line,
            );
            continue;
        }
        let mut ok = true;
        let rate_limit = d
            .rate_limit
            .as_ref()
            .map(|r| limit(out, file, &d.path, line, r, &mut ok));
        if d.share_threshold && !final_key.contains('*') {
            problem(
                out,
                file,
                format!("share_threshold can only be used with wildcard values (containing '*'), but found key '{final_key}'"),
                &format!("{}.share_threshold", d.path),
                line,
            );
            ok = false;
        }
        let mut children = Vec::new();
        load_descriptors(
            out,
            file,
            &format!("{full_key}."),
            &mut children,
            d.descriptors,
            "",
        );
        if ok {
            into.push(RlsNode {
                key: d.key,
                value: d.value,
                rate_limit,
                shadow_mode: d.shadow_mode,
                quota_mode: d.quota_mode,
                detailed_metric: d.detailed_metric,
                value_to_metric: d.value_to_metric,
                share_threshold: d.share_threshold,
                metadata: d.metadata,
                descriptors: children,
            });
        }
    }
}

/// A descriptor's `rate_limit`, checked as envoyproxy/ratelimit checks it: a unit unless
/// unlimited (and none when it is), and `replaces` naming other limits only.
fn limit(
    out: &mut Problems,
    file: &str,
    path: &str,
    line: usize,
    r: &RateLimit,
    ok: &mut bool,
) -> EnvoyLimit {
    let unit = EnvoyUnit::parse(&r.unit);
    let at = format!("{path}.rate_limit");
    if r.unlimited {
        if unit.is_some() {
            problem(
                out,
                file,
                "should not specify rate limit unit when unlimited",
                &at,
                line,
            );
            *ok = false;
        }
    } else if unit.is_none() {
        problem(
            out,
            file,
            format!("invalid rate limit unit '{}'", r.unit),
            &format!("{at}.unit"),
            line,
        );
        *ok = false;
    }
    let mut replaces = Vec::new();
    for (name, rline, rp) in &r.replaces {
        if name.is_empty() {
            problem(
                out,
                file,
                "should not have an empty replaces entry",
                rp,
                *rline,
            );
            *ok = false;
        } else if *name == r.name {
            problem(
                out,
                file,
                "replaces should not contain name of same descriptor",
                rp,
                *rline,
            );
            *ok = false;
        } else {
            replaces.push(name.clone());
        }
    }
    EnvoyLimit {
        requests_per_unit: r.requests_per_unit,
        unit: if r.unlimited { None } else { unit },
        unlimited: r.unlimited,
        name: r.name.clone(),
        replaces,
        limit: None,
    }
}
