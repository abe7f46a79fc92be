//! `[[tls_passthrough]]` (docs/tls.md): TLS connections whose ClientHello names one of
//! `hosts` are relayed as they are, unread, to a target of `upstream` (ingress-nginx's
//! `ssl-passthrough`). One reader for the list.
//!
//! Refused at load: no TLS listener to read ClientHellos on, an unknown upstream, a host that
//! is not a name, and a host two entries claim (which upstream would get it?).

use crate::model::{Passthrough, UpstreamConfig};
use crate::named::Named;
use crate::reader::{as_array, as_str_list, Cx, Tbl, Value};

pub(crate) fn read(
    cx: &mut Cx,
    v: &Value,
    upstreams: &Named<UpstreamConfig>,
    tls_listeners: bool,
) -> Vec<Passthrough> {
    let Some(items) = as_array(cx, "tls_passthrough", v) else {
        return Vec::new();
    };
    if !tls_listeners && !items.is_empty() {
        cx.err(
            "tls_passthrough",
            v.span(),
            "TLS is passed through on the TLS listeners: set server.tls_listen (and [tls])",
        );
    }
    let mut out: Vec<Passthrough> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let p = format!("tls_passthrough[{i}]");
        let Some(mut t) = Tbl::of(cx, p.clone(), item) else {
            continue;
        };
        let hosts = hosts(cx, &mut t, &p, item, &out);
        let upstream = match t.get("upstream") {
            Some(uv) => upstreams.refer(cx, &t.key_path("upstream"), uv, "upstream"),
            None => {
                cx.err(&p, item.span(), "missing key \"upstream\"");
                None
            }
        };
        t.finish(cx);
        if let (Some(hosts), Some(upstream)) = (hosts, upstream) {
            out.push(Passthrough { hosts, upstream });
        }
    }
    out
}

fn hosts(
    cx: &mut Cx,
    t: &mut Tbl,
    p: &str,
    item: &Value,
    before: &[Passthrough],
) -> Option<Vec<String>> {
    let Some(hv) = t.get("hosts") else {
        cx.err(p, item.span(), "missing key \"hosts\"");
        return None;
    };
    let hp = t.key_path("hosts");
    let items = as_str_list(cx, &hp, hv, true)?;
    if items.is_empty() {
        cx.err(&hp, hv.span(), "an empty list: name at least one host");
        return None;
    }
    let mut out: Vec<String> = Vec::new();
    let mut ok = true;
    for (ip, s, span) in items {
        match crate::routes::route_host(s) {
            Some(h) if out.contains(&h) || before.iter().any(|b| b.hosts.contains(&h)) => {
                cx.err(&ip, span, format!("\"{s}\" is passed through twice"));
                ok = false;
            }
            Some(h) => out.push(h),
            None => {
                cx.err(
                    &ip,
                    span,
                    format!("\"{s}\" is not a host name (a wildcard is one leading label: \"*.example.com\")"),
                );
                ok = false;
            }
        }
    }
    ok.then_some(out)
}
