//! The upstream's own URLs and cookies said back in the client's terms, as nginx's
//! `proxy_redirect`, `proxy_cookie_domain` and `proxy_cookie_path` (docs/edge.md): a
//! `Location` or `Refresh` URL's start, a `Set-Cookie` Domain or Path. A route without them
//! has no [`RewriteBack`].

use pingora::http::ResponseHeader;
use tollgate_config::model::{EdgeConfig, Replace};

/// A route's response rewrites; each list is tried in order, the first match applies.
#[derive(Debug)]
pub struct RewriteBack {
    redirect: Box<[Replace]>,
    domain: Box<[Replace]>,
    path: Box<[Replace]>,
}

impl RewriteBack {
    /// `None` when the route has none.
    pub fn build(e: &EdgeConfig) -> Option<Box<RewriteBack>> {
        let r = RewriteBack {
            redirect: e.proxy_redirect.clone().into(),
            domain: e.proxy_cookie_domain.clone().into(),
            path: e.proxy_cookie_path.clone().into(),
        };
        (!r.redirect.is_empty() || !r.domain.is_empty() || !r.path.is_empty()).then(|| Box::new(r))
    }

    /// Rewrites the response head's fields. A field that is not text is left as it is.
    pub fn apply(&self, resp: &mut ResponseHeader) {
        if !self.redirect.is_empty() {
            self.rewrite_all(resp, http::header::LOCATION, |v| self.url(v, false));
            self.rewrite_all(resp, http::header::REFRESH, |v| self.url(v, true));
        }
        if !self.domain.is_empty() || !self.path.is_empty() {
            self.rewrite_all(resp, http::header::SET_COOKIE, |v| self.cookie(v));
        }
    }

    /// Each field `name` through `f`; the fields are written again only if one changed.
    fn rewrite_all(
        &self,
        resp: &mut ResponseHeader,
        name: http::HeaderName,
        f: impl Fn(&str) -> Option<String>,
    ) {
        let values: Vec<Option<String>> = resp
            .headers
            .get_all(&name)
            .iter()
            .map(|v| v.to_str().ok().and_then(&f))
            .collect();
        if values.iter().all(Option::is_none) {
            return;
        }
        let old: Vec<http::HeaderValue> = resp.headers.get_all(&name).iter().cloned().collect();
        resp.remove_header(&name);
        for (old, new) in old.into_iter().zip(values) {
            let v = new
                .and_then(|n| http::HeaderValue::from_str(&n).ok())
                .unwrap_or(old);
            let _ = resp.append_header(name.clone(), v);
        }
    }

    /// A `Location` value, or a `Refresh` one's URL (after `url=`): its start replaced.
    fn url(&self, v: &str, refresh: bool) -> Option<String> {
        let at = match v.to_ascii_lowercase().find("url=") {
            Some(i) if refresh => i + 4,
            Some(_) | None if refresh => return None,
            _ => 0,
        };
        let (head, url) = v.split_at(at);
        let r = self.redirect.iter().find(|r| url.starts_with(&r.from))?;
        Some(format!("{head}{}{}", r.to, &url[r.from.len()..]))
    }

    /// A `Set-Cookie` value with its Domain and Path attributes rewritten (the name, value
    /// and every other attribute as they were).
    fn cookie(&self, v: &str) -> Option<String> {
        let mut parts: Vec<String> = v.split(';').map(str::to_string).collect();
        let mut changed = false;
        for part in parts.iter_mut().skip(1) {
            let Some((name, value)) = part.split_once('=') else {
                continue;
            };
            let lead = &name[..name.len() - name.trim_start().len()];
            let (key, val) = (name.trim(), value.trim());
            let new = if key.eq_ignore_ascii_case("domain") {
                let dot = if val.starts_with('.') { "." } else { "" };
                let bare = val.trim_start_matches('.');
                self.domain
                    .iter()
                    .find(|r| bare.eq_ignore_ascii_case(&r.from))
                    .map(|r| format!("{dot}{}", r.to))
            } else if key.eq_ignore_ascii_case("path") {
                self.path
                    .iter()
                    .find(|r| val.starts_with(&r.from))
                    .map(|r| format!("{}{}", r.to, &val[r.from.len()..]))
            } else {
                None
            };
            if let Some(new) = new {
                *part = format!("{lead}{}={new}", name.trim_start());
                changed = true;
            }
        }
        changed.then(|| parts.join(";"))
    }
}

#[cfg(test)]
mod tests;
