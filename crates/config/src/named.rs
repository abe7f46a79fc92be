//! [`Named`]: the tables a config defines by name, each found in one lookup.

use crate::reader::{as_str, Cx, Value};
use std::collections::HashMap;

/// Tables defined by name, each found by its name in one lookup (15,000 routes naming
/// 10,000 upstreams made a scan per route quadratic); the first of a repeated name, as a scan
/// finds it (the repeat is an error of its own table).
pub(crate) struct Named<'a, T> {
    items: &'a [(String, T)],
    at: HashMap<&'a str, usize>,
}

impl<'a, T> Named<'a, T> {
    pub fn new(items: &'a [(String, T)]) -> Self {
        let mut at = HashMap::with_capacity(items.len());
        for (i, (n, _)) in items.iter().enumerate() {
            at.entry(n.as_str()).or_insert(i);
        }
        Self { items, at }
    }

    /// The index of the table named `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.at.get(name).copied()
    }

    /// The index of the table the string `v` (at `path`) names, or an error naming the
    /// `what` defined: `unknown upstream "x" (defined: a, b)`.
    pub fn refer(&self, cx: &mut Cx, path: &str, v: &Value, what: &str) -> Option<usize> {
        let name = as_str(cx, path, v)?;
        let found = self.position(name);
        if found.is_none() {
            let known: Vec<_> = self.items.iter().map(|(n, _)| n.as_str()).collect();
            cx.err(
                path,
                v.span(),
                format!(
                    "unknown {what} \"{name}\" (defined: {})",
                    crate::scalars::list_or_none(&known)
                ),
            );
        }
        found
    }
}

impl<T> std::ops::Deref for Named<'_, T> {
    type Target = [(String, T)];
    fn deref(&self) -> &Self::Target {
        self.items
    }
}
