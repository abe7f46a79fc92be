//! `default-backend` and `custom-http-errors`: the route's `default_backend` and
//! `error_pages` (docs/edge.md), read as ingress-nginx reads them.
//!
//! `default-backend` names a Service of the Ingress's namespace, spoken to on its first port
//! (ingress-nginx's `Spec.Ports[0]`): the Service must be among the objects (the controller
//! adds the ones named). It takes the Ingress's requests while the Ingress's Service has no
//! endpoint, and with `custom-http-errors` it answers the listed statuses, asked over plain
//! HTTP as ingress-nginx's custom error locations ask (`proxy_pass http://...`).

use super::anns::Anns;
use super::objects::{Backend, Ports};
use super::text::{comment, k8s_name, q, Warnings};
use super::upstreams::{Proto, UpKey};

/// What one Ingress asks for when its upstream cannot serve.
#[derive(Clone, Debug, Default)]
pub(super) struct FallbackOut {
    /// `default-backend`: the Service and its first port.
    pub backend: Option<Backend>,
    /// `custom-http-errors`, sorted, each once.
    pub codes: Vec<u16>,
    /// `disable-proxy-intercept-errors`: only the gateway's own failures get pages.
    pub keep_upstream_answers: bool,
    /// The Ingress's namespace and name (`X-Namespace`, `X-Ingress-Name`).
    pub ns: String,
    pub name: String,
}

pub(super) fn read(
    a: &mut Anns,
    ns: &str,
    name: &str,
    ports: &Ports,
    w: &mut Warnings,
) -> FallbackOut {
    let ctx = a.ctx();
    let mut out = FallbackOut {
        ns: ns.to_string(),
        name: name.to_string(),
        ..FallbackOut::default()
    };
    if let Some(v) = a.get("custom-http-errors") {
        out.codes = codes(v).unwrap_or_else(|| {
            w.push(comment(&format!(
                "{ctx}: custom-http-errors \"{v}\" is not a list of statuses 400 to 599: ignored, as by ingress-nginx"
            )));
            Vec::new()
        });
    }
    out.keep_upstream_answers = super::text::flag(
        a.get("disable-proxy-intercept-errors"),
        false,
        &format!("{ctx}: disable-proxy-intercept-errors"),
        w,
    );
    if let Some(v) = a.get("default-backend").map(str::trim) {
        if !k8s_name(v) {
            w.push(comment(&format!(
                "{ctx}: default-backend \"{v}\" is not a Service name: no default backend"
            )));
        } else if let Some(port) = ports.get(&(ns.to_string(), v.to_string())) {
            out.backend = Some(Backend {
                service: v.to_string(),
                port: *port,
            });
        } else {
            w.push(comment(&format!(
                "{ctx}: default-backend Service {ns}/{v} is not among the objects (its first port is the one spoken to): no default backend, as ingress-nginx without the Service"
            )));
        }
    }
    if !out.codes.is_empty() && out.backend.is_none() {
        w.push(comment(&format!(
            "{ctx}: custom-http-errors without a default-backend Tollgate can reach: the upstream's answers pass as they are (ingress-nginx asks the controller's own default backend)"
        )));
    }
    out
}

/// ingress-nginx's validation (`^(?:[4,5]\d{2},?)*$` on the value without spaces), then each
/// piece a number; a value either refuses is ignored whole.
fn codes(v: &str) -> Option<Vec<u16>> {
    let mut out = Vec::new();
    for piece in v.split(',') {
        let t = piece.trim();
        if t.is_empty() {
            continue;
        }
        let n: u16 = t.parse().ok()?;
        if !(400..=599).contains(&n) {
            return None;
        }
        out.push(n);
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

impl FallbackOut {
    /// The upstreams it names, spoken to as `main` (the route's own upstream) is: the default
    /// backend's, and the error pages' (plain HTTP).
    pub fn keys(&self, main: &UpKey) -> (Option<UpKey>, Option<UpKey>) {
        let Some(b) = &self.backend else {
            return (None, None);
        };
        let key = UpKey {
            backend: b.clone(),
            ..main.clone()
        };
        let pages = (!self.codes.is_empty()).then(|| UpKey {
            proto: Proto::Http,
            ssl: Default::default(),
            ..key.clone()
        });
        (Some(key), pages)
    }
}

/// The route's lines: `default_backend` and `error_pages`, for a route to `main`.
pub(super) fn lines(
    out: &mut String,
    f: &FallbackOut,
    main: &UpKey,
    names: &std::collections::BTreeMap<UpKey, String>,
) {
    use std::fmt::Write;
    let service = &main.backend;
    let (backend, pages) = f.keys(main);
    if let Some(name) = backend.as_ref().and_then(|k| names.get(k)) {
        let _ = writeln!(out, "# default-backend\ndefault_backend = {}", q(name));
    }
    if let Some(name) = pages.as_ref().and_then(|k| names.get(k)) {
        let codes: Vec<String> = f.codes.iter().map(u16::to_string).collect();
        let own_only = if f.keep_upstream_answers {
            ", upstream_answers = false"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "# custom-http-errors\nerror_pages = {{ codes = [{}], upstream = {}{own_only}, headers = {{ \"X-Namespace\" = {}, \"X-Ingress-Name\" = {}, \"X-Service-Name\" = {}, \"X-Service-Port\" = \"{}\" }} }}",
            codes.join(", "),
            q(name),
            q(&f.ns),
            q(&f.name),
            q(&service.service),
            service.port
        );
    }
}
