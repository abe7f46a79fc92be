//! The Gateway API beside the Ingresses: its reflectors' objects through
//! [`tollgate_gateway_api`]'s translation, added to the Ingresses' part. The Gateways'
//! listeners go to the gateway to serve; the statuses to the leader's writer
//! ([`crate::gateway_status`]). When the config check refuses the combined part, each
//! served HTTPRoute is tried alone with the Ingresses' part, and those refused are left out
//! (their parents say so): one HTTPRoute never holds the others back.

use crate::translate::{Check, Translated};
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use kube::runtime::reflector::Store;
use std::sync::Arc;
use tollgate_gateway_api::input::Input;
use tollgate_gateway_api::translate::{translate, Output};
use tollgate_gateway_api::types::gatewayclasses::GatewayClass;
use tollgate_gateway_api::types::gateways::Gateway;
use tollgate_gateway_api::types::httproutes::HttpRoute;
use tollgate_gateway_api::types::policy::RateLimitPolicy;
use tollgate_gateway_api::types::referencegrants::ReferenceGrant;
use toml::{Table, Value};

/// The Gateway API's reflectors (only when the API server serves its CRDs; the policies'
/// when it serves Tollgate's).
pub struct Stores {
    pub classes: Store<GatewayClass>,
    pub gateways: Store<Gateway>,
    pub routes: Store<HttpRoute>,
    pub grants: Store<ReferenceGrant>,
    pub policies: Option<Store<RateLimitPolicy>>,
    pub namespaces: Store<Namespace>,
}

/// What the translation reads besides the Gateway API's own objects.
pub struct Around<'a> {
    pub controller: &'a str,
    pub services: &'a [&'a Service],
    pub secrets: &'a [&'a Secret],
    pub tls: bool,
    pub addresses: Vec<String>,
}

impl Stores {
    pub fn translate(&self, around: &Around, refused: &[(String, String)]) -> Output {
        let (c, g, r, gr, n) = (
            self.classes.state(),
            self.gateways.state(),
            self.routes.state(),
            self.grants.state(),
            self.namespaces.state(),
        );
        let p = self.policies.as_ref().map(Store::state).unwrap_or_default();
        let input = Input {
            controller: around.controller,
            classes: c.iter().map(Arc::as_ref).collect(),
            gateways: g.iter().map(Arc::as_ref).collect(),
            http_routes: r.iter().map(Arc::as_ref).collect(),
            grants: gr.iter().map(Arc::as_ref).collect(),
            policies: p.iter().map(Arc::as_ref).collect(),
            services: around.services.to_vec(),
            secrets: around.secrets.to_vec(),
            namespaces: n.iter().map(Arc::as_ref).collect(),
            tls: around.tls,
            addresses: around.addresses.clone(),
        };
        translate(&input, refused)
    }

    /// How many objects of each kind are held.
    pub fn counts(&self) -> [(&'static str, usize); 5] {
        [
            ("GatewayClass", self.classes.state().len()),
            ("Gateway", self.gateways.state().len()),
            ("HTTPRoute", self.routes.state().len()),
            ("ReferenceGrant", self.grants.state().len()),
            (
                "RateLimitPolicy",
                self.policies.as_ref().map_or(0, |p| p.state().len()),
            ),
        ]
    }
}

/// `ingress` (the Ingresses' part) with `gateway`'s table added: routes after the
/// Ingresses', upstreams and limits beside theirs (their names cannot meet: `gw-` and
/// `policy:`), certificates after theirs.
fn combined(ingress: Option<&str>, gateway: &Table) -> Result<Table, String> {
    let mut t: Table = match ingress {
        Some(s) => s
            .parse()
            .map_err(|e| format!("the Ingresses' part does not parse: {e}"))?,
        None => Table::new(),
    };
    for (k, v) in gateway {
        match (t.get_mut(k), v) {
            (Some(Value::Array(a)), Value::Array(b)) => a.extend(b.iter().cloned()),
            (Some(Value::Table(a)), Value::Table(b)) if k == "tls" => {
                if let (Some(Value::Array(x)), Some(Value::Array(y))) =
                    (a.get_mut("certificates"), b.get("certificates"))
                {
                    x.extend(y.iter().cloned());
                } else if let Some(y) = b.get("certificates") {
                    a.insert("certificates".into(), y.clone());
                }
            }
            (Some(Value::Table(a)), Value::Table(b)) => {
                a.extend(b.iter().map(|(k, v)| (k.clone(), v.clone())))
            }
            (_, v) => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(t)
}

/// The Gateway API's translation, leaving out the HTTPRoutes given (NAMESPACE/NAME, why).
pub type Translate<'a> = &'a dyn Fn(&[(String, String)]) -> Output;

/// The Ingresses' part `t` with the Gateway API's; `gateway(refused)` translates it leaving
/// those HTTPRoutes out. The final Gateway API output (its statuses) is returned too.
pub fn with_gateways(
    mut t: Translated,
    gateway: Translate,
    secrets: &[&Secret],
    default_certificate: Option<&str>,
    check: Check,
) -> (Translated, Output) {
    let attempt = |g: &Output| -> Result<
        (String, Arc<tollgate_config::mounted::Files>, Vec<String>),
        String,
    > {
        let mut table = combined(t.toml.as_deref(), &g.table)?;
        let volume = Arc::new(crate::secrets::volume(&table, secrets, default_certificate));
        let mut problems = crate::secrets::unheld_certificates(&mut table, &volume);
        problems.extend(crate::secrets::unheld_upstream_tls(&mut table, &volume));
        let text = toml::to_string(&table).map_err(|e| e.to_string())?;
        check(&text, &volume)?;
        Ok((text, volume, problems))
    };
    let mut refused: Vec<(String, String)> = Vec::new();
    let mut out = gateway(&refused);
    if out.table.is_empty() {
        t.listeners = out.listeners.clone();
        return (t, out);
    }
    let mut done = attempt(&out);
    if let Err(whole) = &done {
        // Each served HTTPRoute alone with the Ingresses' part: those refused are left out.
        let served: Vec<String> = out.routes.iter().cloned().collect();
        for r in &served {
            let others: Vec<(String, String)> = served
                .iter()
                .filter(|o| *o != r)
                .map(|o| (o.clone(), String::new()))
                .collect();
            if let Err(e) = attempt(&gateway(&others)) {
                refused.push((
                    r.clone(),
                    format!("its translation is refused by the config check: {e}"),
                ));
            }
        }
        if refused.is_empty() {
            refused = served
                .iter()
                .map(|r| {
                    (
                        r.clone(),
                        format!("the Gateway API's part is refused by the config check: {whole}"),
                    )
                })
                .collect();
        }
        out = gateway(&refused);
        done = attempt(&out);
    }
    match done {
        Ok((text, volume, problems)) => {
            t.toml = Some(text);
            t.volume = volume;
            t.problems.extend(problems);
        }
        Err(e) => t.problems.push(format!("Gateway API: {e}: not served")),
    }
    for (r, why) in &refused {
        t.problems.push(format!("HTTPRoute {r}: {why}: not served"));
    }
    t.problems.extend(out.problems.iter().cloned());
    t.listeners = out.listeners.clone();
    (t, out)
}
