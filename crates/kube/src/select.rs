//! Which Ingresses this controller serves, as ingress-nginx decides it (its store's
//! `GetIngressClass`), with Tollgate's flags:
//! 1. `spec.ingressClassName` set: served when it names an IngressClass whose
//!    `spec.controller` is `--controller-class`, or is `--ingress-class` itself (so that
//!    `ingressClassName: nginx` objects are taken over with `--ingress-class nginx`, their
//!    IngressClass still naming ingress-nginx's controller). The annotation is then not read.
//! 2. Else the `kubernetes.io/ingress.class` annotation: served when it is `--ingress-class`,
//!    or names one of this controller's IngressClasses (ingress-nginx compares it with
//!    `--ingress-class` only; naming our own class is taken as meaning it).
//! 3. Neither: served only with `--watch-ingress-without-class`.
//!
//! A class set to the empty string is a class no one has: never served (the API server
//! refuses it; a hostile object must not pass as class-less).

use std::collections::BTreeSet;

/// The flags that choose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classes {
    /// `--controller-class`: the `spec.controller` of the IngressClasses served.
    pub controller: String,
    /// `--ingress-class`: a class name served whatever its IngressClass says.
    pub ingress_class: Option<String>,
    /// `--watch-ingress-without-class`.
    pub without_class: bool,
}

pub const DEFAULT_CONTROLLER: &str = "tollgate.io/ingress-controller";

impl Default for Classes {
    fn default() -> Self {
        Classes {
            controller: DEFAULT_CONTROLLER.into(),
            ingress_class: None,
            without_class: false,
        }
    }
}

impl Classes {
    /// The names of the IngressClasses this controller serves, from every IngressClass
    /// (name, `spec.controller`).
    pub fn ours<'a>(
        &self,
        classes: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> BTreeSet<String> {
        classes
            .into_iter()
            .filter(|(_, controller)| *controller == self.controller)
            .map(|(name, _)| name.to_string())
            .collect()
    }

    /// Whether an Ingress with this `spec.ingressClassName` and class annotation is served.
    pub fn admits(
        &self,
        ours: &BTreeSet<String>,
        class_name: Option<&str>,
        annotation: Option<&str>,
    ) -> bool {
        let named = |c: &str| {
            !c.is_empty() && (ours.contains(c) || self.ingress_class.as_deref() == Some(c))
        };
        match (class_name, annotation) {
            (Some(c), _) => named(c),
            (None, Some(a)) => named(a),
            (None, None) => self.without_class,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(c: &Classes) -> BTreeSet<String> {
        c.ours([
            ("tollgate", DEFAULT_CONTROLLER),
            ("nginx", "k8s.io/ingress-nginx"),
            ("other", "example.com/other"),
        ])
    }

    #[test]
    fn ingress_nginx_order_and_takeover() {
        let c = Classes::default();
        let o = ours(&c);
        assert_eq!(o.iter().collect::<Vec<_>>(), ["tollgate"]);
        assert!(c.admits(&o, Some("tollgate"), None));
        assert!(
            !c.admits(&o, Some("nginx"), None),
            "ingress-nginx's class is not ours"
        );
        assert!(!c.admits(&o, Some("missing"), None));
        // A set ingressClassName decides alone: the annotation is not read.
        assert!(!c.admits(&o, Some("other"), Some("tollgate")));
        assert!(c.admits(&o, None, Some("tollgate")));
        assert!(
            !c.admits(&o, None, None),
            "class-less only with --watch-ingress-without-class"
        );
        // Taking over ingress-nginx's objects without editing them.
        let take = Classes {
            ingress_class: Some("nginx".into()),
            ..Classes::default()
        };
        let o = ours(&take);
        assert!(take.admits(&o, Some("nginx"), None));
        assert!(take.admits(&o, None, Some("nginx")));
        assert!(take.admits(&o, Some("tollgate"), None));
        assert!(!take.admits(&o, Some("other"), Some("nginx")));
        let all = Classes {
            without_class: true,
            ..Classes::default()
        };
        assert!(all.admits(&ours(&all), None, None));
    }

    #[test]
    fn hostile_spellings_are_not_served() {
        let c = Classes {
            ingress_class: Some("nginx".into()),
            without_class: true,
            ..Classes::default()
        };
        let o = ours(&c);
        // Empty is a class, not its absence; case and spaces differ as the API server's do.
        for bad in ["", "Nginx", "nginx ", " tollgate", "TOLLGATE"] {
            assert!(!c.admits(&o, Some(bad), None), "{bad:?}");
            assert!(!c.admits(&o, None, Some(bad)), "{bad:?}");
        }
        // An IngressClass whose controller only resembles ours.
        let o = c.ours([
            ("x", "tollgate.io/ingress-controller "),
            ("y", "Tollgate.io/ingress-controller"),
        ]);
        assert!(o.is_empty());
    }
}
