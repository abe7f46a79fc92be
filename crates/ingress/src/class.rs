//! Stage 2: which Ingresses this controller would serve. As ingress-nginx decides it:
//! `spec.ingressClassName` when set, else the `kubernetes.io/ingress.class` annotation; an
//! Ingress with neither is imported (ingress-nginx serves it only with
//! `--watch-ingress-without-class` or a default IngressClass), with one warning for all.
//! Then the order ingress-nginx merges them in: oldest first, then by namespace and name, so
//! the file's order never matters.

use super::objects::Ingress;
use super::text::{comment, Warnings};

pub(super) fn select(all: Vec<Ingress>, opts: &super::Options, w: &mut Warnings) -> Vec<Ingress> {
    let class = opts.ingress_class.as_str();
    let mut kept = Vec::new();
    let mut other = Vec::new();
    let mut classless = Vec::new();
    for ing in all {
        if opts.preselected {
            kept.push(ing);
            continue;
        }
        let theirs = ing
            .class_name
            .as_deref()
            .or(ing.class_annotation.as_deref());
        match theirs {
            Some(c) if c == class => kept.push(ing),
            Some(c) => other.push(format!("{}/{} ({c})", ing.ns, ing.name)),
            None => {
                classless.push(format!("Ingress {}/{}", ing.ns, ing.name));
                kept.push(ing);
            }
        }
    }
    if !other.is_empty() {
        w.push(comment(&format!(
            "skipped {} Ingress(es) of other classes than \"{class}\" (--ingress-class): {}",
            other.len(),
            other.join(", ")
        )));
    }
    if !classless.is_empty() {
        w.push(comment(&format!(
            "{} without a class (ingressClassName or kubernetes.io/ingress.class): imported as \"{class}\"; ingress-nginx serves such Ingresses only with --watch-ingress-without-class or a default IngressClass",
            classless.join(", ")
        )));
    }
    kept.sort_by(|a, b| (&a.created, &a.ns, &a.name).cmp(&(&b.created, &b.ns, &b.name)));
    // The same object twice (or two names alike once made Tollgate names): the first kept.
    let mut ids = std::collections::BTreeSet::new();
    kept.retain(|ing| {
        let new = ids.insert(ing.id.clone());
        if !new {
            w.push(format!(
                "{}: a second Ingress of that name: skipped",
                ing.ctx
            ));
        }
        new
    });
    kept
}
