//! `ssl-passthrough`: the `[[tls_passthrough]]` entries (docs/tls.md), as ingress-nginx's TCP
//! front decides them: with `--enable-ssl-passthrough` only; per host, when any Ingress of the
//! host asks; to the backend of the host's `/` path (its other paths are not passed through,
//! each named). A wildcard host is never passed through (ingress-nginx's front matches names
//! exactly), nor a host without a `/` path, nor any without a TLS listener here.

use super::routes::{Action, Route};
use super::settings::Settings;
use super::text::{comment, Warnings};
use super::upstreams::{Proto, UpKey};
use std::collections::BTreeMap;

/// The passed-through hosts, each with the upstream its `/` path proxies to.
pub(super) fn decide(
    settings: &[Settings],
    routes: &[Route],
    enabled: bool,
    tls_listeners: bool,
    w: &mut Warnings,
) -> BTreeMap<String, UpKey> {
    let mut asked: BTreeMap<&str, &str> = BTreeMap::new();
    for r in routes {
        let (Some(host), true) = (&r.host, settings[r.ing].passthrough) else {
            continue;
        };
        asked.entry(host.as_str()).or_insert(r.ctx.as_str());
    }
    let mut out = BTreeMap::new();
    for (host, ctx) in asked {
        if !enabled {
            w.push(comment(&format!(
                "{ctx}: ssl-passthrough without --enable-ssl-passthrough: ignored, as by ingress-nginx"
            )));
            continue;
        }
        if !tls_listeners {
            w.push(comment(&format!(
                "{ctx}: ssl-passthrough for {host}: no TLS listener here to pass it through on"
            )));
            continue;
        }
        if host.starts_with('*') {
            w.push(comment(&format!(
                "{ctx}: ssl-passthrough for {host}: a wildcard host is never passed through (ingress-nginx's front matches names exactly)"
            )));
            continue;
        }
        let root = routes.iter().find_map(|r| match &r.action {
            Action::Proxy { upstream, .. }
                if r.host.as_deref() == Some(host) && r.location == "/" =>
            {
                Some(upstream)
            }
            _ => None,
        });
        match root {
            Some(up) => {
                out.insert(
                    host.to_string(),
                    UpKey {
                        proto: Proto::Http,
                        ssl: Default::default(),
                        ..up.clone()
                    },
                );
            }
            None => {
                w.push(comment(&format!(
                    "{ctx}: ssl-passthrough for {host}: the host has no / path to pass its connections to: not passed through, as by ingress-nginx"
                )));
                continue;
            }
        }
        for r in routes {
            if r.host.as_deref() == Some(host) && r.location != "/" && settings[r.ing].passthrough {
                w.push(comment(&format!(
                    "{}: ssl-passthrough: only the host's / path is passed through (its TLS carries every path to that backend), as by ingress-nginx",
                    r.label
                )));
            }
        }
    }
    out
}

/// The `[[tls_passthrough]]` tables: one per upstream, its hosts sorted.
pub(super) fn write(
    out: &mut String,
    passed: &BTreeMap<String, UpKey>,
    names: &BTreeMap<UpKey, String>,
) {
    use std::fmt::Write;
    let mut by_upstream: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (host, key) in passed {
        if let Some(n) = names.get(key) {
            by_upstream
                .entry(n.as_str())
                .or_default()
                .push(host.as_str());
        }
    }
    for (upstream, hosts) in by_upstream {
        let hosts: Vec<String> = hosts.iter().map(|h| super::text::q(h)).collect();
        let _ = writeln!(
            out,
            "\n# ssl-passthrough: TLS relayed unread by its ClientHello's name\n[[tls_passthrough]]\nhosts = [{}]\nupstream = {}",
            hosts.join(", "),
            super::text::q(upstream)
        );
    }
}
