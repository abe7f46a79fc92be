//! Upstreams: one per Service port, spoken to one way (`backend-protocol`) with one set of
//! timeouts. Named `NAMESPACE.SERVICE.PORT` (a dot cannot occur in either name, so names
//! never collide), with `.https` / `.grpc` / `.grpcs` for another protocol and, when Ingresses
//! give one Service different timeouts, `.tC-R-S` (seconds) on all but the defaults.

use super::objects::Backend;
use super::text::slug;
use std::collections::BTreeMap;

/// `nginx.ingress.kubernetes.io/backend-protocol`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) enum Proto {
    Http,
    Https,
    Grpc,
    Grpcs,
}

impl Proto {
    fn suffix(self) -> &'static str {
        match self {
            Proto::Http => "",
            Proto::Https => ".https",
            Proto::Grpc => ".grpc",
            Proto::Grpcs => ".grpcs",
        }
    }

    pub fn tls(self) -> bool {
        matches!(self, Proto::Https | Proto::Grpcs)
    }

    pub fn h2(self) -> bool {
        matches!(self, Proto::Grpc | Proto::Grpcs)
    }
}

/// Seconds to connect, between reads, between writes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) struct Timeouts {
    pub connect: u64,
    pub read: u64,
    pub send: u64,
}

impl Timeouts {
    /// ingress-nginx's `proxy-connect-timeout`, `proxy-read-timeout`, `proxy-send-timeout`.
    pub const DEFAULT: Timeouts = Timeouts {
        connect: 5,
        read: 60,
        send: 60,
    };
}

/// What makes an upstream.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) struct UpKey {
    pub ns: String,
    pub backend: Backend,
    pub proto: Proto,
    /// `proxy-ssl-*` (with an HTTPS / GRPCS `proto`).
    pub ssl: super::proxyssl::UpstreamSsl,
    pub timeouts: Timeouts,
    /// `balance`, `hash_key`, `affinity`, `retry` lines (an Ingress's balancing annotations).
    pub balancing: super::balancing::Balancing,
}

impl UpKey {
    fn base(&self) -> String {
        format!(
            "{}.{}.{}{}",
            slug(&self.ns),
            slug(&self.backend.service),
            self.backend.port,
            self.proto.suffix()
        )
    }

    /// The Service's cluster DNS name and port (the controller places its endpoints under
    /// it); with `service-upstream: "true"`, its short name, which reaches the ClusterIP
    /// through a pod's search domains and is never placed.
    pub fn target(&self) -> String {
        if self.balancing.service_upstream {
            return format!(
                "{}.{}.svc:{}",
                slug(&self.backend.service),
                slug(&self.ns),
                self.backend.port
            );
        }
        format!(
            "{}.{}.svc.cluster.local:{}",
            slug(&self.backend.service),
            slug(&self.ns),
            self.backend.port
        )
    }
}

/// A name for every key used.
pub(super) fn names<'k>(keys: impl IntoIterator<Item = &'k UpKey>) -> BTreeMap<UpKey, String> {
    let mut by_base: BTreeMap<String, Vec<&UpKey>> = BTreeMap::new();
    for k in keys {
        let v = by_base.entry(k.base()).or_default();
        if !v.contains(&k) {
            v.push(k);
        }
    }
    let mut out = BTreeMap::new();
    let mut taken = std::collections::BTreeSet::new();
    for (base, keys) in by_base {
        let alone = keys.len() == 1;
        for k in keys {
            let t = k.timeouts;
            let mut name = if alone || t == Timeouts::DEFAULT {
                base.clone()
            } else {
                format!("{base}.t{}-{}-{}", t.connect, t.read, t.send)
            };
            // Names made of names can meet (a Service called "a.80"): the later is suffixed.
            let first = name.clone();
            let mut n = 1;
            while !taken.insert(name.clone()) {
                n += 1;
                name = format!("{first}~{n}");
            }
            out.insert(k.clone(), name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(svc: &str, proto: Proto, read: u64) -> UpKey {
        UpKey {
            ns: "ops".into(),
            backend: Backend {
                service: svc.into(),
                port: 80,
            },
            proto,
            ssl: Default::default(),
            timeouts: Timeouts {
                read,
                ..Timeouts::DEFAULT
            },
            balancing: Default::default(),
        }
    }

    #[test]
    fn one_service_with_two_sets_of_timeouts_is_two_upstreams() {
        let keys = [
            key("tools", Proto::Http, 60),
            key("tools", Proto::Http, 1),
            key("solo", Proto::Http, 600),
            key("tools", Proto::Https, 60),
        ];
        let n = names(&keys);
        assert_eq!(n[&keys[0]], "ops.tools.80");
        assert_eq!(n[&keys[1]], "ops.tools.80.t5-1-60");
        assert_eq!(n[&keys[2]], "ops.solo.80", "alone: no suffix");
        assert_eq!(n[&keys[3]], "ops.tools.80.https");
        assert_eq!(keys[0].target(), "tools.ops.svc.cluster.local:80");
    }
}
