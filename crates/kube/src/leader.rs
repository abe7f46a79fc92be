//! One writer among the replicas: a `coordination.k8s.io/v1` Lease taken and renewed as
//! client-go's leader election does it (and so ingress-nginx): read the Lease; if another
//! holds it and its record changed less than a lease duration ago (by this replica's clock,
//! never the other's), wait; else write it with the resourceVersion read, so that of two
//! replicas writing at once the API server lets one through and answers the other 409. A
//! leader that cannot renew within the renew deadline stops leading before its Lease can
//! expire elsewhere. Every replica serves; only the leader writes status.
//!
//! [`Elector`] is the decision, without IO, on a clock it is given; [`run`] is the IO.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use std::time::{Duration, Instant};

/// `--election-ttl`: the lease duration; the renew deadline is half of it and a try is made
/// every quarter (ingress-nginx's proportions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Election {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    pub ttl: Duration,
}

impl Election {
    pub fn retry(&self) -> Duration {
        self.ttl / 4
    }
    pub fn renew_deadline(&self) -> Duration {
        self.ttl / 2
    }
}

/// What to do with the Lease read.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// No Lease: create this one.
    Create(Lease),
    /// Write this one (its resourceVersion is the one read).
    Update(Lease),
    /// Another holds it: try again later.
    Wait,
}

/// The decision of one replica.
#[derive(Debug)]
pub struct Elector {
    e: Election,
    /// The record last read and when it was first seen so (this replica's clock).
    observed: Option<(LeaseSpec, Instant)>,
    /// When this replica last renewed as leader.
    renewed: Option<Instant>,
}

fn same_holder(spec: &LeaseSpec, who: &str) -> bool {
    spec.holder_identity.as_deref() == Some(who)
}

impl Elector {
    pub fn new(e: Election) -> Self {
        Elector {
            e,
            observed: None,
            renewed: None,
        }
    }

    /// Whether this replica leads at `now`: it renewed within the renew deadline.
    pub fn leading(&self, now: Instant) -> bool {
        self.renewed
            .is_some_and(|r| now.saturating_duration_since(r) < self.e.renew_deadline())
    }

    /// The step for the Lease read at `now` (`wall`: the time written into it).
    pub fn step(&mut self, now: Instant, wall: Timestamp, read: Option<&Lease>) -> Step {
        let Some(lease) = read else {
            self.observed = None;
            return Step::Create(self.record(wall, None, None));
        };
        let spec = lease.spec.clone().unwrap_or_default();
        match &self.observed {
            Some((seen, _)) if *seen == spec => {}
            _ => self.observed = Some((spec.clone(), now)),
        }
        let since = self.observed.as_ref().map_or(now, |(_, t)| *t);
        let holder = spec.holder_identity.as_deref().unwrap_or("");
        let duration = spec
            .lease_duration_seconds
            .map_or(self.e.ttl, |s| Duration::from_secs(s.max(0) as u64));
        let held_by_other = !holder.is_empty()
            && holder != self.e.identity
            && now.saturating_duration_since(since) < duration;
        if held_by_other {
            self.renewed = None;
            return Step::Wait;
        }
        Step::Update(self.record(wall, Some(lease), Some(&spec)))
    }

    fn record(&self, wall: Timestamp, lease: Option<&Lease>, spec: Option<&LeaseSpec>) -> Lease {
        let mine = spec.is_some_and(|s| same_holder(s, &self.e.identity));
        let transitions = spec.and_then(|s| s.lease_transitions).unwrap_or(0);
        let mut out = lease.cloned().unwrap_or_default();
        out.metadata.name = Some(self.e.name.clone());
        out.metadata.namespace = Some(self.e.namespace.clone());
        out.metadata.managed_fields = None;
        out.spec = Some(LeaseSpec {
            holder_identity: Some(self.e.identity.clone()),
            lease_duration_seconds: Some(self.e.ttl.as_secs().max(1) as i32),
            acquire_time: if mine {
                spec.and_then(|s| s.acquire_time.clone())
            } else {
                Some(MicroTime(wall))
            },
            renew_time: Some(MicroTime(wall)),
            lease_transitions: Some(if mine || lease.is_none() {
                transitions
            } else {
                transitions + 1
            }),
            ..spec.cloned().unwrap_or_default()
        });
        out
    }

    /// The outcome of the write a step asked for: `written` is the Lease the API server kept
    /// (`None`: refused, a 409 most often). Whether this replica leads.
    pub fn wrote(&mut self, now: Instant, written: Option<&Lease>) -> bool {
        if let Some(l) = written {
            let spec = l.spec.clone().unwrap_or_default();
            if same_holder(&spec, &self.e.identity) {
                self.renewed = Some(now);
            }
            self.observed = Some((spec, now));
        }
        self.leading(now)
    }

    /// The Lease to write on shutdown, if this replica leads: no holder, as client-go's
    /// `ReleaseOnCancel` (the next replica takes it at once, not a lease duration later).
    pub fn release(&self, now: Instant, wall: Timestamp, read: &Lease) -> Option<Lease> {
        let spec = read.spec.as_ref()?;
        if !self.leading(now) || !same_holder(spec, &self.e.identity) {
            return None;
        }
        let mut out = read.clone();
        out.metadata.managed_fields = None;
        out.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            renew_time: Some(MicroTime(wall)),
            ..spec.clone()
        });
        Some(out)
    }
}

/// Takes part in the election until `stop` turns true; `leading` says, after each try,
/// whether this replica leads (and `tollgate_kube_leader`). On stop a leader hands the
/// Lease back. Errors (the API server away) count as a failed renewal: a leader stops
/// leading after the renew deadline, and the others can take over once the Lease expires.
pub async fn run(
    client: kube::Client,
    e: Election,
    m: crate::metrics::KubeMetrics,
    leading: tokio::sync::watch::Sender<bool>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    use kube::api::{Api, PostParams};
    let api: Api<Lease> = Api::namespaced(client, &e.namespace);
    let (name, retry) = (e.name.clone(), e.retry());
    let mut el = Elector::new(e);
    let pp = PostParams::default();
    // Each try is bounded by the renew deadline (the client's own timeout is minutes), and a
    // renewal counts from before it was asked: a slow answer never stretches the lease this
    // replica believes it holds past what the others see.
    let bound = el.e.renew_deadline();
    loop {
        let asked = Instant::now();
        let attempt = async {
            match api.get_opt(&name).await {
                Ok(read) => match el.step(asked, Timestamp::now(), read.as_ref()) {
                    Step::Create(l) => api.create(&pp, &l).await.ok(),
                    Step::Update(l) => api.replace(&name, &pp, &l).await.ok(),
                    Step::Wait => None,
                },
                Err(err) => {
                    tracing::warn!(event = "kube_election_failed", error = %err, "the Lease could not be read");
                    None
                }
            }
        };
        let written = tokio::time::timeout(bound, attempt).await.ok().flatten();
        let now_leading = el.wrote(asked, written.as_ref());
        if *leading.borrow() != now_leading {
            tracing::info!(event = "kube_leader", leading = now_leading, lease = %name, "{}", if now_leading { "leading: this replica writes status" } else { "not leading" });
        }
        m.leader.set(i64::from(now_leading));
        leading.send_if_modified(|l| std::mem::replace(l, now_leading) != now_leading);
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    if let Ok(Some(read)) = api.get_opt(&name).await {
        if let Some(l) = el.release(Instant::now(), Timestamp::now(), &read) {
            let _ = api.replace(&name, &pp, &l).await;
        }
    }
    m.leader.set(0);
    leading.send_replace(false);
}

#[cfg(test)]
mod tests;
