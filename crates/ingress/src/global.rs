//! The controller's ConfigMap (ingress-nginx's global keys): read from the input when it holds
//! it, `--configmap NS/NAME`, else one of the names ingress-nginx's own manifests give it
//! (`ingress-nginx-controller` from the Helm chart, `nginx-configuration` from the old static
//! ones). Each key Tollgate maps becomes its `[server]` setting; every other key is named in a
//! warning, never dropped silently.

use super::text::{comment, Warnings};
use serde_yaml_ng::Value;
use std::collections::BTreeMap;

/// The names ingress-nginx's manifests give the controller's ConfigMap.
const DEFAULT_NAMES: [&str; 2] = ["ingress-nginx-controller", "nginx-configuration"];

/// A ConfigMap of the input.
pub(super) struct ConfigMap {
    pub ns: String,
    pub name: String,
    pub data: BTreeMap<String, String>,
}

impl ConfigMap {
    pub(super) fn read(obj: &Value) -> ConfigMap {
        let text = |path: &[&str]| {
            let mut v = obj;
            for p in path {
                v = v.get(p).unwrap_or(&Value::Null);
            }
            v.as_str().unwrap_or_default().to_string()
        };
        let mut data = BTreeMap::new();
        if let Some(m) = obj.get("data").and_then(Value::as_mapping) {
            for (k, v) in m {
                let value = match v {
                    Value::String(s) => s.clone(),
                    Value::Bool(b) => b.to_string(),
                    Value::Number(n) => n.to_string(),
                    _ => continue,
                };
                if let Some(k) = k.as_str() {
                    data.insert(k.to_string(), value);
                }
            }
        }
        let ns = text(&["metadata", "namespace"]);
        ConfigMap {
            ns: if ns.is_empty() { "default".into() } else { ns },
            name: text(&["metadata", "name"]),
            data,
        }
    }
}

/// What the controller's ConfigMap sets, as Tollgate writes it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Global {
    /// Where it came from (`NS/NAME`).
    pub from: Option<String>,
    /// `enable-underscores-in-headers: "true"`: `[server] underscores_in_headers = true`.
    pub underscores_in_headers: bool,
    /// `global-allowed-response-headers`: the names `custom-headers` may set, as written.
    pub allowed_response_headers: Vec<String>,
}

/// The controller's ConfigMap among `maps` (`wanted`: `--configmap NS/NAME`), translated.
/// `used`: the ConfigMaps an Ingress names (`custom-headers`), read there, not skipped.
pub(super) fn decide(
    maps: &[ConfigMap],
    wanted: Option<&str>,
    used: &std::collections::BTreeSet<String>,
    w: &mut Warnings,
) -> Global {
    let found = match wanted {
        Some(id) => {
            let m = maps.iter().find(|m| format!("{}/{}", m.ns, m.name) == id);
            if m.is_none() {
                w.push(comment(&format!(
                    "ConfigMap {id} (--configmap) is not in the input: ingress-nginx's defaults are assumed for its keys"
                )));
            }
            m
        }
        // A ConfigMap an Ingress names (custom-headers) is a tenant's: never taken for the
        // controller's, whatever its name.
        None => maps.iter().find(|m| {
            DEFAULT_NAMES.contains(&m.name.as_str())
                && !used.contains(&format!("{}/{}", m.ns, m.name))
        }),
    };
    for m in maps {
        if !found.is_some_and(|f| std::ptr::eq(f, m))
            && !used.contains(&format!("{}/{}", m.ns, m.name))
        {
            w.push(comment(&format!(
                "ConfigMap {}/{}: not the controller's (name it with --configmap NS/NAME): skipped",
                m.ns, m.name
            )));
        }
    }
    let Some(m) = found else {
        return Global::default();
    };
    let id = format!("{}/{}", m.ns, m.name);
    let mut g = Global {
        from: Some(id.clone()),
        ..Global::default()
    };
    for (k, v) in &m.data {
        match k.as_str() {
            // As the controller reads it (Go's strconv.ParseBool).
            "enable-underscores-in-headers" => match v.trim() {
                "1" | "t" | "T" | "TRUE" | "true" | "True" => g.underscores_in_headers = true,
                "0" | "f" | "F" | "FALSE" | "false" | "False" => {}
                other => w.push(comment(&format!(
                    "ConfigMap {id}: enable-underscores-in-headers \"{other}\" is not a boolean: ingress-nginx's default (false) kept"
                ))),
            },
            "global-allowed-response-headers" => {
                for h in v.split(',').map(str::trim).filter(|h| !h.is_empty()) {
                    if super::text::nginx_header_name(h) {
                        g.allowed_response_headers.push(h.to_string());
                    } else {
                        w.push(comment(&format!(
                            "ConfigMap {id}: global-allowed-response-headers: \"{h}\" is not a header name: left out (as by ingress-nginx)"
                        )));
                    }
                }
            }
            other => w.push(comment(&format!(
                "ConfigMap {id}: {other}: not translated (set its equivalent in [server] or the routes, see docs/ingress-nginx.md)"
            ))),
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(ns: &str, name: &str, kv: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            ns: ns.into(),
            name: name.into(),
            data: kv
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn the_controllers_map_is_found_and_its_keys_named() {
        let maps = [
            map(
                "shop",
                "app-settings",
                &[("enable-underscores-in-headers", "true")],
            ),
            map(
                "ingress-nginx",
                "ingress-nginx-controller",
                &[
                    ("enable-underscores-in-headers", "true"),
                    ("use-forwarded-headers", "true"),
                ],
            ),
        ];
        let mut w = Warnings::default();
        let g = decide(&maps, None, &Default::default(), &mut w);
        assert!(g.underscores_in_headers);
        assert_eq!(
            g.from.as_deref(),
            Some("ingress-nginx/ingress-nginx-controller")
        );
        let said = w.finish().join("\n");
        assert!(
            said.contains("use-forwarded-headers: not translated"),
            "{said}"
        );
        assert!(
            said.contains("shop/app-settings: not the controller's"),
            "{said}"
        );
        // An application's ConfigMap is never taken for the controller's.
        let mut w = Warnings::default();
        assert_eq!(
            decide(&maps[..1], None, &Default::default(), &mut w),
            Global::default()
        );
        // Named on the command line.
        let mut w = Warnings::default();
        assert!(
            decide(
                &maps,
                Some("shop/app-settings"),
                &Default::default(),
                &mut w
            )
            .underscores_in_headers
        );
        let mut w = Warnings::default();
        let g = decide(&maps, Some("x/missing"), &Default::default(), &mut w);
        assert_eq!(g, Global::default());
        assert!(w
            .finish()
            .join("\n")
            .contains("x/missing (--configmap) is not in the input"));
        let mut w = Warnings::default();
        let bad = [map(
            "a",
            "nginx-configuration",
            &[("enable-underscores-in-headers", "yes")],
        )];
        assert!(!decide(&bad, None, &Default::default(), &mut w).underscores_in_headers);
    }

    /// A ConfigMap an Ingress names (custom-headers) is never guessed as the controller's,
    /// however it is named: a tenant would set the global keys (the allow list) for all.
    #[test]
    fn a_named_configmap_is_never_taken_for_the_controllers() {
        let maps = [map(
            "shop",
            "ingress-nginx-controller",
            &[("global-allowed-response-headers", "X-Anything")],
        )];
        let used = ["shop/ingress-nginx-controller".to_string()].into();
        let mut w = Warnings::default();
        let g = decide(&maps, None, &used, &mut w);
        assert_eq!(g, Global::default());
        assert!(g.allowed_response_headers.is_empty());
    }
}
