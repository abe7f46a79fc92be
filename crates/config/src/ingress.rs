//! `tollgate import-ingress`: Kubernetes `networking.k8s.io/v1` Ingress objects translated into
//! Tollgate's TOML, for an ingress-nginx user moving over.
//!
//! What is translated:
//! - rules (host, HTTP paths) into routes, in Kubernetes' matching semantics: `Exact` becomes
//!   `path_exact` (and wins over a `Prefix` of the same path); `Prefix` matches whole path
//!   segments (`/foo` matches `/foo` and `/foo/bar`, not `/foobar`), so `Prefix /foo` becomes
//!   `path_exact = "/foo"` plus `path_prefix = "/foo/"`; `ImplementationSpecific` is a plain
//!   character prefix, as ingress-nginx reads it (`/foo` also matches `/foobar`);
//! - backends into upstreams named `NAMESPACE.SERVICE.PORT` (a dot cannot occur in either
//!   name, so names never collide), with the Service's cluster DNS name
//!   (`SERVICE.NAMESPACE.svc.cluster.local:PORT`); a `defaultBackend` into a catch-all route,
//!   placed after every Ingress's rules;
//! - the ingress-nginx rate-limit annotations: `limit-rps` and `limit-rpm` into a per-client
//!   limit each (burst = rate x `limit-burst-multiplier`, default 5, as ingress-nginx computes
//!   it), as the leaky bucket with capacity and `delay` = burst + 1, which is nginx's
//!   `limit_req burst=N nodelay` (nginx's burst counts the queue beyond the request served);
//!   `limit-whitelist` into an allow list on the Ingress's routes (exempt from its limits, as in
//!   ingress-nginx); `denylist-source-range` into a deny list.
//!
//! What cannot be translated is named in a warning (and as a comment in the output): TLS
//! sections (terminate TLS in front, or keep it at the load balancer), named Service ports,
//! resource backends, other annotations, other kinds of objects.

use serde_yaml_ng::Value;
use std::collections::BTreeMap;
use std::fmt::Write;

const ANN: &str = "nginx.ingress.kubernetes.io/";

/// The TOML made from the Ingress objects, and what could not be translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub toml: String,
    pub warnings: Vec<String>,
    pub routes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("not valid YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    #[error("no networking.k8s.io/v1 Ingress in the input")]
    NoIngress,
    #[error("{0}")]
    Invalid(String),
}

struct Route {
    name: String,
    /// Made from an `Exact` path (it wins over a `Prefix` expansion of the same path).
    from_exact: bool,
    host: Option<String>,
    path: String,
    exact: bool,
    upstream: String,
    limits: Vec<String>,
    allow: Vec<String>,
    deny: Vec<String>,
    comment: String,
}

struct Limit {
    name: String,
    rate: String,
    burst: u64,
}

fn q(s: &str) -> String {
    // A TOML basic string (the toml crate's escaping).
    toml::Value::String(s.to_string()).to_string()
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    cur.as_str()
}

/// Objects in the input: every YAML document, and the items of a `kind: List`.
fn objects(yaml: &str) -> Result<Vec<Value>, ImportError> {
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
        let v = <Value as serde::Deserialize>::deserialize(doc)?;
        if v.is_null() {
            continue;
        }
        if str_at(&v, &["kind"]) == Some("List") {
            if let Some(items) = v.get("items").and_then(Value::as_sequence) {
                out.extend(items.iter().cloned());
            }
        } else {
            out.push(v);
        }
    }
    Ok(out)
}

/// A comma-separated CIDR list of an annotation, each checked.
fn cidrs(v: &str, what: &str, warnings: &mut Vec<String>) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .filter_map(|s| {
            if s.parse::<ipnet::IpNet>().is_ok() || s.parse::<std::net::IpAddr>().is_ok() {
                Some(s.to_string())
            } else {
                warnings.push(format!(
                    "{what}: \"{s}\" is not an address or CIDR: skipped"
                ));
                None
            }
        })
        .collect()
}

/// Text for a `#` comment: anything from the input that could end the comment line (and so
/// write configuration) is replaced.
fn comment(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A Kubernetes object name as part of a Tollgate name: DNS-1123 characters kept, anything
/// else replaced (the input is not trusted).
fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

pub fn import(yaml: &str) -> Result<Imported, ImportError> {
    let mut warnings = Vec::new();
    let mut upstreams: BTreeMap<String, String> = BTreeMap::new();
    let mut limits: Vec<Limit> = Vec::new();
    let mut routes: Vec<Route> = Vec::new();
    let mut defaults: Vec<Route> = Vec::new();
    let mut ingresses = 0;

    for obj in objects(yaml)? {
        let kind = str_at(&obj, &["kind"]).unwrap_or("");
        let api = str_at(&obj, &["apiVersion"]).unwrap_or("");
        let name = str_at(&obj, &["metadata", "name"]).unwrap_or("unnamed");
        if kind != "Ingress" {
            warnings.push(format!("{kind} {name}: not an Ingress: skipped"));
            continue;
        }
        if api != "networking.k8s.io/v1" {
            warnings.push(format!(
                "Ingress {name}: apiVersion {api} is not networking.k8s.io/v1: skipped (convert it first)"
            ));
            continue;
        }
        ingresses += 1;
        let ns = str_at(&obj, &["metadata", "namespace"]).unwrap_or("default");
        // Namespaces hold no dot: "NAMESPACE.INGRESS" is unique across namespaces.
        let id = format!("{}.{}", slug(ns), slug(name));
        let ctx = format!("Ingress {ns}/{name}");
        let ann = |k: &str| str_at(&obj, &["metadata", "annotations", &format!("{ANN}{k}")]);

        // Annotations.
        let mut ing_limits = Vec::new();
        let multiplier = match ann("limit-burst-multiplier") {
            Some(m) => match m.trim().parse::<u64>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    warnings.push(format!(
                        "{ctx}: limit-burst-multiplier \"{m}\" is not a positive integer: 5 used"
                    ));
                    5
                }
            },
            None => 5,
        };
        for (key, unit, suffix) in [("limit-rps", "s", "rps"), ("limit-rpm", "m", "rpm")] {
            let Some(v) = ann(key) else { continue };
            match v.trim().parse::<u64>() {
                Ok(n) if n >= 1 => {
                    let lname = format!("{id}.{suffix}");
                    ing_limits.push(lname.clone());
                    limits.push(Limit {
                        name: lname,
                        rate: format!("{n}/{unit}"),
                        burst: n.saturating_mul(multiplier),
                    });
                }
                _ => warnings.push(format!(
                    "{ctx}: {key} \"{v}\" is not a positive integer: no limit made"
                )),
            }
        }
        let allow = ann("limit-whitelist")
            .map(|v| cidrs(v, &format!("{ctx}: limit-whitelist"), &mut warnings))
            .unwrap_or_default();
        let deny = ann("denylist-source-range")
            .map(|v| cidrs(v, &format!("{ctx}: denylist-source-range"), &mut warnings))
            .unwrap_or_default();
        if ann("whitelist-source-range").is_some() {
            warnings.push(format!("{ctx}: whitelist-source-range (only these addresses may connect) has no Tollgate equivalent: enforce it at the load balancer or a NetworkPolicy"));
        }
        if let Some(anns) = obj
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(Value::as_mapping)
        {
            for k in anns.keys().filter_map(Value::as_str) {
                let known = [
                    "limit-rps",
                    "limit-rpm",
                    "limit-burst-multiplier",
                    "limit-whitelist",
                    "denylist-source-range",
                    "whitelist-source-range",
                ];
                if let Some(rest) = k.strip_prefix(ANN) {
                    if !known.contains(&rest) {
                        warnings.push(format!("{ctx}: annotation {k} is not translated"));
                    }
                }
            }
        }
        if obj
            .get("spec")
            .and_then(|s| s.get("tls"))
            .and_then(Value::as_sequence)
            .is_some_and(|t| !t.is_empty())
        {
            warnings.push(format!("{ctx}: tls is not translated: Tollgate serves plain HTTP here; terminate TLS at the load balancer in front"));
        }

        let mut backend = |b: &Value, where_: &str, warnings: &mut Vec<String>| -> Option<String> {
            if b.get("resource").is_some() {
                warnings.push(format!(
                    "{ctx}: {where_}: a resource backend is not translated"
                ));
                return None;
            }
            let svc = str_at(b, &["service", "name"])?;
            let port = match b.get("service").and_then(|s| s.get("port")) {
                Some(p) => match p.get("number").and_then(Value::as_u64) {
                    Some(n) if (1..=65535).contains(&n) => n,
                    _ => {
                        let named = str_at(p, &["name"]).unwrap_or("?");
                        warnings.push(format!("{ctx}: {where_}: Service {svc} port \"{named}\" is named: write its number (Tollgate does not read Services); 80 used"));
                        80
                    }
                },
                None => {
                    warnings.push(format!(
                        "{ctx}: {where_}: Service {svc} has no port: 80 used"
                    ));
                    80
                }
            };
            let up = format!("{}.{}.{port}", slug(ns), slug(svc));
            upstreams
                .entry(up.clone())
                .or_insert_with(|| format!("{}.{}.svc.cluster.local:{port}", slug(svc), slug(ns)));
            Some(up)
        };

        let mut n = 0;
        let mut push = |host: Option<String>,
                        path: &str,
                        exact: bool,
                        from_exact: bool,
                        upstream: &str,
                        comment: String| {
            n += 1;
            routes.push(Route {
                name: format!("{id}.{n}"),
                from_exact,
                host,
                path: path.to_string(),
                exact,
                upstream: upstream.to_string(),
                limits: ing_limits.clone(),
                allow: allow.clone(),
                deny: deny.clone(),
                comment,
            });
        };
        let spec = obj.get("spec");
        let rules = spec
            .and_then(|s| s.get("rules"))
            .and_then(Value::as_sequence)
            .cloned()
            .unwrap_or_default();
        for (ri, rule) in rules.iter().enumerate() {
            let host = str_at(rule, &["host"]).map(str::to_ascii_lowercase);
            if host.as_deref().is_some_and(|h| h.starts_with("*.")) {
                warnings.push(format!(
                    "{ctx}: rules[{ri}]: wildcard host {} is not supported: skipped",
                    host.as_deref().unwrap_or("")
                ));
                continue;
            }
            let paths = rule
                .get("http")
                .and_then(|h| h.get("paths"))
                .and_then(Value::as_sequence)
                .cloned()
                .unwrap_or_default();
            for (pi, p) in paths.iter().enumerate() {
                let where_ = format!("rules[{ri}].http.paths[{pi}]");
                let path = str_at(p, &["path"]).unwrap_or("/");
                if !path.starts_with('/') {
                    warnings.push(format!(
                        "{ctx}: {where_}: path \"{path}\" does not start with /: skipped"
                    ));
                    continue;
                }
                let ptype = str_at(p, &["pathType"]).unwrap_or("ImplementationSpecific");
                let Some(b) = p.get("backend") else {
                    warnings.push(format!("{ctx}: {where_}: no backend: skipped"));
                    continue;
                };
                let Some(up) = backend(b, &where_, &mut warnings) else {
                    continue;
                };
                let label = format!("{ctx}: {}{path} ({ptype})", host.as_deref().unwrap_or("*"));
                match ptype {
                    "Exact" => push(host.clone(), path, true, true, &up, label),
                    // ingress-nginx: a plain character prefix (a regex location without `$`).
                    "ImplementationSpecific" => push(host.clone(), path, false, false, &up, label),
                    "Prefix" => {
                        let trimmed = path.trim_end_matches('/');
                        if trimmed.is_empty() {
                            push(host.clone(), "/", false, false, &up, label);
                        } else {
                            // Whole segments: the path itself, and what lies below it.
                            push(host.clone(), trimmed, true, false, &up, label.clone());
                            push(
                                host.clone(),
                                &format!("{trimmed}/"),
                                false,
                                false,
                                &up,
                                label,
                            );
                        }
                    }
                    other => warnings.push(format!(
                        "{ctx}: {where_}: unknown pathType \"{other}\": skipped"
                    )),
                }
            }
        }
        // After every Ingress's rules: a rule for "/" without host takes precedence.
        if let Some(b) = spec.and_then(|s| s.get("defaultBackend")) {
            if let Some(up) = backend(b, "defaultBackend", &mut warnings) {
                defaults.push(Route {
                    name: format!("{id}.default"),
                    from_exact: false,
                    host: None,
                    path: "/".into(),
                    exact: false,
                    upstream: up,
                    limits: ing_limits.clone(),
                    allow: allow.clone(),
                    deny: deny.clone(),
                    comment: format!("{ctx}: defaultBackend"),
                });
            }
        }
        if !allow.is_empty() && !deny.is_empty() {
            warnings.push(format!("{ctx}: limit-whitelist and denylist-source-range together: in Tollgate an allowed address also skips the deny list; remove denied ranges from the whitelist"));
        }
    }
    if ingresses == 0 {
        return Err(ImportError::NoIngress);
    }

    routes.append(&mut defaults);
    // Two rules for the same host and path: an Exact path wins over a Prefix one; otherwise
    // the first is kept (ingress-nginx merges Ingresses, the oldest first) and the rest named.
    let mut kept: Vec<Route> = Vec::with_capacity(routes.len());
    for r in routes {
        match kept
            .iter_mut()
            .find(|k| k.host == r.host && k.path == r.path && k.exact == r.exact)
        {
            Some(k) if r.from_exact && !k.from_exact => {
                warnings.push(format!(
                    "{}: replaced by an Exact rule for the same path",
                    k.comment
                ));
                *k = r;
            }
            Some(_) => warnings.push(format!(
                "{}: the same host and path as an earlier rule: skipped",
                r.comment
            )),
            None => kept.push(r),
        }
    }
    let routes = kept;

    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Made by `tollgate import-ingress` from {ingresses} Ingress object(s). Check it with\n\
         # `tollgate check FILE`; see README.md (\"Migrating from ingress-nginx\")."
    );
    for w in &warnings {
        let _ = writeln!(out, "# warning: {}", comment(w));
    }
    out.push_str(
        "\n[server]\nlisten = [\"0.0.0.0:8080\"]\nadmin = \"0.0.0.0:9901\"\n\
         # Like ingress-nginx, X-Forwarded-For is not believed until you name the load balancer\n\
         # in front (its addresses only: any other peer could then forge a client address).\n\
         trusted_proxies = []\n",
    );
    for (name, target) in &upstreams {
        let _ = writeln!(out, "\n[upstreams.{}]\ntargets = [{}]", q(name), q(target));
    }
    for l in &limits {
        // nginx's burst is the queue beyond the request being served: the capacity is one more.
        let capacity = l.burst.saturating_add(1);
        let _ = writeln!(
            out,
            "\n# ingress-nginx: limit_req rate={} burst={} nodelay, per client address\n\
             [limits.{}]\nkey = \"client_ip\"\nalgorithm = \"leaky_bucket\"\nrate = {}\nburst = {capacity}\ndelay = {capacity}",
            l.rate,
            l.burst,
            q(&l.name),
            q(&l.rate),
        );
    }
    for r in &routes {
        let _ = write!(
            out,
            "\n# {}\n[[routes]]\nname = {}\n",
            comment(&r.comment),
            q(&r.name)
        );
        if let Some(h) = &r.host {
            let _ = writeln!(out, "host = {}", q(h));
        }
        let key = if r.exact { "path_exact" } else { "path_prefix" };
        let _ = writeln!(out, "{key} = {}\nupstream = {}", q(&r.path), q(&r.upstream));
        if !r.limits.is_empty() {
            let names: Vec<String> = r.limits.iter().map(|l| q(l)).collect();
            let _ = writeln!(out, "limits = [{}]", names.join(", "));
        }
        if !r.allow.is_empty() || !r.deny.is_empty() {
            let list = |v: &[String]| v.iter().map(|s| q(s)).collect::<Vec<_>>().join(", ");
            let mut parts = Vec::new();
            if !r.allow.is_empty() {
                parts.push(format!("allow = [{}]", list(&r.allow)));
            }
            if !r.deny.is_empty() {
                parts.push(format!("deny = [{}]", list(&r.deny)));
            }
            let _ = writeln!(out, "access = {{ {} }}", parts.join(", "));
        }
    }
    if routes.is_empty() {
        return Err(ImportError::Invalid(format!(
            "no route could be made:\n{}",
            warnings.join("\n")
        )));
    }
    Ok(Imported {
        toml: out,
        warnings,
        routes: routes.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/ingress")
            .join(name);
        std::fs::read_to_string(p).expect("fixture")
    }

    fn config(i: &Imported) -> crate::Config {
        match crate::check_str(&i.toml, "import") {
            Ok(c) => c,
            Err(e) => panic!("{e}\n{}", i.toml),
        }
    }

    /// (host, path, exact, upstream target) of every route, in file order.
    fn routes(c: &crate::Config) -> Vec<(Option<String>, String, bool, String)> {
        c.routes
            .iter()
            .map(|r| {
                let target = match r.action {
                    crate::RouteAction::Upstream(u) => c.upstreams[u].targets[0].0.clone(),
                    crate::RouteAction::Respond { .. } => String::new(),
                };
                (r.host.clone(), r.path_prefix.clone(), r.exact, target)
            })
            .collect()
    }

    fn r(
        host: Option<&str>,
        path: &str,
        exact: bool,
        target: &str,
    ) -> (Option<String>, String, bool, String) {
        (
            host.map(str::to_string),
            path.to_string(),
            exact,
            target.to_string(),
        )
    }

    #[test]
    fn a_fanout_keeps_kubernetes_path_semantics() {
        let i = import(&load("fanout.yaml")).expect("import");
        let c = config(&i);
        let h = Some("foo.bar.com");
        assert_eq!(
            routes(&c),
            vec![
                r(h, "/foo", true, "service1.shop.svc.cluster.local:4200"),
                r(h, "/foo/", false, "service1.shop.svc.cluster.local:4200"),
                r(h, "/bar", true, "service2.shop.svc.cluster.local:8080"),
                r(h, "/bar/", false, "service2.shop.svc.cluster.local:8080"),
                r(
                    h,
                    "/bar/health",
                    true,
                    "service2.shop.svc.cluster.local:8081"
                ),
            ]
        );
        assert!(i.warnings.is_empty(), "{:?}", i.warnings);
    }

    #[test]
    fn virtual_hosts_tls_default_backend_and_what_cannot_be_translated() {
        let i = import(&load("virtual-hosts.yaml")).expect("import");
        let c = config(&i);
        assert_eq!(
            routes(&c),
            vec![
                r(
                    Some("first.bar.com"),
                    "/",
                    false,
                    "service1.default.svc.cluster.local:80"
                ),
                r(
                    Some("second.bar.com"),
                    "/api",
                    false,
                    "service2.default.svc.cluster.local:80"
                ),
                r(None, "/", false, "service3.default.svc.cluster.local:80"),
            ],
            "the rule without host wins over the default backend"
        );
        let w = i.warnings.join("\n");
        for want in [
            "tls is not translated",
            "port \"http\" is named",
            "wildcard host *.foo.com",
            "defaultBackend: the same host and path",
        ] {
            assert!(w.contains(want), "{want} in {w}");
        }
        assert!(i.toml.contains("# warning: "), "warnings in the output too");
    }

    #[test]
    fn ingress_nginx_rate_limit_annotations_become_limits_and_lists() {
        let i = import(&load("ratelimited.yaml")).expect("import");
        let c = config(&i);
        let names: Vec<&str> = c.limits.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["prod.api.rps", "prod.api.rpm", "prod.web.rpm"]);
        let rps = &c.limits[0];
        assert_eq!(
            (
                rps.rate.count(),
                rps.rate.period().as_secs(),
                rps.burst,
                rps.delay
            ),
            (5, 1, 16, 16)
        );
        assert_eq!(rps.algorithm, tollgate_limit::AlgorithmKind::LeakyBucket);
        let web = &c.limits[2];
        assert_eq!(
            (web.rate.count(), web.rate.period().as_secs(), web.burst),
            (600, 60, 3001),
            "default multiplier 5"
        );
        let api = &c.routes[0];
        assert_eq!(api.limits.len(), 2);
        let acc = api.access.as_ref().expect("lists");
        assert_eq!(acc.allow.len(), 2);
        assert_eq!(acc.deny[0].to_string(), "198.51.100.0/24");
        assert!(c.routes[2].access.is_none());
        let w = i.warnings.join("\n");
        assert!(
            w.contains("proxy-body-size is not translated")
                && w.contains("Service api: not an Ingress"),
            "{w}"
        );
    }

    #[test]
    fn names_never_collide_and_exact_wins_and_comments_cannot_write_config() {
        let y = r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: one
  namespace: team-a
  annotations:
    nginx.ingress.kubernetes.io/limit-rps: "5"
    nginx.ingress.kubernetes.io/configuration-snippet: "x\n[access]\nallow = [\"0.0.0.0/0\"]"
spec:
  defaultBackend:
    service: {name: fallback, port: {number: 80}}
  rules:
  - http:
      paths:
      - {path: /foo, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /foo, pathType: Exact, backend: {service: {name: exact, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: two
  namespace: team
  annotations:
    nginx.ingress.kubernetes.io/limit-rps: "7"
spec:
  rules:
  - http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: a-web, port: {number: 80}}}}
"#;
        let i = import(y).expect("import");
        let c = config(&i);
        assert!(c.access.is_empty(), "nothing injected:\n{}", i.toml);
        let rs = routes(&c);
        assert!(
            rs.contains(&r(None, "/foo", true, "exact.team-a.svc.cluster.local:80")),
            "{rs:?}"
        );
        assert!(!rs.contains(&r(None, "/foo", true, "web.team-a.svc.cluster.local:80")));
        assert!(
            rs.contains(&r(None, "/", false, "a-web.team.svc.cluster.local:80")),
            "the later Ingress's rule beats the earlier default backend: {rs:?}"
        );
        assert!(!rs.iter().any(|x| x.3.starts_with("fallback")));
        let names: Vec<&str> = c.limits.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["team-a.one.rps", "team.two.rps"]);
        assert_eq!(c.upstreams.len(), 4, "team-a/web and team/a-web stay apart");
    }

    #[test]
    fn bad_input_is_named() {
        assert!(matches!(
            import("kind: Service\nmetadata: {name: x}\n"),
            Err(ImportError::NoIngress)
        ));
        assert!(matches!(import(": : :\n- ["), Err(ImportError::Yaml(_))));
        let old = "apiVersion: extensions/v1beta1\nkind: Ingress\nmetadata: {name: old}\n";
        assert!(matches!(import(old), Err(ImportError::NoIngress)));
        let bad = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: x\n  annotations:\n    nginx.ingress.kubernetes.io/limit-rps: lots\nspec:\n  defaultBackend:\n    service: {name: s, port: {number: 80}}\n";
        let i = import(bad).expect("imported");
        assert!(
            i.warnings[0].contains("limit-rps \"lots\" is not a positive integer"),
            "{:?}",
            i.warnings
        );
    }
}
