//! `labelSelector` and `fieldSelector`, as list and watch take them.
//!
//! Labels: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, comma-separated
//! (all must hold). Fields: `path=v`, `path==v`, `path!=v` on any dotted path of the object
//! (the API server allows a few per kind, always `metadata.name` and `metadata.namespace`).

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    Absent(String),
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selector {
    labels: Vec<Req>,
    fields: Vec<Req>,
}

/// Splits on commas outside parentheses.
fn terms(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(s[start..].trim());
    out.into_iter().filter(|t| !t.is_empty()).collect()
}

fn set(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

fn parse_term(t: &str, sets: bool) -> Result<Req, String> {
    if let Some((k, v)) = t.split_once("!=") {
        return Ok(Req::Ne(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
        return Ok(Req::Eq(k.trim().into(), v.trim().into()));
    }
    if sets {
        if let Some((k, rest)) = t.split_once(" notin ") {
            return set(rest)
                .map(|vs| Req::NotIn(k.trim().into(), vs))
                .ok_or_else(|| format!("unable to parse requirement: {t}"));
        }
        if let Some((k, rest)) = t.split_once(" in ") {
            return set(rest)
                .map(|vs| Req::In(k.trim().into(), vs))
                .ok_or_else(|| format!("unable to parse requirement: {t}"));
        }
        if let Some(k) = t.strip_prefix('!') {
            return Ok(Req::Absent(k.trim().into()));
        }
        if !t.contains(' ') {
            return Ok(Req::Exists(t.into()));
        }
    }
    Err(format!("unable to parse requirement: {t}"))
}

impl Selector {
    pub fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Self, String> {
        let mut s = Selector::default();
        for t in terms(labels.unwrap_or("")) {
            s.labels.push(parse_term(t, true)?);
        }
        for t in terms(fields.unwrap_or("")) {
            s.fields.push(parse_term(t, false)?);
        }
        Ok(s)
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let label = |k: &str| {
            obj.pointer("/metadata/labels")
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let field = |k: &str| {
            let mut v = obj;
            for part in k.split('.') {
                match v.get(part) {
                    Some(n) => v = n,
                    None => return Some(String::new()),
                }
            }
            Some(match v {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            })
        };
        self.labels.iter().all(|r| holds(r, &label)) && self.fields.iter().all(|r| holds(r, &field))
    }
}

fn holds(r: &Req, get: &dyn Fn(&str) -> Option<String>) -> bool {
    match r {
        Req::Eq(k, v) => get(k).as_deref() == Some(v.as_str()),
        Req::Ne(k, v) => get(k).as_deref() != Some(v.as_str()),
        Req::In(k, vs) => get(k).is_some_and(|x| vs.contains(&x)),
        Req::NotIn(k, vs) => get(k).is_none_or(|x| !vs.contains(&x)),
        Req::Exists(k) => get(k).is_some(),
        Req::Absent(k) => get(k).is_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_and_fields() {
        let o = json!({"metadata": {"name": "a", "namespace": "ns", "labels": {"app": "web", "tier": "1"}}, "type": "kubernetes.io/tls"});
        let yes = |l: &str, f: &str| {
            Selector::parse(Some(l), Some(f))
                .expect("parses")
                .matches(&o)
        };
        assert!(yes("", ""));
        assert!(yes("app=web", ""));
        assert!(yes("app==web,tier", ""));
        assert!(yes("app in (web, api),!gone", ""));
        assert!(yes("app notin (api)", "metadata.name=a"));
        assert!(yes("", "metadata.namespace==ns,type=kubernetes.io/tls"));
        assert!(!yes("app!=web", ""));
        assert!(!yes("gone", ""));
        assert!(!yes("app in (api)", ""));
        assert!(!yes("", "metadata.name!=a"));
        assert!(Selector::parse(Some("app in web"), None).is_err());
    }
}
