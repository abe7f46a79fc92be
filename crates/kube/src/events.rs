//! Each translation problem of an Ingress, first seen, as a Warning Event on that Ingress
//! (`events.k8s.io/v1`, through kube-runtime's `Recorder`, which folds repeats into a
//! series). Only the leader records, so two replicas do not say everything twice. Problems
//! of no one Ingress (a ConfigMap key, a Secret) are logged and counted only.

use k8s_openapi::api::networking::v1::Ingress;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::Resource;

/// The Ingress a problem line is about: its `NAMESPACE/NAME` after "Ingress ".
pub fn ingress_of(problem: &str) -> Option<(&str, &str)> {
    let rest = problem.split_once("Ingress ")?.1;
    let id = rest.split([':', ' ', ',']).next()?;
    let (ns, name) = id.split_once('/')?;
    (!ns.is_empty() && !name.is_empty()).then_some((ns, name))
}

/// An Event's note holds at most 1 kB.
fn note(problem: &str) -> String {
    let mut end = problem.len().min(1024);
    while !problem.is_char_boundary(end) {
        end -= 1;
    }
    problem[..end].to_string()
}

/// Records the problems sent on `rx` while `leading` says so, until `rx` closes.
pub async fn run(
    client: kube::Client,
    instance: String,
    ingresses: Store<Ingress>,
    leading: tokio::sync::watch::Receiver<bool>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Vec<String>>,
) {
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "tollgate".into(),
            instance: Some(instance),
        },
    );
    while let Some(problems) = rx.recv().await {
        if !*leading.borrow() {
            continue;
        }
        for p in problems {
            let Some((ns, name)) = ingress_of(&p) else {
                continue;
            };
            let key = kube::runtime::reflector::ObjectRef::new(name).within(ns);
            let Some(ing) = ingresses.get(&key) else {
                continue;
            };
            let ev = Event {
                type_: EventType::Warning,
                reason: "TranslationProblem".into(),
                note: Some(note(&p)),
                action: "Translate".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&ev, &ing.object_ref(&())).await {
                tracing::warn!(event = "kube_event_failed", error = %e, ingress = %format!("{ns}/{name}"), "the Event could not be recorded");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ingress_a_problem_names() {
        assert_eq!(
            ingress_of("Ingress shop/f: its translation is refused (x): not served"),
            Some(("shop", "f"))
        );
        assert_eq!(
            ingress_of("shop/a (Ingress shop/a, rule 1): canary-weight refused"),
            Some(("shop", "a"))
        );
        assert_eq!(ingress_of("ConfigMap ingress/c: key x ignored"), None);
        assert_eq!(ingress_of("Ingress /x: odd"), None);
        let long = "é".repeat(600);
        assert!(note(&long).len() <= 1024);
    }
}
