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
//! - TLS, as ingress-nginx serves it (README, "Migrating from ingress-nginx", TLS): every
//!   `spec.tls` Secret becomes a certificate read from the Secret mounted at
//!   `/etc/tollgate/tls/NAMESPACE/SECRET/` (`tls.crt`, `tls.key`), with a TLS listener on 8443
//!   (the Service maps 443 to it) and `https_port = 443`; ingress-nginx's HTTP-to-HTTPS
//!   redirect per route (`https_redirect = true` where ingress-nginx redirects: the host has a
//!   certificate and `ssl-redirect` is not "false", or `force-ssl-redirect` is "true"; never a
//!   path under `/.well-known/acme-challenge`, as ingress-nginx's `no-tls-redirect-locations`);
//!   `backend-protocol` HTTPS / GRPC / GRPCS as upstream `tls` / `h2`; `auth-tls-secret` and
//!   `auth-tls-verify-client` as `[tls] client_ca` / `client_auth` when every Ingress served
//!   over TLS agrees (Tollgate's is server-wide); the `hsts*` keys when they agree.
//!
//! What cannot be translated is named in a warning (and as a comment in the output): named
//! Service ports, resource backends, other annotations, other kinds of objects. A client
//! certificate requirement that cannot be translated exactly is not dropped: the Ingress's
//! routes answer 403 instead (listed in [`Imported::denied`]), so nothing that was protected
//! is served open.

use serde_yaml_ng::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

const ANN: &str = "nginx.ingress.kubernetes.io/";

/// Where each Kubernetes Secret is expected: mounted read-only (a `secret` volume, no
/// `subPath`, so renewals reach the file) at `TLS_MOUNT/NAMESPACE/SECRET/`.
pub const TLS_MOUNT: &str = "/etc/tollgate/tls";

/// The HTTPS listener: the container runs as non-root, the Service maps 443 to it.
const TLS_LISTEN: &str = "0.0.0.0:8443";

/// ingress-nginx's `no-tls-redirect-locations` default: locations whose path starts with it
/// are never redirected to HTTPS (cert-manager's HTTP-01 challenges).
const ACME: &str = "/.well-known/acme-challenge";

/// The TOML made from the Ingress objects, and what could not be translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub toml: String,
    pub warnings: Vec<String>,
    pub routes: usize,
    /// Routes made to answer 403 because a protection of their Ingress (a client certificate
    /// requirement) cannot be translated exactly: the output must not be served as is.
    pub denied: Vec<String>,
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
    /// Index of its Ingress in `ings`.
    ing: usize,
    /// The Ingress path under `/.well-known/acme-challenge` (never redirected).
    acme: bool,
}

struct Limit {
    name: String,
    rate: String,
    burst: u64,
}

/// `nginx.ingress.kubernetes.io/backend-protocol`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Proto {
    Http,
    Https,
    Grpc,
    Grpcs,
}

impl Proto {
    /// Part of the upstream's name: one Service port spoken to in two ways is two upstreams.
    fn suffix(self) -> &'static str {
        match self {
            Proto::Http => "",
            Proto::Https => ".https",
            Proto::Grpc => ".grpc",
            Proto::Grpcs => ".grpcs",
        }
    }
}

/// `ssl_verify_client` of ingress-nginx, as Tollgate's `client_auth`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ClientAuth {
    Require,
    Optional,
}

impl ClientAuth {
    fn as_str(self) -> &'static str {
        match self {
            ClientAuth::Require => "require",
            ClientAuth::Optional => "optional",
        }
    }
}

/// What each Ingress asks for, read in the first pass, decided on once all are read.
struct Ing {
    ctx: String,
    /// `spec.tls` is not empty.
    tls: bool,
    /// `ssl-redirect` (default true) and `force-ssl-redirect` (default false).
    ssl_redirect: bool,
    force_redirect: bool,
    /// `auth-tls-*`: `None` when absent or "off"; `Some(Err(why))` when it cannot be
    /// translated at all (the routes are then denied).
    auth: Option<Result<(String, ClientAuth), String>>,
    /// Routes answer 403 (set once every Ingress is read).
    denied: bool,
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

/// A DNS-1123 subdomain (Secret and namespace names): what may become part of a file path.
/// No `/`, no empty, `.` or `..` segment can pass.
fn k8s_name(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// The folder a Secret is mounted at.
fn secret_dir(ns: &str, secret: &str) -> String {
    format!("{TLS_MOUNT}/{ns}/{secret}")
}

/// A boolean annotation as ingress-nginx reads it (Go's `strconv.ParseBool`); anything else
/// is named and the default kept.
fn flag(v: Option<&str>, default: bool, what: &str, warnings: &mut Vec<String>) -> bool {
    match v.map(str::trim) {
        None => default,
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => true,
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => false,
        Some(other) => {
            warnings.push(format!(
                "{what} \"{other}\" is not true or false: {default} used"
            ));
            default
        }
    }
}

/// A TLS host (`spec.tls[].hosts`, maybe `*.example.com`) names this rule host.
fn tls_covers(tls_host: &str, host: &str) -> bool {
    match tls_host.strip_prefix("*.") {
        Some(parent) => host
            .split_once('.')
            .is_some_and(|(first, rest)| !first.is_empty() && rest == parent),
        None => tls_host == host,
    }
}

pub fn import(yaml: &str) -> Result<Imported, ImportError> {
    let mut warnings = Vec::new();
    // Name -> (target, protocol).
    let mut upstreams: BTreeMap<String, (String, Proto)> = BTreeMap::new();
    let mut limits: Vec<Limit> = Vec::new();
    let mut routes: Vec<Route> = Vec::new();
    let mut defaults: Vec<Route> = Vec::new();
    let mut ingresses = 0;
    let mut ings: Vec<Ing> = Vec::new();
    // (namespace, Secret) -> (hosts, the Ingresses that name it): sorted, so the order (and
    // the default certificate, the first) does not depend on the order of the input.
    let mut certs: BTreeMap<(String, String), (BTreeSet<String>, Vec<String>)> = BTreeMap::new();
    // Every host of a spec.tls, with or without secretName: ingress-nginx redirects these.
    let mut tls_hosts: BTreeSet<String> = BTreeSet::new();
    // Per Ingress: (context, rule hosts) of those with spec.tls, checked against tls_hosts.
    let mut tls_rule_hosts: Vec<(String, Vec<String>)> = Vec::new();
    // The hsts* annotations, per Ingress that has any: (context, the value or None for off).
    let mut hsts: Vec<(String, Option<String>)> = Vec::new();

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
        let ing = ings.len();

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

        // TLS: redirects, the upstream's protocol, client certificates, HSTS.
        let ssl_redirect = flag(
            ann("ssl-redirect"),
            true,
            &format!("{ctx}: ssl-redirect"),
            &mut warnings,
        );
        let force_redirect = flag(
            ann("force-ssl-redirect"),
            false,
            &format!("{ctx}: force-ssl-redirect"),
            &mut warnings,
        );
        let proto = match ann("backend-protocol").map(|p| p.trim().to_ascii_uppercase()) {
            None => Proto::Http,
            Some(p) => match p.as_str() {
                "HTTP" => Proto::Http,
                "HTTPS" => Proto::Https,
                "GRPC" => Proto::Grpc,
                "GRPCS" => Proto::Grpcs,
                _ => {
                    warnings.push(format!("{ctx}: backend-protocol \"{p}\" is not translated (Tollgate speaks HTTP, HTTPS, h2c and h2 to upstreams): HTTP used"));
                    Proto::Http
                }
            },
        };
        if matches!(proto, Proto::Https | Proto::Grpcs) {
            warnings.push(format!("{ctx}: backend-protocol {}: Tollgate verifies the upstream's certificate (against the system's roots, for the Service's DNS name), ingress-nginx does not by default (proxy-ssl-verify \"off\"): set the upstream's tls = {{ ca = \"FILE\" }} for a private CA, or tls = {{ verify = false }} to do as ingress-nginx did", if proto == Proto::Https { "HTTPS" } else { "GRPCS" }));
        }
        let auth = match ann("auth-tls-secret") {
            None => {
                if ann("auth-tls-verify-client").is_some() {
                    warnings.push(format!(
                        "{ctx}: auth-tls-verify-client without auth-tls-secret: ignored (as by ingress-nginx)"
                    ));
                }
                None
            }
            Some(secret) => {
                let mode = match ann("auth-tls-verify-client").map(str::trim) {
                    None | Some("on") => Some(ClientAuth::Require),
                    Some("optional") => Some(ClientAuth::Optional),
                    Some("optional_no_ca") => {
                        warnings.push(format!("{ctx}: auth-tls-verify-client optional_no_ca: Tollgate's client_auth = \"optional\" verifies a certificate that is sent (ingress-nginx passed any to the upstream)"));
                        Some(ClientAuth::Optional)
                    }
                    Some("off") => None,
                    Some(other) => {
                        // ingress-nginx falls back to "on".
                        warnings.push(format!(
                            "{ctx}: auth-tls-verify-client \"{other}\" is not on, off, optional or optional_no_ca: on used (as by ingress-nginx)"
                        ));
                        Some(ClientAuth::Require)
                    }
                };
                let parsed = match secret.trim().split_once('/') {
                    Some((sns, sname)) if k8s_name(sns) && k8s_name(sname) => {
                        Ok(format!("{}/ca.crt", secret_dir(sns, sname)))
                    }
                    _ => Err(format!(
                        "auth-tls-secret \"{secret}\" is not NAMESPACE/SECRET (ingress-nginx denies the location too)"
                    )),
                };
                match (mode, parsed) {
                    (None, _) => None,
                    (Some(m), Ok(ca)) => {
                        if let Some(cn) = ann("auth-tls-match-cn") {
                            Some(Err(format!("auth-tls-match-cn \"{cn}\" (only some certificates of the CA are let in) has no Tollgate equivalent")))
                        } else {
                            Some(Ok((ca, m)))
                        }
                    }
                    (Some(_), Err(e)) => Some(Err(e)),
                }
            }
        };
        let hsts_keys = [
            "hsts",
            "hsts-max-age",
            "hsts-include-subdomains",
            "hsts-preload",
        ];
        if hsts_keys.iter().any(|k| ann(k).is_some()) {
            // ingress-nginx reads these from its ConfigMap only (as annotations it ignores
            // them); taken here as what the controller was configured with.
            let on = flag(ann("hsts"), true, &format!("{ctx}: hsts"), &mut warnings);
            let age = ann("hsts-max-age").map(str::trim).unwrap_or("31536000");
            let sub = flag(
                ann("hsts-include-subdomains"),
                true,
                &format!("{ctx}: hsts-include-subdomains"),
                &mut warnings,
            );
            let preload = flag(
                ann("hsts-preload"),
                false,
                &format!("{ctx}: hsts-preload"),
                &mut warnings,
            );
            if !age.is_empty() && age.bytes().all(|b| b.is_ascii_digit()) {
                let mut v = format!("max-age={age}");
                if sub {
                    v.push_str("; includeSubDomains");
                }
                if preload {
                    v.push_str("; preload");
                }
                hsts.push((ctx.clone(), on.then_some(v)));
            } else {
                warnings.push(format!(
                    "{ctx}: hsts-max-age \"{age}\" is not a number of seconds: hsts not translated"
                ));
            }
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
                    "ssl-redirect",
                    "force-ssl-redirect",
                    "backend-protocol",
                    "auth-tls-secret",
                    "auth-tls-verify-client",
                    "auth-tls-match-cn",
                ];
                if let Some(rest) = k.strip_prefix(ANN) {
                    if !known.contains(&rest) && !hsts_keys.contains(&rest) {
                        warnings.push(format!("{ctx}: annotation {k} is not translated"));
                    }
                }
            }
        }

        let spec = obj.get("spec");
        let tls_list = spec
            .and_then(|s| s.get("tls"))
            .and_then(Value::as_sequence)
            .cloned()
            .unwrap_or_default();
        for (ti, t) in tls_list.iter().enumerate() {
            let hosts: Vec<String> = t
                .get("hosts")
                .and_then(Value::as_sequence)
                .map(|hs| {
                    hs.iter()
                        .filter_map(Value::as_str)
                        .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                        .filter(|h| !h.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            tls_hosts.extend(hosts.iter().cloned());
            match str_at(t, &["secretName"]).map(str::trim) {
                None | Some("") => warnings.push(format!(
                    "{ctx}: tls[{ti}] has no secretName: ingress-nginx serves its default certificate (--default-ssl-certificate) for {}; add that certificate to [tls] certificates (first, to be the default) or these hosts get another's",
                    if hosts.is_empty() { "every host".to_string() } else { hosts.join(", ") }
                )),
                Some(secret) if k8s_name(ns) && k8s_name(secret) => {
                    let entry = certs
                        .entry((ns.to_string(), secret.to_string()))
                        .or_default();
                    entry.0.extend(hosts.iter().cloned());
                    if !entry.1.contains(&ctx) {
                        entry.1.push(ctx.clone());
                    }
                }
                Some(secret) => warnings.push(format!(
                    "{ctx}: tls[{ti}]: Secret \"{secret}\" in namespace \"{ns}\" is not a Kubernetes name: no certificate made"
                )),
            }
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
            let up = format!("{}.{}.{port}{}", slug(ns), slug(svc), proto.suffix());
            upstreams.entry(up.clone()).or_insert_with(|| {
                (
                    format!("{}.{}.svc.cluster.local:{port}", slug(svc), slug(ns)),
                    proto,
                )
            });
            Some(up)
        };

        let mut n = 0;
        let mut rule_hosts = Vec::new();
        let mut push = |host: Option<String>,
                        path: &str,
                        exact: bool,
                        from_exact: bool,
                        upstream: &str,
                        comment: String,
                        acme: bool| {
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
                ing,
                acme,
            });
        };
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
            if let Some(h) = &host {
                rule_hosts.push(h.clone());
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
                // As ingress-nginx: the Ingress's path, not the request's, is exempt.
                let acme = path.starts_with(ACME);
                match ptype {
                    "Exact" => push(host.clone(), path, true, true, &up, label, acme),
                    // ingress-nginx: a plain character prefix (a regex location without `$`).
                    "ImplementationSpecific" => {
                        push(host.clone(), path, false, false, &up, label, acme)
                    }
                    "Prefix" => {
                        let trimmed = path.trim_end_matches('/');
                        if trimmed.is_empty() {
                            push(host.clone(), "/", false, false, &up, label, acme);
                        } else {
                            // Whole segments: the path itself, and what lies below it.
                            push(host.clone(), trimmed, true, false, &up, label.clone(), acme);
                            push(
                                host.clone(),
                                &format!("{trimmed}/"),
                                false,
                                false,
                                &up,
                                label,
                                acme,
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
                    ing,
                    acme: false,
                });
            }
        }
        if !allow.is_empty() && !deny.is_empty() {
            warnings.push(format!("{ctx}: limit-whitelist and denylist-source-range together: in Tollgate an allowed address also skips the deny list; remove denied ranges from the whitelist"));
        }
        if !tls_list.is_empty() {
            tls_rule_hosts.push((ctx.clone(), rule_hosts));
        }
        ings.push(Ing {
            ctx,
            tls: !tls_list.is_empty(),
            ssl_redirect,
            force_redirect,
            auth,
            denied: false,
        });
    }
    if ingresses == 0 {
        return Err(ImportError::NoIngress);
    }

    // TLS is served when there is a certificate to serve.
    let serve_tls = !certs.is_empty();
    if !serve_tls && ings.iter().any(|i| i.tls) {
        warnings.push("spec.tls without any usable secretName: no TLS listener made (Tollgate needs a certificate file); hosts listed there are not redirected to HTTPS".into());
    }
    for (ctx, hosts) in &tls_rule_hosts {
        for h in hosts {
            if !tls_hosts.iter().any(|t| tls_covers(t, h)) {
                warnings.push(format!("{ctx}: host {h} is in no spec.tls hosts: ingress-nginx serves it over TLS (and redirects it) if a certificate of this Ingress names it; Tollgate serves any certificate by the names it holds, but redirects only the hosts listed"));
            }
        }
    }

    // Client certificates: Tollgate's client_ca is server-wide, so it is translated only when
    // every Ingress served over TLS (or asking for client certificates) asks the same; an
    // Ingress whose requirement cannot be kept is denied instead of being served open.
    let mut client: Option<(String, ClientAuth)> = None;
    {
        let concerned: Vec<usize> = (0..ings.len())
            .filter(|&i| ings[i].tls || ings[i].auth.is_some())
            .collect();
        let asked: Vec<&(String, ClientAuth)> = concerned
            .iter()
            .filter_map(|&i| ings[i].auth.as_ref().and_then(|a| a.as_ref().ok()))
            .collect();
        let all_same = |v: &[&(String, ClientAuth)]| v.windows(2).all(|w| w[0] == w[1]);
        let exact = !asked.is_empty() && asked.len() == concerned.len() && all_same(&asked);
        // Optional everywhere: those without it are only asked, never refused.
        let optional = !asked.is_empty()
            && all_same(&asked)
            && asked[0].1 == ClientAuth::Optional
            && concerned
                .iter()
                .all(|&i| !matches!(ings[i].auth, Some(Err(_))));
        if exact || optional {
            client = asked.first().map(|a| (*a).clone());
            if optional && !exact {
                warnings.push("auth-tls-verify-client optional: Tollgate's client_ca is server-wide: clients of every host are asked for a certificate (none is required)".into());
            }
        }
        if !serve_tls && client.is_some() {
            client = None;
        }
        for ing in ings.iter_mut() {
            let why = match &ing.auth {
                None => continue,
                Some(Err(why)) => why.clone(),
                Some(Ok(_)) if !serve_tls => {
                    "auth-tls-secret without a TLS listener (no spec.tls certificate)".into()
                }
                Some(Ok(_)) if client.is_none() => "auth-tls-secret: Tollgate's client_ca and client_auth are server-wide, and the Ingresses served over TLS do not all ask the same".into(),
                Some(Ok(_)) => continue,
            };
            ing.denied = true;
            warnings.push(format!(
                "{}: {why}: its routes answer 403 until you decide (see README, \"Migrating from ingress-nginx\")",
                ing.ctx
            ));
        }
    }

    // HSTS: ingress-nginx's is controller-wide; translated when the Ingresses agree.
    let mut hsts_value: Option<String> = None;
    let mut hsts_note = false;
    if let Some((_, first)) = hsts.first() {
        if hsts.iter().all(|(_, v)| v == first) {
            hsts_value = first.clone();
            warnings.push("hsts annotations are ingress-nginx ConfigMap keys (ingress-nginx ignores them on an Ingress): translated as the server-wide [tls] hsts".into());
        } else {
            let seen: Vec<String> = hsts
                .iter()
                .map(|(c, v)| format!("{c}: {}", v.as_deref().unwrap_or("off")))
                .collect();
            warnings.push(format!(
                "hsts annotations disagree ({}): Tollgate's [tls] hsts is server-wide: not translated",
                seen.join("; ")
            ));
        }
        if !serve_tls && hsts_value.is_some() {
            warnings.push("hsts: no TLS listener made: not translated".into());
            hsts_value = None;
        }
    } else if serve_tls {
        hsts_note = true;
        warnings.push("ingress-nginx sends Strict-Transport-Security over HTTPS by default (ConfigMap hsts: \"true\", max-age=31536000; includeSubDomains); the importer cannot see the ConfigMap: [tls] hsts is left as a comment".into());
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

    // Redirects, as ingress-nginx decides them per location: force-ssl-redirect, or
    // ssl-redirect where the host has a certificate; never an ACME challenge location. A route
    // that requires a client certificate is never served in plain text.
    let redirect = |r: &Route| -> Option<bool> {
        let ing = &ings[r.ing];
        let host_tls = serve_tls
            && r.host
                .as_deref()
                .is_some_and(|h| tls_hosts.iter().any(|t| tls_covers(t, h)));
        let protected = client
            .as_ref()
            .is_some_and(|c| c.1 == ClientAuth::Require && ing.auth.is_some());
        if protected {
            return Some(true);
        }
        if r.acme {
            return Some(false);
        }
        (ing.force_redirect || (ing.ssl_redirect && host_tls)).then_some(true)
    };
    let redirects: Vec<Option<bool>> = routes.iter().map(redirect).collect();
    for (r, red) in routes.iter().zip(&redirects) {
        let ing = &ings[r.ing];
        if *red == Some(true)
            && client.as_ref().is_some_and(|c| c.1 == ClientAuth::Require)
            && ing.auth.is_some()
            && (r.acme || !ing.ssl_redirect)
        {
            warnings.push(format!("{}: redirected to HTTPS although ingress-nginx would not: its Ingress requires a client certificate, which plain HTTP cannot present", r.comment));
        }
    }
    let any_redirect = redirects.contains(&Some(true));
    if any_redirect && !serve_tls {
        warnings.push("force-ssl-redirect without a certificate here: redirects name port 443 (https_port), for TLS served in front of Tollgate; name that load balancer in trusted_proxies: Tollgate believes its X-Forwarded-Proto: https, otherwise every request is redirected again".into());
    }
    let mut denied = Vec::new();

    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Made by `tollgate import-ingress` from {ingresses} Ingress object(s). Check it with\n\
         # `tollgate check FILE`; see README.md (\"Migrating from ingress-nginx\")."
    );
    for w in &warnings {
        let _ = writeln!(out, "# warning: {}", comment(w));
    }
    out.push_str("\n[server]\nlisten = [\"0.0.0.0:8080\"]\n");
    if serve_tls {
        let _ = writeln!(
            out,
            "# HTTPS (HTTP/1.1 and h2): the Service maps port 443 here (the container runs as\n\
             # non-root); redirects name port 443, the Service's.\n\
             tls_listen = [{}]\nhttps_port = 443",
            q(TLS_LISTEN)
        );
    } else if any_redirect {
        out.push_str("# force-ssl-redirect: TLS is served in front of Tollgate, on port 443.\nhttps_port = 443\n");
    }
    out.push_str(
        "admin = \"0.0.0.0:9901\"\n\
         # Like ingress-nginx, X-Forwarded-For is not believed until you name the load balancer\n\
         # in front (its addresses only: any other peer could then forge a client address).\n\
         trusted_proxies = []\n",
    );
    if serve_tls {
        let _ = writeln!(
            out,
            "\n# Each Secret of the Ingresses' spec.tls, mounted read-only at {TLS_MOUNT}/NAMESPACE/SECRET/\n\
             # (a secret volume without subPath: renewed certificates are picked up). The first is\n\
             # served to clients without SNI or with a name no certificate holds (ingress-nginx\n\
             # served its own default certificate there; unknown_sni = \"reject\" refuses them).\n\
             [tls]\ncertificates = ["
        );
        for ((ns, secret), (hosts, by)) in &certs {
            let dir = secret_dir(ns, secret);
            let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
            let _ = writeln!(
                out,
                "  # Secret {ns}/{secret}: {} ({})\n  {{ cert = {}, key = {} }},",
                comment(&if hosts.is_empty() {
                    "no hosts listed".to_string()
                } else {
                    hosts.join(", ")
                }),
                comment(&by.join(", ")),
                q(&format!("{dir}/tls.crt")),
                q(&format!("{dir}/tls.key")),
            );
        }
        out.push_str("]\n");
        match (&hsts_value, hsts_note) {
            (Some(v), _) => {
                let _ = writeln!(out, "hsts = {}", q(v));
            }
            (None, true) => out.push_str(
                "# ingress-nginx's default, if its ConfigMap kept hsts: \"true\":\n\
                 # hsts = \"max-age=31536000; includeSubDomains\"\n",
            ),
            (None, false) => {}
        }
        if let Some((ca, mode)) = &client {
            let _ = writeln!(
                out,
                "# auth-tls-secret: the CA Secret's ca.crt, mounted like the certificates; server-wide\n\
                 # in Tollgate (every Ingress served over TLS asked the same).\n\
                 client_ca = {}\nclient_auth = {}",
                q(ca),
                q(mode.as_str())
            );
        }
    }
    for (name, (target, proto)) in &upstreams {
        let _ = writeln!(out, "\n[upstreams.{}]\ntargets = [{}]", q(name), q(target));
        if matches!(proto, Proto::Https | Proto::Grpcs) {
            out.push_str(
                "# backend-protocol HTTPS/GRPCS. Tollgate verifies the certificate against the system's\n\
                 # roots and the target's name; ingress-nginx did not verify it (proxy-ssl-verify \"off\").\n\
                 # A private CA: tls = { ca = \"FILE\", sni = \"NAME\" }; no verification, as before:\n\
                 # tls = { verify = false }.\n\
                 tls = true\n",
            );
        }
        if matches!(proto, Proto::Grpc | Proto::Grpcs) {
            out.push_str("# backend-protocol GRPC/GRPCS: HTTP/2 to the targets.\nh2 = true\n");
        }
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
    for (r, red) in routes.iter().zip(&redirects) {
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
        let _ = writeln!(out, "{key} = {}", q(&r.path));
        if ings[r.ing].denied {
            denied.push(r.name.clone());
            let _ = writeln!(
                out,
                "# DENIED: its Ingress requires client certificates that cannot be translated (see the\n\
                 # warnings). Once they are ([tls] client_ca), replace respond with:\n\
                 # upstream = {}\n\
                 respond = {{ status = 403, body = \"client certificate required\\n\" }}",
                q(&r.upstream)
            );
        } else {
            let _ = writeln!(out, "upstream = {}", q(&r.upstream));
        }
        match red {
            Some(true) => out.push_str("https_redirect = true\n"),
            Some(false) => out.push_str(
                "# ingress-nginx never redirects ACME HTTP-01 challenges (no-tls-redirect-locations).\n\
                 https_redirect = false\n",
            ),
            None => {}
        }
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
        denied,
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

    /// (cert, key) of every `[tls] certificates` entry, in order.
    fn certs(c: &crate::Config) -> Vec<(String, String)> {
        c.tls
            .as_ref()
            .map(|t| {
                t.certificates
                    .iter()
                    .map(|f| (f.cert.display().to_string(), f.key.display().to_string()))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn route<'c>(c: &'c crate::Config, name: &str) -> &'c crate::RouteConfig {
        c.routes
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("no route {name}"))
    }

    fn upstream<'c>(c: &'c crate::Config, name: &str) -> &'c crate::UpstreamConfig {
        c.upstreams
            .iter()
            .find(|u| u.name == name)
            .unwrap_or_else(|| panic!("no upstream {name}"))
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
        // spec.tls: the Secret's files, a listener, and ingress-nginx's redirect for that host.
        let tls = c.tls.as_ref().expect("[tls]");
        assert_eq!(
            certs(&c),
            [(
                "/etc/tollgate/tls/default/testsecret-tls/tls.crt".into(),
                "/etc/tollgate/tls/default/testsecret-tls/tls.key".into()
            )]
        );
        assert_eq!(tls.hsts, None);
        assert_eq!(
            c.server.tls_listen,
            ["0.0.0.0:8443".parse().expect("an address")]
        );
        assert_eq!(c.server.https_port, Some(443));
        assert!(!c.server.https_redirect);
        let redirects: Vec<_> = c.routes.iter().map(|r| r.https_redirect).collect();
        assert_eq!(redirects, [Some(true), None, None]);
        let w = i.warnings.join("\n");
        for want in [
            "port \"http\" is named",
            "wildcard host *.foo.com",
            "defaultBackend: the same host and path",
            "host second.bar.com is in no spec.tls hosts",
            "Strict-Transport-Security over HTTPS by default",
        ] {
            assert!(w.contains(want), "{want} in {w}");
        }
        assert!(!w.contains("tls is not translated"), "{w}");
        assert!(i.toml.contains("# warning: "), "warnings in the output too");
        assert!(i
            .toml
            .contains("# hsts = \"max-age=31536000; includeSubDomains\""));
        assert!(i.denied.is_empty());
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

    /// One Ingress per document; `extra` goes under metadata (annotations), `spec` as is.
    fn ing(ns: &str, name: &str, annotations: &[(&str, &str)], spec: &str) -> String {
        let mut y = format!(
            "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  namespace: {ns}\n"
        );
        if !annotations.is_empty() {
            y.push_str("  annotations:\n");
            for (k, v) in annotations {
                y.push_str(&format!("    nginx.ingress.kubernetes.io/{k}: \"{v}\"\n"));
            }
        }
        y.push_str("spec:\n");
        for line in spec.trim_matches('\n').lines() {
            y.push_str("  ");
            y.push_str(line);
            y.push('\n');
        }
        y
    }

    fn host_rule(host: &str, path: &str, svc: &str) -> String {
        format!("- host: {host}\n  http:\n    paths:\n    - {{path: {path}, pathType: Prefix, backend: {{service: {{name: {svc}, port: {{number: 80}}}}}}}}\n")
    }

    #[test]
    fn spec_tls_two_hosts_two_secrets_become_certificates_once_each_in_a_stable_order() {
        let a = ing(
            "shop",
            "web",
            &[],
            &format!(
                "tls:\n- hosts: [www.example.com]\n  secretName: www-tls\n- hosts: [api.example.com]\n  secretName: api-tls\nrules:\n{}{}",
                host_rule("www.example.com", "/", "web"),
                host_rule("api.example.com", "/", "api")
            ),
        );
        // The same Secret again (another Ingress), a tls entry without secretName, a Secret
        // name that would leave the mount folder.
        let b = ing(
            "shop",
            "admin",
            &[],
            &format!(
                "tls:\n- hosts: [www.example.com]\n  secretName: www-tls\n- hosts: [old.example.com]\n- hosts: [x.example.com]\n  secretName: ../../../etc/ssl\nrules:\n{}",
                host_rule("www.example.com", "/admin", "admin")
            ),
        );
        let i = import(&format!("{b}{a}")).expect("import");
        let c = config(&i);
        let dir = "/etc/tollgate/tls/shop";
        assert_eq!(
            certs(&c),
            [
                (
                    format!("{dir}/api-tls/tls.crt"),
                    format!("{dir}/api-tls/tls.key")
                ),
                (
                    format!("{dir}/www-tls/tls.crt"),
                    format!("{dir}/www-tls/tls.key")
                ),
            ],
            "sorted by namespace and Secret, whatever the input's order:\n{}",
            i.toml
        );
        assert_eq!(
            c.server.tls_listen,
            ["0.0.0.0:8443".parse().expect("an address")]
        );
        assert_eq!(c.server.https_port, Some(443));
        let w = i.warnings.join("\n");
        assert!(w.contains("tls[1] has no secretName: ingress-nginx serves its default certificate (--default-ssl-certificate) for old.example.com"), "{w}");
        assert!(
            w.contains(
                "Secret \"../../../etc/ssl\" in namespace \"shop\" is not a Kubernetes name"
            ),
            "{w}"
        );
        assert!(!i.toml.contains("etc/ssl/tls.crt"), "{}", i.toml);
        assert!(
            i.toml.contains(
                "# Secret shop/www-tls: www.example.com (Ingress shop/admin, Ingress shop/web)"
            ),
            "{}",
            i.toml
        );
        // Reordering the input gives the same file but for the order of routes.
        let j = import(&format!("{a}{b}")).expect("import");
        assert_eq!(certs(&config(&j)), certs(&c));
    }

    #[test]
    fn redirects_follow_ingress_nginx_per_location_and_spare_acme_challenges() {
        let tls = "tls:\n- hosts: [a.example.com]\n  secretName: a-tls\n";
        let y = [
            // TLS for its host: redirected (ssl-redirect defaults to true), but not its ACME path.
            ing(
                "web",
                "on",
                &[],
                &format!(
                    "{tls}rules:\n{}- host: a.example.com\n  http:\n    paths:\n    - {{path: /.well-known/acme-challenge/tok, pathType: ImplementationSpecific, backend: {{service: {{name: solver, port: {{number: 8089}}}}}}}}\n",
                    host_rule("a.example.com", "/", "a")
                ),
            ),
            // The same host, ssl-redirect "false": not redirected.
            ing(
                "web",
                "off",
                &[("ssl-redirect", "false")],
                &format!("rules:\n{}", host_rule("a.example.com", "/plain", "a")),
            ),
            // Another Ingress's rule for the TLS host: redirected (the host has a certificate).
            ing(
                "web",
                "other",
                &[],
                &format!("rules:\n{}", host_rule("a.example.com", "/other", "a")),
            ),
            // force-ssl-redirect without TLS of its own: redirected.
            ing(
                "web",
                "force",
                &[("force-ssl-redirect", "true")],
                &format!("rules:\n{}", host_rule("c.example.com", "/", "c")),
            ),
            // No TLS for its host, no force: served in plain text.
            ing(
                "web",
                "plain",
                &[],
                &format!("rules:\n{}", host_rule("d.example.com", "/", "d")),
            ),
            // A typo: ingress-nginx's default (true) kept, and named.
            ing(
                "web",
                "typo",
                &[("ssl-redirect", "nope")],
                &format!("rules:\n{}", host_rule("a.example.com", "/typo", "a")),
            ),
        ]
        .concat();
        let i = import(&y).expect("import");
        let c = config(&i);
        assert!(!c.server.https_redirect, "decided per route");
        let want = [
            ("web.on.1", Some(true)),
            ("web.on.2", Some(false)),
            ("web.off.1", None),
            ("web.off.2", None),
            ("web.other.1", Some(true)),
            ("web.force.1", Some(true)),
            ("web.plain.1", None),
            ("web.typo.1", Some(true)),
        ];
        for (name, red) in want {
            assert_eq!(route(&c, name).https_redirect, red, "{name}:\n{}", i.toml);
        }
        assert_eq!(
            route(&c, "web.on.2").path_prefix,
            "/.well-known/acme-challenge/tok"
        );
        assert!(i
            .toml
            .contains("ingress-nginx never redirects ACME HTTP-01 challenges"));
        assert!(
            i.warnings
                .iter()
                .any(|w| w.contains("ssl-redirect \"nope\" is not true or false: true used")),
            "{:?}",
            i.warnings
        );
    }

    #[test]
    fn force_ssl_redirect_without_any_certificate_names_port_443() {
        let y = ing(
            "web",
            "force",
            &[("force-ssl-redirect", "true")],
            &format!("rules:\n{}", host_rule("c.example.com", "/", "c")),
        );
        let i = import(&y).expect("import");
        let c = config(&i);
        assert!(c.tls.is_none() && c.server.tls_listen.is_empty());
        assert_eq!(c.server.https_port, Some(443));
        assert_eq!(c.routes[0].https_redirect, Some(true));
        assert!(i.warnings.iter().any(|w| w.contains("TLS served in front")));
    }

    #[test]
    fn spec_tls_without_a_secret_makes_no_listener_and_no_redirect() {
        let y = ing(
            "web",
            "nosecret",
            &[],
            &format!(
                "tls:\n- hosts: [a.example.com]\nrules:\n{}",
                host_rule("a.example.com", "/", "a")
            ),
        );
        let i = import(&y).expect("import");
        let c = config(&i);
        assert!(
            c.tls.is_none() && c.server.tls_listen.is_empty(),
            "{}",
            i.toml
        );
        assert_eq!(c.routes[0].https_redirect, None);
        let w = i.warnings.join("\n");
        assert!(
            w.contains("no TLS listener made") && w.contains("has no secretName"),
            "{w}"
        );
    }

    #[test]
    fn backend_protocol_https_grpc_grpcs_become_upstream_tls_and_h2() {
        let y = [
            ("plain", ""),
            ("https", "HTTPS"),
            ("grpc", "GRPC"),
            ("grpcs", "grpcs"),
            ("ajp", "AJP"),
        ]
        .iter()
        .map(|(name, proto)| {
            let anns: Vec<(&str, &str)> = if proto.is_empty() {
                Vec::new()
            } else {
                vec![("backend-protocol", *proto)]
            };
            // Every Ingress points at the same Service port.
            ing(
                "apps",
                name,
                &anns,
                &format!(
                    "rules:\n{}",
                    host_rule(&format!("{name}.example.com"), "/", "svc")
                ),
            )
        })
        .collect::<String>();
        let i = import(&y).expect("import");
        let c = config(&i);
        let plain = upstream(&c, "apps.svc.80");
        assert!(plain.tls.is_none() && !plain.h2);
        let https = upstream(&c, "apps.svc.80.https");
        let t = https.tls.as_ref().expect("tls");
        assert!(
            t.verify && t.ca.is_none() && t.sni.is_none(),
            "verification on, system roots"
        );
        assert!(!https.h2);
        let grpc = upstream(&c, "apps.svc.80.grpc");
        assert!(grpc.tls.is_none() && grpc.h2);
        let grpcs = upstream(&c, "apps.svc.80.grpcs");
        assert!(grpcs.tls.as_ref().is_some_and(|t| t.verify) && grpcs.h2);
        assert_eq!(
            c.upstreams.len(),
            4,
            "AJP falls back to HTTP: the plain upstream"
        );
        assert_eq!(
            route(&c, "apps.https.1").action,
            crate::RouteAction::Upstream(
                c.upstreams
                    .iter()
                    .position(|u| u.name == "apps.svc.80.https")
                    .expect("the https upstream")
            )
        );
        assert!(i
            .toml
            .contains("ingress-nginx did not verify it (proxy-ssl-verify \"off\")"));
        assert!(i.toml.contains("tls = { verify = false }"));
        let w = i.warnings.join("\n");
        assert!(
            w.contains("backend-protocol \"AJP\" is not translated"),
            "{w}"
        );
        assert!(
            w.contains("Ingress apps/https: backend-protocol HTTPS: Tollgate verifies"),
            "{w}"
        );
    }

    #[test]
    fn auth_tls_that_every_tls_ingress_shares_becomes_the_server_client_ca() {
        let tls = |host: &str| format!("tls:\n- hosts: [{host}]\n  secretName: {host}\nrules:\n");
        let y = [
            ing(
                "secure",
                "one",
                &[
                    ("auth-tls-secret", "secure/client-ca"),
                    ("auth-tls-verify-client", "on"),
                ],
                &format!(
                    "{}{}",
                    tls("one.example.com"),
                    host_rule("one.example.com", "/", "one")
                ),
            ),
            // No verify-client: "on" is ingress-nginx's default; ssl-redirect "false" cannot
            // hold: plain HTTP carries no client certificate.
            ing(
                "secure",
                "two",
                &[
                    ("auth-tls-secret", "secure/client-ca"),
                    ("ssl-redirect", "false"),
                ],
                &format!(
                    "{}{}",
                    tls("two.example.com"),
                    host_rule("two.example.com", "/", "two")
                ),
            ),
            // No TLS, no client certificates: not concerned.
            ing(
                "secure",
                "open",
                &[],
                &format!("rules:\n{}", host_rule("open.example.com", "/", "open")),
            ),
        ]
        .concat();
        let i = import(&y).expect("import");
        let c = config(&i);
        let t = c.tls.as_ref().expect("[tls]");
        assert_eq!(
            t.client_ca.as_deref(),
            Some(std::path::Path::new(
                "/etc/tollgate/tls/secure/client-ca/ca.crt"
            ))
        );
        assert_eq!(t.client_auth, crate::ClientAuth::Require);
        assert!(i.denied.is_empty(), "{:?}", i.denied);
        assert_eq!(route(&c, "secure.one.1").https_redirect, Some(true));
        assert_eq!(route(&c, "secure.two.1").https_redirect, Some(true));
        assert_eq!(route(&c, "secure.open.1").https_redirect, None);
        assert!(i.warnings.iter().any(|w| w.contains(
            "two.example.com/ (Prefix): redirected to HTTPS although ingress-nginx would not"
        )));
        assert!(i.toml.contains("client_auth = \"require\""));

        // optional and optional_no_ca: "optional".
        let y = ing(
            "secure",
            "opt",
            &[
                ("auth-tls-secret", "secure/client-ca"),
                ("auth-tls-verify-client", "optional_no_ca"),
            ],
            &format!(
                "{}{}",
                tls("opt.example.com"),
                host_rule("opt.example.com", "/", "opt")
            ),
        );
        let i = import(&y).expect("import");
        let c = config(&i);
        assert_eq!(
            c.tls.as_ref().expect("[tls]").client_auth,
            crate::ClientAuth::Optional
        );
        assert!(i.warnings.iter().any(|w| w.contains("optional_no_ca")));
    }

    #[test]
    fn auth_tls_that_cannot_be_server_wide_denies_instead_of_serving_open() {
        let tls = |host: &str| format!("tls:\n- hosts: [{host}]\n  secretName: {host}\nrules:\n");
        let protected = ing(
            "secure",
            "mtls",
            &[("auth-tls-secret", "secure/client-ca")],
            &format!(
                "{}{}",
                tls("mtls.example.com"),
                host_rule("mtls.example.com", "/", "api")
            ),
        );
        // Another host over TLS without client certificates: "require" server-wide would shut
        // its clients out, nothing would leave mtls.example.com open.
        let public = ing(
            "secure",
            "public",
            &[],
            &format!(
                "{}{}",
                tls("www.example.com"),
                host_rule("www.example.com", "/", "www")
            ),
        );
        let i = import(&format!("{protected}{public}")).expect("import");
        let c = config(&i);
        assert!(c.tls.as_ref().expect("[tls]").client_ca.is_none());
        assert_eq!(i.denied, ["secure.mtls.1"]);
        assert!(matches!(
            route(&c, "secure.mtls.1").action,
            crate::RouteAction::Respond { status: 403, .. }
        ));
        assert!(matches!(
            route(&c, "secure.public.1").action,
            crate::RouteAction::Upstream(_)
        ));
        assert!(
            i.toml.contains("# upstream = \"secure.api.80\""),
            "{}",
            i.toml
        );
        assert!(i.warnings.iter().any(|w| w.contains(
            "Ingress secure/mtls: auth-tls-secret: Tollgate's client_ca and client_auth are server-wide"
        )));

        // Two Ingresses asking for different CAs.
        let other = ing(
            "secure",
            "other",
            &[("auth-tls-secret", "secure/other-ca")],
            &format!(
                "{}{}",
                tls("o.example.com"),
                host_rule("o.example.com", "/", "o")
            ),
        );
        let i = import(&format!("{protected}{other}")).expect("import");
        config(&i);
        assert_eq!(i.denied, ["secure.mtls.1", "secure.other.1"]);

        // A secret not written NAMESPACE/SECRET, and auth-tls-match-cn: denied though alone.
        for anns in [
            vec![("auth-tls-secret", "client-ca")],
            vec![
                ("auth-tls-secret", "secure/client-ca"),
                ("auth-tls-match-cn", "CN=partner"),
            ],
        ] {
            let y = ing(
                "secure",
                "mtls",
                &anns,
                &format!(
                    "{}{}",
                    tls("mtls.example.com"),
                    host_rule("mtls.example.com", "/", "api")
                ),
            );
            let i = import(&y).expect("import");
            let c = config(&i);
            assert!(c.tls.as_ref().expect("[tls]").client_ca.is_none());
            assert_eq!(i.denied, ["secure.mtls.1"], "{anns:?}");
        }

        // Client certificates without TLS at all: nothing can ask for them.
        let y = ing(
            "secure",
            "mtls",
            &[("auth-tls-secret", "secure/client-ca")],
            &format!("rules:\n{}", host_rule("mtls.example.com", "/", "api")),
        );
        let i = import(&y).expect("import");
        config(&i);
        assert_eq!(i.denied, ["secure.mtls.1"]);
    }

    #[test]
    fn hsts_annotations_translate_when_they_agree() {
        let tls = |host: &str| format!("tls:\n- hosts: [{host}]\n  secretName: {host}\nrules:\n");
        let one = ing(
            "web",
            "one",
            &[("hsts-max-age", "600"), ("hsts-preload", "true")],
            &format!(
                "{}{}",
                tls("one.example.com"),
                host_rule("one.example.com", "/", "one")
            ),
        );
        let i = import(&one).expect("import");
        let c = config(&i);
        assert_eq!(
            c.tls.as_ref().expect("[tls]").hsts.as_deref(),
            Some("max-age=600; includeSubDomains; preload")
        );
        assert!(i.warnings.iter().any(|w| w.contains("ConfigMap keys")));

        let two = ing(
            "web",
            "two",
            &[("hsts", "false")],
            &format!(
                "{}{}",
                tls("two.example.com"),
                host_rule("two.example.com", "/", "two")
            ),
        );
        let i = import(&format!("{one}{two}")).expect("import");
        let c = config(&i);
        assert_eq!(c.tls.as_ref().expect("[tls]").hsts, None);
        assert!(
            i.warnings
                .iter()
                .any(|w| w.contains("hsts annotations disagree")
                    && w.contains("Ingress web/two: off")),
            "{:?}",
            i.warnings
        );
    }
}
