use super::*;
use crate::runtime::Runtime;
use pingora::http::RequestHeader;
use tollgate_core::observe::metrics::Metrics;

fn rt(toml: &str) -> Runtime {
    let cfg = tollgate_config::parse_str(toml, "t.toml").expect("config");
    Runtime::build(cfg, None, None, &Metrics::new().expect("metrics")).expect("runtime")
}

/// Local limits only: the local step settles every request.
fn decide(rt: &Runtime, route: usize, h: &KeyHasher, input: &KeyInput, now: Nanos) -> Verdict {
    decide_local(rt, route, h, input, 0, now, now)
        .settled()
        .expect("no global limits")
}

const CONF: &str = r#"
[[routes]]
name = "r"
path_prefix = "/"
respond = { status = 200 }
limits = ["per_ip", "tight", "watch"]
[limits.per_ip]
key = "client_ip"
rate = "1/h"
burst = 10
[limits.tight]
key = "header:x-api-key"
rate = "1/h"
burst = 2
[limits.watch]
key = "global"
rate = "1/h"
burst = 1
shadow = true
"#;

#[test]
fn a_refused_request_consumes_nothing_and_the_strictest_decides() {
    let rt = rt(CONF);
    let h = KeyHasher::new();
    let mut with_key = RequestHeader::build("GET", b"/", None).expect("req");
    with_key.insert_header("x-api-key", "k1").expect("header");
    let plain = RequestHeader::build("GET", b"/", None).expect("req");
    let ip = "192.0.2.1".parse().expect("ip");
    let now = 1_000_000_000_000;
    let keyed = KeyInput {
        req: &with_key,
        client_cert: None,
        client_ip: ip,
        path: "/",
        query: None,
        route: 0,
        claims: None,
        body: None,
        consumer: None,
        descriptor: None,
    };
    let v1 = decide(&rt, 0, &h, &keyed, now);
    assert_eq!(v1.denied, None);
    assert_eq!(
        v1.nearest.map(|(l, r, _)| (l, r)),
        Some((1, 1)),
        "tight is nearest"
    );
    let v2 = decide(&rt, 0, &h, &keyed, now);
    assert_eq!(v2.denied, None);
    assert_ne!(v2.shadow_exceeded, 0, "the shadow limit would refuse now");
    // The third keyed request is refused by "tight": per_ip must not pay for it.
    for _ in 0..5 {
        let v = decide(&rt, 0, &h, &keyed, now);
        assert_eq!(v.denied.map(|(l, _)| l), Some(1));
    }
    // per_ip spent 2 of 10: without the API key (tight not counted) 8 remain.
    let anon = KeyInput {
        req: &plain,
        client_cert: None,
        client_ip: ip,
        path: "/",
        query: None,
        route: 0,
        claims: None,
        body: None,
        consumer: None,
        descriptor: None,
    };
    let admitted = (0..20)
        .filter(|_| decide(&rt, 0, &h, &anon, now).denied.is_none())
        .count();
    assert_eq!(admitted, 8);
}

/// A store whose every answer the test decides, counting calls.
struct FakeStore {
    answer: std::sync::Mutex<Result<Decision, ()>>,
    calls: std::sync::atomic::AtomicUsize,
}

impl tollgate_store::GlobalStore for FakeStore {
    fn acquire<'a>(
        &'a self,
        _spec: &'a tollgate_limit::LimitSpec,
        _key: GlobalKey<'a>,
        _cost: u64,
    ) -> tollgate_store::BoxFuture<'a, Result<Decision, tollgate_store::StoreError>> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let a = self.answer.lock().map(|g| *g).unwrap_or(Err(()));
        Box::pin(async move { a.map_err(|_| tollgate_store::StoreError::BadReply("down".into())) })
    }
    fn refund<'a>(
        &'a self,
        _spec: &'a tollgate_limit::LimitSpec,
        _key: GlobalKey<'a>,
        _cost: u64,
    ) -> tollgate_store::BoxFuture<'a, Result<(), tollgate_store::StoreError>> {
        Box::pin(async { Ok(()) })
    }
    fn probe(&self) -> tollgate_store::BoxFuture<'_, Result<(), tollgate_store::StoreError>> {
        Box::pin(async { Ok(()) })
    }
    fn is_up(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn cached_refusals_spare_the_store_and_a_failed_probe_keeps_a_known_key_refused() {
    let fake = std::sync::Arc::new(FakeStore {
        answer: std::sync::Mutex::new(Ok(Decision::Deny {
            retry_after: 1_000_000_000,
        })),
        calls: Default::default(),
    });
    let store: std::sync::Arc<dyn tollgate_store::GlobalStore> = fake.clone();
    let conf = r#"
[redis]
url = "redis://127.0.0.1:1"
timeout = "20ms"
[[routes]]
name = "open"
path_prefix = "/o"
respond = { status = 200 }
limits = ["g_open"]
[[routes]]
name = "closed"
path_prefix = "/c"
respond = { status = 200 }
limits = ["g_closed"]
[limits.g_open]
key = "client_ip"
rate = "1/h"
scope = "global"
on_error = "open"
[limits.g_closed]
key = "global"
rate = "1/h"
scope = "global"
on_error = "closed"
"#;
    let cfg = tollgate_config::parse_str(conf, "t.toml").expect("config");
    let rt = Runtime::build(cfg, None, Some(&store), &Metrics::new().expect("metrics"))
        .expect("runtime");
    let h = KeyHasher::new();
    let req = RequestHeader::build("GET", b"/o", None).expect("req");
    let input = KeyInput {
        req: &req,
        client_cert: None,
        client_ip: "192.0.2.1".parse().expect("ip"),
        path: "/",
        query: None,
        route: 0,
        claims: None,
        body: None,
        consumer: None,
        descriptor: None,
    };
    let clock = tollgate_limit::ManualClock::new(1_000_000_000_000);
    let calls = || fake.calls.load(std::sync::atomic::Ordering::SeqCst);
    let other = KeyInput {
        client_ip: "192.0.2.2".parse().expect("ip"),
        ..input
    };
    let (rt, clock) = (&rt, &clock);
    let run_as = |route: usize, input: &KeyInput| {
        let mut plan = decide_local(rt, route, &h, input, 0, clock.now(), clock.unix_now());
        async move { decide_global(rt, &mut plan, clock).await }
    };
    let run = |route: usize| run_as(route, &input);
    // Refused by the store once, then from memory.
    assert_eq!(run(0).await.denied.map(|d| d.1), Some(1_000_000_000));
    for _ in 0..100 {
        assert!(run(0).await.denied.is_some());
    }
    assert_eq!(calls(), 1, "refusals answered from the cache");
    // Expired while the store fails: the probe fails, and the key Redis last refused is
    // decided by this process's share, drained when Redis refused it: still refused
    // (on_error = open does not lift a known refusal), and from memory after that.
    *fake.answer.lock().expect("lock") = Err(());
    clock.advance(std::time::Duration::from_secs(2));
    let v = run(0).await;
    assert!(v.denied.is_some(), "{v:?}");
    assert_eq!(v.unavailable, None);
    assert_eq!(calls(), 2);
    let v = run(0).await;
    assert!(v.denied.is_some(), "{v:?}");
    assert_eq!(calls(), 2, "held as refused by the share");
    // A key Redis never refused follows on_error = open: admitted.
    let v = run_as(0, &other).await;
    assert_eq!((v.denied, v.unavailable), (None, None));
    assert_eq!(calls(), 3);
    // on_error = closed: 503, never a 429 from a stale refusal.
    let v = run(1).await;
    assert_eq!(v.unavailable, Some(1));
    assert_eq!(v.denied, None);
}
