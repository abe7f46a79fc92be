//! The served config: BASE.toml with the cluster's translation added. BASE's tables win
//! where both set a key; the cluster's `[server]` cannot move the listeners (they are the
//! process's); a cluster upstream, limit or auth whose name BASE already uses is dropped
//! with every cluster route that names it, so that an Ingress can neither take over a BASE
//! definition nor break the reload for everyone else.

use toml::{Table, Value};

/// The merged TOML text, and what was dropped (one line each).
pub fn merge(base: &str, cluster: &str) -> Result<(String, Vec<String>), String> {
    let mut out: Table = base.parse().map_err(|e| format!("the base config: {e}"))?;
    let cluster: Table = cluster
        .parse()
        .map_err(|e| format!("the cluster's translation: {e}"))?;
    let mut dropped_names = Vec::new();
    let mut problems = Vec::new();
    let mut cluster_routes = Vec::new();
    let mut cluster_passthrough = Vec::new();
    let base_certificates = has_certificates(out.get("tls"));
    let base_limits: Vec<String> = match out.get("limits") {
        Some(Value::Table(t)) => t.keys().cloned().collect(),
        _ => Vec::new(),
    };
    for (key, value) in cluster {
        if let ("tls", Value::Table(c)) = (key.as_str(), &value) {
            client_certificates(out.get("tls"), base_certificates, c)?;
        }
        match (key.as_str(), out.get_mut(&key), value) {
            ("tls", Some(Value::Table(b)), Value::Table(c)) => tls(b, c),
            ("server", Some(Value::Table(b)), Value::Table(mut c)) => {
                for fixed in ["listen", "tls_listen", "admin"] {
                    c.remove(fixed);
                }
                fill(b, c);
            }
            ("server", None, Value::Table(mut c)) => {
                for fixed in ["listen", "tls_listen", "admin"] {
                    c.remove(fixed);
                }
                out.insert(key, Value::Table(c));
            }
            ("upstreams" | "limits" | "auth", Some(Value::Table(b)), Value::Table(c)) => {
                for (name, def) in c {
                    if b.contains_key(&name) {
                        problems.push(format!("{key}.{name}: BASE.toml defines it already: the cluster's is not served, nor the routes that name it"));
                        dropped_names.push(name);
                    } else {
                        b.insert(name, def);
                    }
                }
            }
            ("routes", _, Value::Array(c)) => cluster_routes = c,
            ("tls_passthrough", _, Value::Array(c)) => cluster_passthrough = c,
            (_, Some(Value::Table(b)), Value::Table(c)) => fill(b, c),
            (_, Some(_), _) => {}
            (_, None, v) => {
                out.insert(key, v);
            }
        }
    }
    // A route name BASE uses would make the whole config invalid (names are unique): the
    // cluster's route of that name is not served.
    let base_routes: Vec<String> = match out.get("routes") {
        Some(Value::Array(rs)) => rs
            .iter()
            .filter_map(|r| r.get("name")?.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    let base_hosts = BaseHosts::of(out.get("routes"));
    cluster_routes.retain(|r| {
        let name = r.get("name").and_then(Value::as_str).unwrap_or("");
        if let Some(why) = base_hosts.taken(r) {
            problems.push(format!("route {name}: {why}: not served"));
            return false;
        }
        if base_routes.iter().any(|b| b == name) {
            problems.push(format!(
                "route {name}: BASE.toml has a route of that name: the cluster's is not served"
            ));
            return false;
        }
        keep_route(r, &dropped_names, &mut problems) && own_limits(r, &base_limits, &mut problems)
    });
    passthrough(
        &mut out,
        cluster_passthrough,
        &base_hosts,
        &dropped_names,
        &mut problems,
    );
    if !cluster_routes.is_empty() {
        match out.get_mut("routes") {
            Some(Value::Array(b)) => b.extend(cluster_routes),
            _ => {
                out.insert("routes".into(), Value::Array(cluster_routes));
            }
        }
    }
    listener_certificates(&mut out, base_certificates, &mut problems);
    Ok((toml::to_string(&out).map_err(|e| e.to_string())?, problems))
}

/// The cluster's `[[tls_passthrough]]` entries beside BASE's: one that names a host BASE
/// serves or passes through itself (or covers one by a wildcard), or an upstream BASE's
/// definition won, is not served (a problem each): a tenant never takes BASE's TLS.
fn passthrough(
    out: &mut Table,
    cluster: Vec<Value>,
    base_hosts: &BaseHosts,
    dropped_names: &[String],
    problems: &mut Vec<String>,
) {
    let base_passed: Vec<String> = match out.get("tls_passthrough") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|p| p.get("hosts")?.as_array().cloned())
            .flatten()
            .filter_map(|h| h.as_str().map(str::to_ascii_lowercase))
            .collect(),
        _ => Vec::new(),
    };
    let passed = BaseHosts {
        hosts: base_passed,
        hostless: false,
    };
    let kept: Vec<Value> = cluster
        .into_iter()
        .filter(|p| {
            let hosts: Vec<String> = p
                .get("hosts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|h| h.as_str().map(|h| h.trim_end_matches('.').to_ascii_lowercase()))
                .collect();
            let upstream = p.get("upstream").and_then(Value::as_str).unwrap_or("");
            if let Some(h) = hosts.iter().find(|h| base_hosts.covers(h) || passed.covers(h)) {
                problems.push(format!(
                    "tls_passthrough of {h}: the host is BASE.toml's: not passed through"
                ));
                return false;
            }
            if dropped_names.iter().any(|d| d == upstream) {
                problems.push(format!(
                    "tls_passthrough to {upstream}: BASE.toml defines that upstream: not passed through"
                ));
                return false;
            }
            true
        })
        .collect();
    if kept.is_empty() {
        return;
    }
    match out.get_mut("tls_passthrough") {
        Some(Value::Array(b)) => b.extend(kept),
        _ => {
            out.insert("tls_passthrough".into(), Value::Array(kept));
        }
    }
}

/// Client certificates are the listeners' (every host of them asks): an Ingress's
/// `auth-tls-*` (the cluster's `client_ca` and `client_auth`, which the importer makes only
/// when every Ingress served over TLS agrees) stands where BASE.toml sets the same, or sets
/// neither and serves no certificate of its own (the listeners are the cluster's). Else the
/// translation is refused, so the check leaves those Ingresses out: a tenant never imposes
/// client certificates on BASE's hosts, nor is served looser than it asked because BASE
/// says otherwise.
fn client_certificates(
    base: Option<&Value>,
    base_certificates: bool,
    cluster: &Table,
) -> Result<(), String> {
    let keys = ["client_ca", "client_auth"];
    let asks = keys.iter().any(|k| cluster.contains_key(*k));
    let base_sets = keys.iter().any(|k| base.and_then(|b| b.get(k)).is_some());
    if !asks || (!base_sets && !base_certificates) {
        return Ok(());
    }
    for k in keys {
        let (b, c) = (base.and_then(|b| b.get(k)), cluster.get(k));
        if b != c {
            return Err(format!(
                "tls.{k}: an Ingress asks for client certificates (auth-tls-secret) that BASE.toml's [tls] does not set alike ({}): client certificates are the listeners', and BASE.toml serves certificates of its own or sets client certificates otherwise",
                c.map(Value::to_string).unwrap_or_default()
            ));
        }
    }
    Ok(())
}

fn has_certificates(tls: Option<&Value>) -> bool {
    ["certificates", "certificate_dirs"].iter().any(|k| {
        tls.and_then(|t| t.get(k))
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
    })
}

/// The cluster's `[tls]` in BASE's: its certificates after BASE's (BASE's first one stays the
/// one served for names no certificate holds), the rest filling what BASE leaves out.
fn tls(base: &mut Table, mut cluster: Table) {
    if let Some(Value::Array(theirs)) = cluster.remove("certificates") {
        match base.get_mut("certificates") {
            Some(Value::Array(ours)) => {
                for c in theirs {
                    if !ours.iter().any(|o| o.get("cert") == c.get("cert")) {
                        ours.push(c);
                    }
                }
            }
            _ => {
                base.insert("certificates".into(), Value::Array(theirs));
            }
        }
    }
    fill(base, cluster);
}

/// With TLS listeners (BASE's `server.tls_listen`) and no certificate of BASE's, the default
/// certificate ([`crate::secrets::default_paths`]) comes first, for names no Secret holds, as
/// ingress-nginx serves its own; without them, the cluster's `[tls]` has nowhere to be served.
fn listener_certificates(out: &mut Table, base_certificates: bool, problems: &mut Vec<String>) {
    let listens = out
        .get("server")
        .and_then(|s| s.get("tls_listen"))
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if !listens {
        if !base_certificates && out.remove("tls").is_some() {
            problems.push(
                "tls: BASE.toml has no server.tls_listen: the Ingresses' spec.tls certificates are not served".into(),
            );
        }
        return;
    }
    if base_certificates {
        return;
    }
    let (cert, key) = crate::secrets::default_paths();
    let mut default = Table::new();
    default.insert("cert".into(), Value::String(cert.display().to_string()));
    default.insert("key".into(), Value::String(key.display().to_string()));
    let tls = out
        .entry("tls")
        .or_insert_with(|| Value::Table(Table::new()));
    if let Value::Table(t) = tls {
        match t.get_mut("certificates") {
            Some(Value::Array(a)) => a.insert(0, Value::Table(default)),
            _ => {
                t.insert(
                    "certificates".into(),
                    Value::Array(vec![Value::Table(default)]),
                );
            }
        }
    }
}

/// The hosts BASE's routes serve (their `host` and `aliases`, lower case), and whether any
/// of its routes has no host.
struct BaseHosts {
    hosts: Vec<String>,
    hostless: bool,
}

impl BaseHosts {
    fn of(routes: Option<&Value>) -> Self {
        let mut b = BaseHosts {
            hosts: Vec::new(),
            hostless: false,
        };
        for r in routes.and_then(Value::as_array).into_iter().flatten() {
            match r.get("host").and_then(Value::as_str) {
                Some(h) => b.hosts.push(h.trim_end_matches('.').to_ascii_lowercase()),
                None => b.hostless = true,
            }
            if let Some(Value::Array(a)) = r.get("aliases") {
                b.hosts.extend(
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(|h| h.trim_end_matches('.').to_ascii_lowercase()),
                );
            }
        }
        b
    }

    fn covers(&self, host: &str) -> bool {
        self.hosts.iter().any(|b| {
            b == host
                || b.strip_prefix("*.").is_some_and(|parent| {
                    host.split_once('.').is_some_and(|(_, rest)| rest == parent)
                })
                || host
                    .strip_prefix("*.")
                    .is_some_and(|parent| b.split_once('.').is_some_and(|(_, rest)| rest == parent))
        })
    }

    /// Why a cluster route may not be served beside BASE's: it names a host BASE serves (or
    /// one a BASE wildcard covers, or a wildcard over a BASE host), or it has no host while
    /// BASE has host-less routes (it could take a longer prefix of them). BASE's host-less
    /// routes are otherwise a default: an Ingress's own host is its own.
    fn taken(&self, r: &Value) -> Option<String> {
        let mut hosts: Vec<String> = r
            .get("host")
            .and_then(Value::as_str)
            .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
            .into_iter()
            .collect();
        if let Some(Value::Array(a)) = r.get("aliases") {
            hosts.extend(
                a.iter()
                    .filter_map(Value::as_str)
                    .map(|h| h.trim_end_matches('.').to_ascii_lowercase()),
            );
        }
        if r.get("host").is_none() {
            return self
                .hostless
                .then(|| "no host, and BASE.toml has routes without one".to_string());
        }
        hosts
            .into_iter()
            .find(|h| self.covers(h))
            .map(|h| format!("host {h} is BASE.toml's"))
    }
}

/// BASE's keys stay; the cluster's fill what BASE leaves out, table by table.
fn fill(base: &mut Table, cluster: Table) {
    for (k, v) in cluster {
        match (base.get_mut(&k), v) {
            (Some(Value::Table(b)), Value::Table(c)) => fill(b, c),
            (Some(_), _) => {}
            (None, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Whether a cluster route names only BASE's limits and its own namespace's (the importer
/// names an Ingress's limits `NAMESPACE.INGRESS.KIND`, and a namespace holds no dot): a
/// `tollgate.io/limits` annotation cannot share another tenant's counters. A Gateway API
/// route (`gateway:...`) carries the RateLimitPolicies' limits (`policy:...`) the
/// translation placed by their targets: a Gateway's owner's policy reaches the routes of
/// every namespace its listeners take, as the Gateway API means it.
fn own_limits(r: &Value, base: &[String], problems: &mut Vec<String>) -> bool {
    let name = r.get("name").and_then(Value::as_str).unwrap_or("?");
    let ns = name.split('.').next().unwrap_or("");
    let gateway_api = name.starts_with("gateway:");
    let foreign: Vec<&str> = r
        .get("limits")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|l| {
            // An Ingress's own namespace's policies (a policy targets only its namespace).
            let own = if gateway_api {
                l.starts_with("policy:")
            } else {
                l.starts_with(&format!("{ns}.")) || l.starts_with(&format!("policy:{ns}/"))
            };
            !base.iter().any(|b| b == l) && !own
        })
        .collect();
    if foreign.is_empty() {
        return true;
    }
    problems.push(format!(
        "route {name}: names limits of another namespace ({}): not served; tollgate.io/limits names BASE.toml limits",
        foreign.join(", ")
    ));
    false
}

/// Whether a cluster route stays: not if it names a dropped definition (its upstream, a
/// limit, its auth or its canary's upstream).
fn keep_route(r: &Value, names: &[String], problems: &mut Vec<String>) -> bool {
    let s = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_string);
    let mut named: Vec<String> = Vec::new();
    named.extend(s("upstream"));
    named.extend(s("auth"));
    if let Some(Value::Array(ls)) = r.get("limits") {
        named.extend(ls.iter().filter_map(Value::as_str).map(str::to_string));
    }
    if let Some(u) = r
        .get("canary")
        .and_then(|c| c.get("upstream"))
        .and_then(Value::as_str)
    {
        named.push(u.to_string());
    }
    if named.iter().any(|n| names.contains(n)) {
        let name = s("name").unwrap_or_else(|| "?".into());
        problems.push(format!(
            "route {name}: names a definition BASE.toml holds: not served"
        ));
        return false;
    }
    true
}

#[cfg(test)]
mod tests;
