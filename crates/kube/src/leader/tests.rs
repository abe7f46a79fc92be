use super::*;

fn election(who: &str) -> Election {
    Election {
        name: "tollgate-leader".into(),
        namespace: "ingress".into(),
        identity: who.into(),
        ttl: Duration::from_secs(8),
    }
}

/// The API server's side: one Lease, written only with the resourceVersion it holds.
#[derive(Default)]
struct Server {
    lease: Option<Lease>,
    rv: u64,
}

impl Server {
    fn write(&mut self, step: Step) -> Option<Lease> {
        let (mut l, create) = match step {
            Step::Create(l) => (l, true),
            Step::Update(l) => (l, false),
            Step::Wait => return None,
        };
        match (&self.lease, create) {
            (Some(_), true) => return None, // 409 AlreadyExists
            (None, false) => return None,   // 404
            (Some(held), false)
                if held.metadata.resource_version != l.metadata.resource_version =>
            {
                return None; // 409 Conflict: a stale resourceVersion
            }
            _ => {}
        }
        self.rv += 1;
        l.metadata.resource_version = Some(self.rv.to_string());
        self.lease = Some(l.clone());
        Some(l)
    }
}

fn wall(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).expect("time")
}

fn holder(s: &Server) -> Option<String> {
    s.lease.as_ref()?.spec.as_ref()?.holder_identity.clone()
}

#[test]
fn one_leader_of_two_and_a_takeover_only_after_the_lease_expires() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let (mut a, mut b) = (Elector::new(election("a")), Elector::new(election("b")));
    let mut api = Server::default();
    // Both read no Lease, both create: one gets it.
    let (sa, sb) = (a.step(at(0), wall(0), None), b.step(at(0), wall(0), None));
    let wa = api.write(sa);
    let wb = api.write(sb);
    assert!(a.wrote(at(0), wa.as_ref()));
    assert!(!b.wrote(at(0), wb.as_ref()), "AlreadyExists");
    assert_eq!(holder(&api).as_deref(), Some("a"));
    // Both read the same Lease and write at once: the stale one is refused.
    let read = api.lease.clone();
    let (sa, sb) = (
        a.step(at(2), wall(2), read.as_ref()),
        b.step(at(2), wall(2), read.as_ref()),
    );
    assert_eq!(sb, Step::Wait, "b sees a's fresh Lease");
    let wa = api.write(sa);
    assert!(a.wrote(at(2), wa.as_ref()));
    // a stops renewing (a partition): b waits a whole lease duration from when it saw the
    // last change, by its own clock, whatever renewTime says.
    for s in [3, 6, 9] {
        let read = api.lease.clone();
        assert_eq!(
            b.step(at(s), wall(s as i64), read.as_ref()),
            Step::Wait,
            "at {s}s"
        );
    }
    assert!(
        !a.leading(at(6)),
        "a stops leading after the renew deadline (4 s)"
    );
    let read = api.lease.clone();
    let sb = b.step(at(11), wall(11), read.as_ref());
    let wb = api.write(sb);
    assert!(b.wrote(at(11), wb.as_ref()));
    let spec = api
        .lease
        .as_ref()
        .and_then(|l| l.spec.clone())
        .expect("spec");
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
    assert_eq!(spec.acquire_time, Some(MicroTime(wall(11))));
    // a comes back: it sees b's Lease and does not write.
    let read = api.lease.clone();
    assert_eq!(a.step(at(12), wall(12), read.as_ref()), Step::Wait);
    assert!(!a.leading(at(12)));
}

#[test]
fn a_clock_ahead_on_the_other_replica_does_not_end_its_lease_early() {
    let t0 = Instant::now();
    let (mut a, mut b) = (Elector::new(election("a")), Elector::new(election("b")));
    let mut api = Server::default();
    // a writes renewTime an hour in the past (its clock is wrong): b still waits.
    let wa = api.write(a.step(t0, wall(-3600), None));
    assert!(a.wrote(t0, wa.as_ref()));
    let read = api.lease.clone();
    assert_eq!(b.step(t0, wall(0), read.as_ref()), Step::Wait);
}

#[test]
fn the_leader_renews_keeps_its_acquire_time_and_hands_the_lease_back() {
    let t0 = Instant::now();
    let mut a = Elector::new(election("a"));
    let mut api = Server::default();
    let wa = api.write(a.step(t0, wall(0), None));
    assert!(a.wrote(t0, wa.as_ref()));
    for s in 1..5 {
        let now = t0 + Duration::from_secs(2 * s);
        let read = api.lease.clone();
        let w = api.write(a.step(now, wall(2 * s as i64), read.as_ref()));
        assert!(a.wrote(now, w.as_ref()), "renewed at {s}");
    }
    let spec = api
        .lease
        .as_ref()
        .and_then(|l| l.spec.clone())
        .expect("spec");
    assert_eq!(spec.acquire_time, Some(MicroTime(wall(0))));
    assert_eq!(spec.renew_time, Some(MicroTime(wall(8))));
    assert_eq!(spec.lease_transitions, Some(0));
    // Shutdown: no holder, so b takes over at once.
    let now = t0 + Duration::from_secs(9);
    let read = api.lease.clone().expect("lease");
    let released = a.release(now, wall(9), &read).expect("a leads");
    api.write(Step::Update(released));
    assert_eq!(holder(&api), None);
    let mut b = Elector::new(election("b"));
    let read = api.lease.clone();
    let w = api.write(b.step(now, wall(9), read.as_ref()));
    assert!(b.wrote(now, w.as_ref()));
    // A follower has nothing to hand back.
    let read = api.lease.clone().expect("lease");
    assert_eq!(a.release(now, wall(9), &read), None);
}
