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
    for (key, value) in cluster {
        match (key.as_str(), out.get_mut(&key), value) {
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
        keep_route(r, &dropped_names, &mut problems)
    });
    if !cluster_routes.is_empty() {
        match out.get_mut("routes") {
            Some(Value::Array(b)) => b.extend(cluster_routes),
            _ => {
                out.insert("routes".into(), Value::Array(cluster_routes));
            }
        }
    }
    Ok((toml::to_string(&out).map_err(|e| e.to_string())?, problems))
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
mod tests {
    use super::*;

    #[test]
    fn base_wins_and_the_cluster_adds() {
        let base = "[server]\nlisten = [\"127.0.0.1:1\"]\nhsts = true\n\n[upstreams.api]\ntargets = [\"127.0.0.1:2\"]\n\n[[routes]]\nname = \"api\"\npath_prefix = \"/api\"\nupstream = \"api\"\n";
        let cluster = "[server]\nlisten = [\"0.0.0.0:8080\"]\nadmin = \"0.0.0.0:9901\"\nhost_fallthrough = false\nhsts = false\n\n[upstreams.\"shop.web.80\"]\ntargets = [\"web.shop.svc.cluster.local:80\"]\n\n[[routes]]\nname = \"shop.web.1\"\nhost = \"shop.example\"\npath_prefix = \"/\"\nupstream = \"shop.web.80\"\n";
        let (text, problems) = merge(base, cluster).expect("merges");
        assert!(problems.is_empty());
        let t: Table = text.parse().expect("toml");
        assert_eq!(t["server"]["listen"].as_array().expect("listen").len(), 1);
        assert_eq!(
            t["server"]["listen"][0].as_str(),
            Some("127.0.0.1:1"),
            "the cluster cannot move listeners"
        );
        assert!(t["server"].get("admin").is_none());
        assert_eq!(t["server"]["hsts"].as_bool(), Some(true), "BASE wins");
        assert_eq!(
            t["server"]["host_fallthrough"].as_bool(),
            Some(false),
            "the cluster fills in"
        );
        assert_eq!(t["routes"].as_array().expect("routes").len(), 2);
        assert!(t["upstreams"].get("shop.web.80").is_some());
    }

    #[test]
    fn an_ingress_cannot_take_over_a_base_definition() {
        let base = "[upstreams.admin]\ntargets = [\"127.0.0.1:2\"]\n\n[limits.strict]\nkey = \"client_ip\"\nrate = \"1/s\"\n\n[[routes]]\nname = \"admin\"\npath_prefix = \"/admin\"\nupstream = \"admin\"\nlimits = [\"strict\"]\n";
        // An Ingress whose translated names meet BASE's: its upstream and its limit.
        let cluster = "[upstreams.admin]\ntargets = [\"evil:80\"]\n\n[limits.strict]\nkey = \"client_ip\"\nrate = \"1000/s\"\n\n[upstreams.ok]\ntargets = [\"ok:80\"]\n\n[[routes]]\nname = \"x.1\"\nhost = \"x.example\"\nupstream = \"admin\"\npath_prefix = \"/\"\n\n[[routes]]\nname = \"x.2\"\nhost = \"x.example\"\nupstream = \"ok\"\nlimits = [\"strict\"]\npath_prefix = \"/b\"\n\n[[routes]]\nname = \"y.1\"\nhost = \"y.example\"\nupstream = \"ok\"\npath_prefix = \"/c\"\n";
        let (text, problems) = merge(base, cluster).expect("merges");
        let t: Table = text.parse().expect("toml");
        assert_eq!(
            t["upstreams"]["admin"]["targets"][0].as_str(),
            Some("127.0.0.1:2")
        );
        assert_eq!(t["limits"]["strict"]["rate"].as_str(), Some("1/s"));
        let names: Vec<&str> = t["routes"]
            .as_array()
            .expect("routes")
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert_eq!(
            names,
            ["admin", "y.1"],
            "the routes naming the taken definitions are dropped; the rest stay"
        );
        assert_eq!(problems.len(), 4, "{problems:?}");
        // A route named as BASE's: the cluster's is dropped, BASE's stays.
        let (text, problems) = merge(
            base,
            "[[routes]]\nname = \"admin\"\npath_prefix = \"/\"\nupstream = \"x\"\n",
        )
        .expect("merges");
        let t: Table = text.parse().expect("toml");
        assert_eq!(t["routes"].as_array().expect("routes").len(), 1);
        assert_eq!(t["routes"][0]["upstream"].as_str(), Some("admin"));
        assert_eq!(problems.len(), 1);
        // BASE's hosts are BASE's: an Ingress naming one, or one its wildcard covers, or a
        // wildcard over it, is not served there; host-less cluster routes meet BASE's
        // host-less ones; other hosts are the cluster's.
        let base = "[upstreams.api]\ntargets = [\"127.0.0.1:2\"]\n\n[[routes]]\nname = \"api\"\nhost = \"api.example\"\npath_prefix = \"/\"\nupstream = \"api\"\n\n[[routes]]\nname = \"w\"\nhost = \"*.corp.example\"\npath_prefix = \"/\"\nupstream = \"api\"\n\n[[routes]]\nname = \"all\"\npath_prefix = \"/\"\nupstream = \"api\"\n";
        let route = |n: &str, host: Option<&str>| {
            match host {
            Some(h) => format!("[[routes]]\nname = \"{n}\"\nhost = \"{h}\"\npath_prefix = \"/v1\"\nupstream = \"x\"\n\n"),
            None => format!("[[routes]]\nname = \"{n}\"\npath_prefix = \"/v1\"\nupstream = \"x\"\n\n"),
        }
        };
        let cluster = [
            route("c1", Some("API.example.")),
            route("c2", Some("a.corp.example")),
            route("c3", Some("*.example")),
            route("c4", None),
            route("c5", Some("shop.example")),
        ]
        .concat();
        let (text, problems) = merge(base, &cluster).expect("merges");
        let t: Table = text.parse().expect("toml");
        let names: Vec<&str> = t["routes"]
            .as_array()
            .expect("routes")
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert_eq!(names, ["api", "w", "all", "c5"], "{problems:?}");
        assert!(merge("not = [toml", "").is_err());
    }
}
