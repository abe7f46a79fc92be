//! `whitelist-source-range` (new name `allowlist-source-range`) and `denylist-source-range`:
//! who may connect at all.
//!
//! The allow list becomes `access.only_from` (everyone else 403; those inside still meet every
//! limit), the deny list `access.deny`. As ingress-nginx: entries that are not addresses are
//! left out, and a list with no address at all denies the location.

use super::anns::{Anns, Refusal};
use super::text::{cidrs, comment, Warnings};

/// The access lists of one Ingress (`whitelist-source-range`, `denylist-source-range`), and
/// the entries that cannot be translated.
#[derive(Default)]
pub(super) struct AccessOut {
    pub only_from: Vec<String>,
    pub deny: Vec<String>,
    pub refusals: Vec<Refusal>,
}

pub(super) fn read(a: &mut Anns, allow: &[String], w: &mut Warnings) -> AccessOut {
    let mut s = AccessOut::default();
    let ctx = a.ctx();
    let new = a
        .get("allowlist-source-range")
        .map(|v| ("allowlist-source-range", v));
    let old = a
        .get("whitelist-source-range")
        .map(|v| ("whitelist-source-range", v));
    if let (Some((_, n)), Some((_, o))) = (new, old) {
        if n != o {
            w.push(comment(&format!(
                "{ctx}: allowlist-source-range and whitelist-source-range differ: allowlist-source-range used (as by ingress-nginx)"
            )));
        }
    }
    if let Some((key, v)) = new.or(old) {
        s.only_from = list(ctx, key, v, &mut s, w);
    }
    if let Some(v) = a.get("denylist-source-range") {
        s.deny = list(ctx, "denylist-source-range", v, &mut s, w);
    }
    if !allow.is_empty() && !s.deny.is_empty() {
        w.push(format!("{ctx}: limit-whitelist and denylist-source-range together: in Tollgate an allowed address also skips the deny list; remove denied ranges from the whitelist"));
    }
    s
}

/// The addresses of a list annotation; none at all: a refusal.
fn list(ctx: &str, key: &str, v: &str, s: &mut AccessOut, w: &mut Warnings) -> Vec<String> {
    let (good, bad) = cidrs(v);
    if good.is_empty() {
        s.refusals.push(Refusal {
            annotation: key.to_string(),
            why: comment(&format!(
                "\"{v}\" holds no address or CIDR (ingress-nginx denies such a location too)"
            )),
        });
        return good;
    }
    for b in bad {
        w.push(comment(&format!(
            "{ctx}: {key}: \"{b}\" is not an address or CIDR: left out (as by ingress-nginx)"
        )));
    }
    good
}
