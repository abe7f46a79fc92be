//! A route's `match_headers` and `match_query`, compiled: whether a request carries what the
//! route asks besides its host, path and method.
//!
//! What is compared is what the upstream reads:
//! - a header sent in several fields is one value, the fields joined by `, ` (RFC 9110
//!   5.3, as Envoy and nginx's `$http_NAME` read it), so a second field cannot slip a value
//!   past an exact match; a value that is not UTF-8 matches nothing;
//! - a query parameter is compared decoded (`%41` and `+` as a framework reads them), and
//!   given more than once it matches only if every occurrence does: an upstream reading the
//!   first or the last gets what was checked; absent, it matches nothing.

use http::HeaderMap;
use tollgate_config::model::{Matches, ValueMatch, ValueMatcher};

enum Want {
    Exact(String),
    Regex(regex::Regex),
}

impl Want {
    fn accepts(&self, v: &str) -> bool {
        match self {
            Want::Exact(w) => w == v,
            Want::Regex(re) => re.is_match(v),
        }
    }
}

/// [`Matches`], ready to test.
pub struct MatchRt {
    headers: Vec<(http::HeaderName, Want)>,
    query: Vec<(String, Want)>,
}

fn want(m: &ValueMatch) -> Result<Want, String> {
    Ok(match &m.value {
        ValueMatcher::Exact(v) => Want::Exact(v.clone()),
        ValueMatcher::Regex(p) => Want::Regex(
            tollgate_config::matching::value_regex(p).map_err(|e| format!("{}: {e}", m.name))?,
        ),
    })
}

impl MatchRt {
    pub fn new(m: &Matches) -> Result<Self, String> {
        let mut headers = Vec::with_capacity(m.headers.len());
        for h in &m.headers {
            let name = http::HeaderName::from_bytes(h.name.as_bytes())
                .map_err(|e| format!("{}: {e}", h.name))?;
            headers.push((name, want(h)?));
        }
        let mut query = Vec::with_capacity(m.query.len());
        for q in &m.query {
            query.push((q.name.clone(), want(q)?));
        }
        Ok(MatchRt { headers, query })
    }

    /// Whether a request with these headers and this query (as sent, undecoded) takes the
    /// route.
    pub fn accepts(&self, headers: &HeaderMap, query: Option<&str>) -> bool {
        self.headers
            .iter()
            .all(|(name, want)| header_accepts(headers, name, want))
            && (self.query.is_empty() || query_accepts(&self.query, query.unwrap_or("")))
    }
}

fn header_accepts(headers: &HeaderMap, name: &http::HeaderName, want: &Want) -> bool {
    let mut fields = headers.get_all(name).iter();
    let Some(first) = fields.next() else {
        return false;
    };
    let Ok(first) = first.to_str() else {
        return false;
    };
    match fields.next() {
        None => want.accepts(first),
        Some(second) => {
            let mut joined = String::from(first);
            for f in std::iter::once(second).chain(fields) {
                let Ok(f) = f.to_str() else {
                    return false;
                };
                joined.push_str(", ");
                joined.push_str(f);
            }
            want.accepts(&joined)
        }
    }
}

fn query_accepts(wants: &[(String, Want)], query: &str) -> bool {
    wants.iter().all(|(name, want)| {
        let mut seen = false;
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            if k == name.as_str() {
                if !want.accepts(&v) {
                    return false;
                }
                seen = true;
            }
        }
        seen
    })
}

#[cfg(test)]
mod tests;

/// The backend of a split that `roll` (uniform in `0..split.total`) falls on: its upstream,
/// or `None` for a share answered 500.
pub fn split_choice(split: &tollgate_config::model::Split, roll: u32) -> Option<usize> {
    let mut left = roll;
    for b in &split.backends {
        if left < b.weight {
            return b.upstream;
        }
        left -= b.weight;
    }
    // Unreachable for a roll below the total; the first upstream rather than a panic.
    split.backends.iter().find_map(|b| b.upstream)
}
