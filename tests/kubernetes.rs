//! `tollgate run --kubernetes` end to end (issue 41): the binary against the API server
//! stand-in (`crates/kube-standin`, proved with kubectl and python3-kubernetes), objects
//! written with Debian's kubectl, traffic from real sockets to loopback backends.
//! - an Ingress applied serves within 1 s; a changed path, annotation (an allow list) and
//!   EndpointSlice are served within 1 s, with no failed request through the endpoint change;
//!   deleting it stops it;
//! - what is not ours is not served: another class, an empty class, no class;
//! - a bad Ingress (a protection with no translation) answers 403 on its own routes only;
//! - an Ingress cannot take over a BASE.toml upstream;
//! - the API server away: the last config serves; back: nothing lost, a 410 re-lists;
//! - TLS Secrets served by SNI (held in memory), renewed within a second, a default
//!   certificate for other names; an htpasswd Secret guards its Ingress, read live.

#[path = "kube/mod.rs"]
mod kube;

use kube::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tollgate_testkit::pki::{Ca, LeafSpec};
use tollgate_testkit::*;

fn ingress(name: &str, class: &str, path: &str, annotations: &str) -> String {
    let class = if class == "-" {
        String::new()
    } else {
        format!("  ingressClassName: \"{class}\"\n")
    };
    format!(
        r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: shop
  annotations:
    example.com/team: "shop"
{annotations}spec:
{class}  rules:
  - host: {name}.example
    http:
      paths:
      - path: {path}
        pathType: Prefix
        backend:
          service:
            name: web
            port:
              number: 80
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingresses_applied_with_kubectl_are_served_changed_and_stopped_within_a_second() {
    let c = Cluster::start().await;
    let (a, b) = (
        Backend::start().await.expect("a"),
        Backend::start().await.expect("b"),
    );
    c.apply(&service("web", a.addr.port()));
    let (port, admin) = (free_port(), free_port());
    let _gw = c.gateway(port, admin, "").await;
    assert!(ready(admin).await, "ready once every kind has listed");
    let second = Duration::from_secs(1);
    // Applied: served within 1 s.
    c.apply(&ingress("shop", "tollgate", "/", ""));
    let took = until(port, "shop.example", "/", 200, Duration::from_secs(5))
        .await
        .expect("served");
    assert!(took < second, "served after {took:?}");
    assert!(a.hits() > 0);
    // Not ours: ingress-nginx's class, an empty class, no class (no --watch-ingress-without-class).
    c.apply(&ingress("theirs", "nginx", "/", ""));
    c.apply(&ingress("empty", "", "/", ""));
    c.apply(&ingress("classless", "-", "/", ""));
    tokio::time::sleep(Duration::from_millis(800)).await;
    for host in ["theirs.example", "empty.example", "classless.example"] {
        assert_eq!(status(port, host, "/").await, 404, "{host}");
    }
    // An annotation: an allow list that excludes loopback refuses within 1 s; lifted, serves.
    c.apply(&ingress(
        "shop",
        "tollgate",
        "/",
        "    nginx.ingress.kubernetes.io/whitelist-source-range: 10.0.0.0/8\n",
    ));
    let took = until(port, "shop.example", "/", 403, Duration::from_secs(5))
        .await
        .expect("refused");
    assert!(took < second, "the allow list took {took:?}");
    c.apply(&ingress("shop", "tollgate", "/", ""));
    assert!(until(port, "shop.example", "/", 200, second)
        .await
        .is_some());
    // The endpoints move to backend b, under load: no request fails through the change.
    let load = tokio::spawn(async move {
        let mut failed = 0;
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            if status(port, "shop.example", "/").await != 200 {
                failed += 1;
            }
        }
        failed
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before_b = b.hits();
    let m = metrics(admin).await;
    let reloads = metric(&m, "tollgate_config_reloads_total", &["result=\"ok\""]);
    let placed = metric(&m, "tollgate_kube_endpoint_updates_total", &[]);
    c.apply(&service("web", b.addr.port()));
    let moved = Instant::now();
    while b.hits() == before_b && moved.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        moved.elapsed() < second,
        "the endpoints took {:?}",
        moved.elapsed()
    );
    assert_eq!(
        load.await.expect("load"),
        0,
        "requests failed through the endpoint change"
    );
    // Placed in the pool, without a reload: routes, limits and pools stay.
    let m = metrics(admin).await;
    assert_eq!(
        metric(&m, "tollgate_config_reloads_total", &["result=\"ok\""]),
        reloads,
        "an endpoint change alone reloads nothing"
    );
    assert!(metric(&m, "tollgate_kube_endpoint_updates_total", &[]) > placed);
    // A changed path.
    c.apply(&ingress("shop", "tollgate", "/v2", ""));
    assert!(until(port, "shop.example", "/", 404, second)
        .await
        .is_some());
    assert_eq!(status(port, "shop.example", "/v2/x").await, 200);
    // A protection with no translation (a snippet) answers 403 on that Ingress's routes only.
    c.apply(&ingress(
        "bad",
        "tollgate",
        "/",
        "    nginx.ingress.kubernetes.io/configuration-snippet: \"deny all;\"\n",
    ));
    assert!(until(port, "bad.example", "/", 403, Duration::from_secs(3))
        .await
        .is_some());
    assert_eq!(
        status(port, "shop.example", "/v2/x").await,
        200,
        "the others keep serving"
    );
    // Deleted: stopped.
    c.kubectl(&["delete", "ingress", "shop", "-n", "shop"]);
    assert!(until(port, "shop.example", "/v2/x", 404, second)
        .await
        .is_some());
    let m = metrics(admin).await;
    assert!(metric(&m, "tollgate_kube_syncs_total", &["result=\"ok\""]) >= 5.0);
    assert_eq!(
        metric(&m, "tollgate_kube_objects", &["kind=\"Ingress\""]),
        4.0
    );
    assert!(metric(&m, "tollgate_kube_last_sync_timestamp_seconds", &[]) > 1.7e9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingress_cannot_take_over_a_base_upstream_or_host() {
    let c = Cluster::start().await;
    let (mine, theirs) = (
        Backend::start().await.expect("mine"),
        Backend::start().await.expect("theirs"),
    );
    c.apply(&service("web", theirs.addr.port()));
    let (port, admin) = (free_port(), free_port());
    // BASE's upstream is named as the translation names the Ingress's ("NS.SVC.PORT").
    let base = format!("[upstreams.\"shop.web.80\"]\ntargets = [\"{}\"]\n\n[[routes]]\nname = \"admin\"\nhost = \"admin.example\"\npath_prefix = \"/\"\nupstream = \"shop.web.80\"\n", mine.addr);
    let _gw = c.gateway(port, admin, &base).await;
    assert!(ready(admin).await);
    c.apply(&ingress("shop", "tollgate", "/", ""));
    c.apply(&ingress("other", "tollgate", "/", ""));
    // BASE's host: an Ingress naming it does not take it over.
    c.apply(&ingress("admin", "tollgate", "/", ""));
    // An Ingress whose auth Secret is missing is not served, and holds nobody back.
    c.apply(&ingress("locked", "tollgate", "/", "    nginx.ingress.kubernetes.io/auth-type: basic\n    nginx.ingress.kubernetes.io/auth-secret: users\n"));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(status(port, "locked.example", "/").await, 404);
    assert_eq!(status(port, "admin.example", "/").await, 200);
    assert_eq!(
        theirs.hits(),
        0,
        "the cluster's definition never replaced BASE's"
    );
    assert_eq!(
        status(port, "shop.example", "/").await,
        404,
        "the Ingress's routes naming it are not served"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_away_keeps_the_last_config_and_loses_no_update() {
    let c = Cluster::start().await;
    let a = Backend::start().await.expect("a");
    c.apply(&service("web", a.addr.port()));
    c.apply(&ingress("shop", "tollgate", "/", ""));
    let (port, admin) = (free_port(), free_port());
    let _gw = c.gateway(port, admin, "").await;
    assert!(ready(admin).await);
    assert!(
        until(port, "shop.example", "/", 200, Duration::from_secs(3))
            .await
            .is_some()
    );
    // Away for 3 s: every request meanwhile is served by the last config.
    let outage = c.standin.outage(Duration::from_secs(3));
    let check = async {
        let t = Instant::now();
        let mut failed = 0;
        while t.elapsed() < Duration::from_millis(2500) {
            if status(port, "shop.example", "/").await != 200 {
                failed += 1;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        failed
    };
    let ((), failed) = tokio::join!(outage, check);
    assert_eq!(failed, 0);
    // Back: a change made now is served (the watch resumes or re-lists).
    c.apply(&ingress("shop", "tollgate", "/after", ""));
    assert!(
        until(port, "shop.example", "/after", 200, Duration::from_secs(20))
            .await
            .is_some(),
        "the update after the outage"
    );
    // Every watch told 410 Gone: they list again, and a change after it is served.
    c.standin.expire_watches();
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.apply(&ingress("late", "tollgate", "/", ""));
    assert!(
        until(port, "late.example", "/", 200, Duration::from_secs(20))
            .await
            .is_some(),
        "the update after a 410"
    );
    let m = metrics(admin).await;
    assert!(
        metric(
            &m,
            "tollgate_kube_watch_restarts_total",
            &["kind=\"Ingress\""]
        ) >= 1.0,
        "{m}"
    );
}

/// curl over TLS as `host`, trusting `ca`: the status (0 when curl failed).
fn curl_tls(tls: u16, host: &str, ca: &Path, args: &[&str]) -> u16 {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "5",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg("--cacert")
        .arg(ca)
        .arg("--resolve")
        .arg(format!("{host}:{tls}:127.0.0.1"))
        .args(args)
        .arg(format!("https://{host}:{tls}/"))
        .stdin(Stdio::null())
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_htpasswd_secrets_are_read_live_and_held_in_memory() {
    let c = Cluster::start().await;
    let web = Backend::start().await.expect("web");
    c.apply(&service("web", web.addr.port()));
    let (port, admin, tls, _gw) = c.tls_gateway().await;
    let fake = "Tollgate Ingress Controller Fake Certificate";
    assert_eq!(
        handshake_subject(tls, None, &[]).as_deref(),
        Some(fake),
        "the default, before any Ingress"
    );

    let ca = Ca::new("cluster ca").expect("ca");
    let leaf = ca
        .issue(&LeafSpec::server(&["shop.example"]))
        .expect("leaf");
    let (crt, key) = leaf.write(&c.dir, "shop").expect("write");
    let ca_file = ca.write(&c.dir, "ca.crt").expect("ca file");
    // The Ingress first: its Secret not there yet (cert-manager has not issued it), it is
    // served, over TLS with the default certificate.
    c.apply(&ingress("shop", "tollgate", "/", "").replace(
        "spec:\n",
        "spec:\n  tls:\n  - hosts: [shop.example]\n    secretName: site\n",
    ));
    assert!(
        until(port, "shop.example", "/", 308, Duration::from_secs(5))
            .await
            .is_some(),
        "HTTP redirects to HTTPS, as ingress-nginx's ssl-redirect"
    );
    assert_eq!(
        handshake_subject(tls, Some("shop.example"), &[]).as_deref(),
        Some(fake)
    );
    c.tls_secret("site", &crt, &key);
    let t = Instant::now();
    while curl_tls(tls, "shop.example", &ca_file, &[]) != 200 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the Secret's certificate is not served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(
        handshake_subject(tls, Some("other.example"), &[]).as_deref(),
        Some(fake),
        "other names"
    );
    assert!(web.hits() > 0);

    // Renewed in the cluster: new handshakes get it within a second or two.
    let renewed = ca
        .issue(&LeafSpec {
            common_name: "renewed".into(),
            ..LeafSpec::server(&["shop.example"])
        })
        .expect("renewed");
    let (crt2, key2) = renewed.write(&c.dir, "shop2").expect("write");
    c.tls_secret("site", &crt2, &key2);
    let t = Instant::now();
    while handshake_subject(tls, Some("shop.example"), &[]).as_deref() != Some("renewed") {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the renewal is not served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(curl_tls(tls, "shop.example", &ca_file, &[]), 200);

    // Nothing of it on disk: the importer's mount folder does not exist here.
    assert!(!Path::new("/etc/tollgate/tls/shop").exists());

    // An htpasswd Secret (ingress-nginx's auth-file form), made by htpasswd.
    let users = c.dir.join("auth");
    let made = Command::new("htpasswd")
        .args([
            "-cbB",
            "-C",
            "10",
            users.to_str().expect("path"),
            "ann",
            "s3cret",
        ])
        .output()
        .expect("htpasswd (apache2-utils)");
    assert!(made.status.success());
    c.kubectl(&[
        "create",
        "secret",
        "generic",
        "users",
        "-n",
        "shop",
        &format!("--from-file=auth={}", users.display()),
    ]);
    c.apply(&ingress(
        "locked",
        "tollgate",
        "/",
        "    nginx.ingress.kubernetes.io/auth-type: basic\n    nginx.ingress.kubernetes.io/auth-secret: users\n    nginx.ingress.kubernetes.io/ssl-redirect: \"false\"\n",
    ));
    assert!(
        until(port, "locked.example", "/", 401, Duration::from_secs(5))
            .await
            .is_some()
    );
    let basic = |u: &str, p: &str| {
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
        )
    };
    let ok = get(
        port,
        "/",
        &[
            ("host", "locked.example"),
            ("authorization", &basic("ann", "s3cret")),
        ],
    )
    .await
    .expect("get");
    assert_eq!(ok.status, 200);
    let bad = get(
        port,
        "/",
        &[
            ("host", "locked.example"),
            ("authorization", &basic("ann", "nope")),
        ],
    )
    .await
    .expect("get");
    assert_eq!(bad.status, 401);
    // The Secret deleted: the Ingress is no longer served (never served unguarded).
    c.kubectl(&["delete", "secret", "users", "-n", "shop"]);
    assert!(
        until(port, "locked.example", "/", 404, Duration::from_secs(5))
            .await
            .is_some()
    );
    let m = metrics(admin).await;
    assert!(metric(&m, "tollgate_kube_objects", &["kind=\"Secret\""]) >= 1.0);
    assert!(metric(&m, "tollgate_tls_certificates_served", &[]) >= 2.0);
}

impl Cluster {
    /// The Ingress's `.status.loadBalancer.ingress`, as kubectl prints it.
    fn lb_status(&self, name: &str) -> String {
        self.kubectl(&[
            "get",
            "ingress",
            name,
            "-n",
            "shop",
            "-o",
            "jsonpath={.status.loadBalancer.ingress[*].ip}",
        ])
    }

    /// The status writes the stand-in has answered.
    fn status_writes(&self) -> usize {
        self.standin
            .log()
            .iter()
            .filter(|r| {
                r["method"] == "PATCH" && r["path"].as_str().is_some_and(|p| p.ends_with("/status"))
            })
            .count()
    }

    async fn replica(&self, port: u16, admin: u16) -> GatewayProc {
        let flags = [
            "--publish-status-address",
            "203.0.113.7",
            "--election-ttl",
            "2s",
            "--update-status-on-shutdown",
        ];
        self.gateway_with(Path::new(BIN), port, admin, "", &flags)
            .await
    }
}

async fn leads(admin: u16) -> bool {
    metric(&metrics(admin).await, "tollgate_kube_leader", &[]) == 1.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_writes_status_once_and_hands_over() {
    let c = Cluster::start().await;
    let web = Backend::start().await.expect("web");
    c.apply(&service("web", web.addr.port()));
    c.apply(&ingress("shop", "tollgate", "/", ""));
    let (pa, aa, pb, ab) = (free_port(), free_port(), free_port(), free_port());
    let mut a = c.replica(pa, aa).await;
    assert!(ready(aa).await);
    let t = Instant::now();
    while c.lb_status("shop") != "203.0.113.7" {
        assert!(t.elapsed() < Duration::from_secs(5), "no status written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let b = c.replica(pb, ab).await;
    assert!(ready(ab).await);
    assert_eq!(
        status(pb, "shop.example", "/").await,
        200,
        "every replica serves"
    );
    // Two ttl/4 rounds: b sees a's Lease renewed and never leads; nothing is written again
    // while the status says what it should.
    let writes = c.status_writes();
    assert_eq!(writes, 1, "one write for one Ingress");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(leads(aa).await && !leads(ab).await, "one leader");
    c.apply(&ingress("shop", "tollgate", "/v2", ""));
    assert!(
        until(pa, "shop.example", "/v2", 200, Duration::from_secs(3))
            .await
            .is_some()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(c.status_writes(), writes, "written only when it differs");
    // A problem of one Ingress: an Event on it, recorded by the leader alone.
    c.apply(&ingress(
        "bad",
        "tollgate",
        "/",
        "    nginx.ingress.kubernetes.io/configuration-snippet: \"deny all;\"\n",
    ));
    let t = Instant::now();
    let events = loop {
        let e = c.kubectl(&[
            "get", "events.v1.events.k8s.io", "-n", "shop", "-o",
            "jsonpath={range .items[*]}{.regarding.kind}/{.regarding.name} {.reason} {.type} {.reportingController}{\"\\n\"}{end}",
        ]);
        if e.contains("Ingress/bad") || t.elapsed() > Duration::from_secs(5) {
            break e;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        events.trim(),
        "Ingress/bad TranslationProblem Warning tollgate",
        "one Event, on the Ingress, from one replica"
    );
    // The leader stops: it empties the status and hands the Lease back; b takes over at once
    // (not a lease duration later) and writes it again.
    a.signal(libc::SIGTERM);
    assert!(a.wait_exit(Duration::from_secs(15)).await.is_some());
    let t = Instant::now();
    while !leads(ab).await {
        assert!(t.elapsed() < Duration::from_secs(3), "b did not take over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while c.lb_status("shop") != "203.0.113.7" {
        assert!(t.elapsed() < Duration::from_secs(5), "b wrote no status");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The last replica stops: the status is emptied (--update-status-on-shutdown).
    let mut b = b;
    b.signal(libc::SIGTERM);
    assert!(b.wait_exit(Duration::from_secs(15)).await.is_some());
    assert_eq!(c.lb_status("shop"), "", "cleared on shutdown");
    let lease = c.kubectl(&[
        "get",
        "lease",
        "tollgate-leader",
        "-n",
        "default",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    assert_eq!(lease, "", "the Lease handed back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_scope_global_is_one_count_across_replicas() {
    let c = Cluster::start().await;
    let web = Backend::start().await.expect("web");
    let redis = RedisServer::start().expect("redis-server");
    c.apply(&service("web", web.addr.port()));
    let redis_toml = format!(
        "\n[redis]\nurl = \"{}\"\ntimeout = \"500ms\"\n\n[limits.partner]\nkey = \"client_ip\"\nrate = \"1/m\"\nburst = 2\n",
        redis.url()
    );
    let (pa, aa, pb, ab) = (free_port(), free_port(), free_port(), free_port());
    let _a = c.gateway(pa, aa, &redis_toml).await;
    let _b = c.gateway(pb, ab, &redis_toml).await;
    assert!(ready(aa).await && ready(ab).await);
    // 1/s with a burst of 1: two pass at once, per client. Per replica (ingress-nginx's
    // way) two replicas let four through; global, two.
    let limited = |name: &str, scope: &str| {
        ingress(
            name,
            "tollgate",
            "/",
            &format!(
                "    nginx.ingress.kubernetes.io/limit-rps: \"1\"\n    nginx.ingress.kubernetes.io/limit-burst-multiplier: \"1\"\n    tollgate.io/limit-scope: {scope}\n"
            ),
        )
    };
    c.apply(&limited("local", "local"));
    c.apply(&limited("global", "global"));
    // A BASE.toml limit attached by name.
    c.apply(&ingress(
        "named",
        "tollgate",
        "/",
        "    tollgate.io/limits: partner\n",
    ));
    // Applied last, served with or after the others: its answer on both replicas says
    // they serve the limited ones, without spending their tokens.
    c.apply(&ingress("ready", "tollgate", "/", ""));
    for p in [pa, pb] {
        assert!(until(p, "ready.example", "/", 200, Duration::from_secs(5))
            .await
            .is_some());
    }
    let burst = |host: &'static str| async move {
        let mut ok = 0;
        for i in 0..8 {
            if status(if i % 2 == 0 { pa } else { pb }, host, "/").await == 200 {
                ok += 1;
            }
        }
        ok
    };
    let (local, global) = (burst("local.example").await, burst("global.example").await);
    assert!(
        local >= 4,
        "per replica, each lets its own burst through: {local}"
    );
    assert!(global <= 3, "one count across both: {global} passed");
    assert!(global >= 2);
    let mut named = Vec::new();
    for _ in 0..4 {
        named.push(status(pa, "named.example", "/").await);
    }
    assert_eq!(
        named,
        [200, 200, 429, 429],
        "BASE's partner limit, on the Ingress's route"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_secret_makes_clients_show_a_certificate() {
    let c = Cluster::start().await;
    let web = Backend::start().await.expect("web");
    c.apply(&service("web", web.addr.port()));
    let (_, _, tls, _gw) = c.tls_gateway().await;
    let server_ca = Ca::new("server ca").expect("ca");
    let (crt, key) = server_ca
        .issue(&LeafSpec::server(&["mtls.example"]))
        .expect("leaf")
        .write(&c.dir, "mtls")
        .expect("write");
    c.tls_secret("site", &crt, &key);
    let client_ca = Ca::new("client ca").expect("client ca");
    let ca_file = client_ca.write(&c.dir, "client-ca.crt").expect("write");
    c.kubectl(&[
        "create",
        "secret",
        "generic",
        "clients",
        "-n",
        "shop",
        &format!("--from-file=ca.crt={}", ca_file.display()),
    ]);
    let (ccrt, ckey) = client_ca
        .issue(&LeafSpec::client("alice"))
        .expect("client")
        .write(&c.dir, "alice")
        .expect("write");
    let stranger = Ca::new("stranger").expect("stranger");
    let (scrt, skey) = stranger
        .issue(&LeafSpec::client("mallory"))
        .expect("client")
        .write(&c.dir, "mallory")
        .expect("write");
    c.apply(
        &ingress(
            "mtls",
            "tollgate",
            "/",
            "    nginx.ingress.kubernetes.io/auth-tls-secret: shop/clients\n    nginx.ingress.kubernetes.io/auth-tls-verify-client: \"on\"\n",
        )
        .replace(
            "spec:\n",
            "spec:\n  tls:\n  - hosts: [mtls.example]\n    secretName: site\n",
        ),
    );
    let trust = server_ca.write(&c.dir, "server-ca.crt").expect("write");
    let with = |crt: &Path, key: &Path| {
        curl_tls(
            tls,
            "mtls.example",
            &trust,
            &[
                "--cert",
                crt.to_str().expect("path"),
                "--key",
                key.to_str().expect("path"),
            ],
        )
    };
    let t = Instant::now();
    while with(&ccrt, &ckey) != 200 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the CA Secret is not in force"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        curl_tls(tls, "mtls.example", &trust, &[]),
        0,
        "no certificate: no handshake"
    );
    assert_eq!(
        with(&scrt, &skey),
        0,
        "a certificate of another CA: no handshake"
    );
    // The CA Secret gone: the Ingress is left out, never served without the check.
    c.kubectl(&["delete", "secret", "clients", "-n", "shop"]);
    let t = Instant::now();
    while with(&ccrt, &ckey) == 200 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "still served without its CA Secret"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_ne!(
        curl_tls(tls, "mtls.example", &trust, &[]),
        200,
        "never served unguarded"
    );
}

fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A cluster's size: 5,000 Ingresses, each its own Service with four EndpointSlices of one
/// endpoint (20,000 endpoints). Run from bench/ on a release build:
/// `TOLLGATE_BIN=target/release/tollgate cargo test --release --test kubernetes -- --ignored cluster_size --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a soak: run from bench/ on a release build"]
async fn cluster_size_5000_ingresses_and_20000_endpoints() {
    let bin = std::env::var("TOLLGATE_BIN").unwrap_or_else(|_| BIN.to_string());
    let n: usize = std::env::var("INGRESSES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let c = Cluster::start().await;
    let mut backends = Vec::new();
    for _ in 0..5 {
        backends.push(Backend::start().await.expect("backend"));
    }
    let kind = |g: &str, r: &str| tollgate_kube_standin::kinds::find(g, "v1", r).expect("kind");
    let (svc_k, slice_k, ing_k) = (
        kind("", "services"),
        kind("discovery.k8s.io", "endpointslices"),
        kind("networking.k8s.io", "ingresses"),
    );
    let slice = |i: usize, j: usize, port: u16| {
        serde_json::json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("s{i}-{j}"), "labels": {"kubernetes.io/service-name": format!("s{i}")}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": port}],
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}]})
    };
    c.standin.with_store(|s| {
        for i in 0..n {
            s.create(svc_k, "shop", serde_json::json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": format!("s{i}")}, "spec": {"ports": [{"name": "http", "port": 80}]}}))
                .expect("service");
            for (j, b) in backends.iter().take(4).enumerate() {
                s.create(slice_k, "shop", slice(i, j, b.addr.port())).expect("slice");
            }
            s.create(ing_k, "shop", serde_json::json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": format!("i{i}")},
                "spec": {"ingressClassName": "tollgate", "rules": [{"host": format!("h{i}.example"), "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": format!("s{i}"), "port": {"number": 80}}}}]}}]}}))
                .expect("ingress");
        }
    });
    let (port, admin) = (free_port(), free_port());
    let started = Instant::now();
    let gw = c.gateway_with(Path::new(&bin), port, admin, "", &[]).await;
    let last = format!("h{}.example", n - 1);
    let served = until(port, &last, "/", 200, Duration::from_secs(120)).await;
    let ready_after = started.elapsed();
    assert!(served.is_some(), "not served in 120 s");
    let rss = rss_kib(gw.pid());
    // One endpoint change: placed in the pool, no translation or reload.
    let reloads = metric(
        &metrics(admin).await,
        "tollgate_config_reloads_total",
        &["result=\"ok\""],
    );
    let before = backends[4].hits();
    c.standin.with_store(|s| {
        let mut moved = slice(0, 0, backends[4].addr.port());
        moved["metadata"]["namespace"] = "shop".into();
        s.replace(slice_k, "shop", "s0-0", moved, false)
            .expect("replace");
    });
    let changed = Instant::now();
    let mut took = None;
    while changed.elapsed() < Duration::from_secs(60) {
        for _ in 0..4 {
            status(port, "h0.example", "/").await;
        }
        if backends[4].hits() > before {
            took = Some(changed.elapsed());
            break;
        }
    }
    let m = metrics(admin).await;
    println!(
        "cluster of {n} Ingresses, {} endpoints: served after {ready_after:?}, RSS {} MiB, one endpoint change served after {took:?}, syncs {}",
        n * 4,
        rss / 1024,
        metric(&m, "tollgate_kube_syncs_total", &["result=\"ok\""])
    );
    for line in gw
        .log_text()
        .lines()
        .filter(|l| l.contains("reload") || l.contains("kube"))
    {
        println!("  {line}");
    }
    assert!(took.is_some(), "the endpoint change was not served");
    assert_eq!(
        metric(&m, "tollgate_config_reloads_total", &["result=\"ok\""]),
        reloads,
        "an endpoint change alone reloads nothing"
    );
}

fn configmap(name: &str, data: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: shop\ndata:\n{data}")
}

/// `custom-headers`: the ConfigMap an Ingress names sets its answers' fields, under the
/// controller ConfigMap's allow list, and a change of it is served within a second; a
/// ConfigMap no Ingress names (a leader-election lock beating) reloads nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_headers_follow_their_configmap_live() {
    let c = Cluster::start().await;
    let web = Backend::start().await.expect("web");
    c.apply(&service("web", web.addr.port()));
    c.apply(&configmap(
        "controller",
        "  global-allowed-response-headers: \"X-Frame-Options,X-Team\"\n",
    ));
    c.apply(&configmap("security", "  X-Frame-Options: DENY\n"));
    let (port, admin) = (free_port(), free_port());
    let _gw = c
        .gateway_with(
            Path::new(BIN),
            port,
            admin,
            "",
            &["--configmap", "shop/controller"],
        )
        .await;
    assert!(ready(admin).await);
    c.apply(&ingress(
        "framed",
        "tollgate",
        "/",
        "    nginx.ingress.kubernetes.io/custom-headers: shop/security\n",
    ));
    let field = || async move {
        get(port, "/", &[("host", "framed.example")])
            .await
            .ok()
            .filter(|r| r.status == 200)
            .and_then(|r| r.header("x-frame-options").map(str::to_string))
    };
    assert!(
        eventually(Duration::from_secs(5), || async move {
            field().await.as_deref() == Some("DENY")
        })
        .await,
        "the ConfigMap's field is set"
    );
    // Changed: served within a second. A field the allow list lacks: 403, never dropped.
    c.apply(&configmap(
        "security",
        "  X-Frame-Options: SAMEORIGIN\n  X-Team: shop\n",
    ));
    let t = Instant::now();
    while field().await.as_deref() != Some("SAMEORIGIN") {
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "the change took over 1 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.apply(&configmap("security", "  X-Debug: \"1\"\n"));
    assert!(
        until(port, "framed.example", "/", 403, Duration::from_secs(5))
            .await
            .is_some()
    );
    c.apply(&configmap("security", "  X-Frame-Options: DENY\n"));
    assert!(
        until(port, "framed.example", "/", 200, Duration::from_secs(5))
            .await
            .is_some()
    );
    // A ConfigMap nobody names, changed again and again: no translation, no reload.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let reloads = metric(
        &metrics(admin).await,
        "tollgate_config_reloads_total",
        &["result=\"ok\""],
    );
    for beat in 0..5 {
        c.apply(&configmap("lock", &format!("  holder: \"pod-{beat}\"\n")));
    }
    tokio::time::sleep(Duration::from_millis(900)).await;
    let m = metrics(admin).await;
    assert_eq!(
        metric(&m, "tollgate_config_reloads_total", &["result=\"ok\""]),
        reloads,
        "a ConfigMap no Ingress names reloads nothing"
    );
    // Counted at the last translation: the controller's and the one named.
    assert!(metric(&m, "tollgate_kube_objects", &["kind=\"ConfigMap\""]) >= 2.0);
}

/// `default-backend`: while the Ingress's Service has no endpoint its requests go to the
/// default backend (its first port), and back the moment endpoints come; with
/// `custom-http-errors` the default backend answers the listed statuses, told of the Ingress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_backend_serves_while_the_service_has_no_endpoint_and_answers_its_errors() {
    let c = Cluster::start().await;
    let web = Backend::start().await.expect("web");
    let pages = Recorder::pages().await.expect("pages");
    // The Service alone: no EndpointSlice yet (a Deployment scaled to zero).
    let svc = service("web", web.addr.port());
    let (web_service, web_slice) = svc.split_once("---\n").expect("two objects");
    c.apply(web_service);
    c.apply(&service("errors", pages.addr.port()));
    let (port, admin) = (free_port(), free_port());
    let _gw = c.gateway(port, admin, "").await;
    assert!(ready(admin).await);
    c.apply(&ingress(
        "fallback",
        "tollgate",
        "/",
        "    nginx.ingress.kubernetes.io/default-backend: errors\n    nginx.ingress.kubernetes.io/custom-http-errors: \"404,503\"\n",
    ));
    let from_pages = eventually(Duration::from_secs(5), || async {
        get(port, "/a", &[("host", "fallback.example")])
            .await
            .is_ok_and(|r| r.status == 200 && r.body == "page for 200")
    })
    .await;
    assert!(
        from_pages,
        "the default backend serves while web has no endpoint"
    );
    // Endpoints come: web serves, within a second.
    c.apply(web_slice);
    let t = Instant::now();
    loop {
        let r = get(port, "/a", &[("host", "fallback.example")])
            .await
            .expect("req");
        if r.status == 200 && r.body.contains("\"path\"") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "web took over 1 s: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // web's 404: the default backend's page, told which Ingress and Service it is for.
    let before = pages.seen().len();
    let r = get(
        port,
        "/missing?x=1",
        &[("host", "fallback.example"), ("x-want-status", "404")],
    )
    .await
    .expect("404");
    assert_eq!((r.status, r.body.as_str()), (404, "page for 404"));
    let seen = pages.seen();
    let p = &seen[before];
    let h = |n: &str| {
        p.headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(p.target, "/?x=1");
    assert_eq!(h("x-code").as_deref(), Some("404"));
    assert_eq!(h("x-original-uri").as_deref(), Some("/missing?x=1"));
    assert_eq!(h("x-namespace").as_deref(), Some("shop"));
    assert_eq!(h("x-ingress-name").as_deref(), Some("fallback"));
    assert_eq!(h("x-service-name").as_deref(), Some("web"));
    assert_eq!(h("x-service-port").as_deref(), Some("80"));
    assert_eq!(h("host").as_deref(), Some("fallback.example"));
    // A status not listed passes.
    let r = get(
        port,
        "/x",
        &[("host", "fallback.example"), ("x-want-status", "500")],
    )
    .await
    .expect("500");
    assert_eq!(r.status, 500);
}

/// oha, Tollgate's users' load tester, through every kind of change (Done when of issue 41):
/// a path added, annotations changed (an allow list, a limit), the Service's endpoints moved
/// to another backend, the TLS Secret renewed; each served within a second, and not one
/// request of two oha runs (plain HTTP and TLS) fails or is answered other than 200. Run from
/// bench/ on a release build: `make bench-kube` (oha from `make oha`, or $OHA).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a soak: run from bench/ on a release build"]
async fn oha_through_every_change_without_one_failed_request() {
    let bin = std::env::var("TOLLGATE_BIN").unwrap_or_else(|_| BIN.to_string());
    let oha = std::env::var("OHA").unwrap_or_else(|_| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/oha/bin/oha")
            .display()
            .to_string()
    });
    let seconds: u64 = std::env::var("SECONDS_OF_LOAD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let c = Cluster::start().await;
    let (a, b) = (
        Backend::start().await.expect("a"),
        Backend::start().await.expect("b"),
    );
    c.apply(&service("web", a.addr.port()));
    let ca = Ca::new("cluster ca").expect("ca");
    let (crt, key) = ca
        .issue(&LeafSpec::server(&["churn.example"]))
        .expect("leaf")
        .write(&c.dir, "churn")
        .expect("write");
    c.tls_secret("site", &crt, &key);
    let with = |path_extra: &str, annotations: &str| {
        ingress(
            "churn",
            "tollgate",
            "/app",
            &format!("    nginx.ingress.kubernetes.io/ssl-redirect: \"false\"\n{annotations}"),
        )
        .replace(
            "spec:\n",
            "spec:\n  tls:\n  - hosts: [churn.example]\n    secretName: site\n",
        )
        .replace("      paths:\n", &format!("      paths:\n{path_extra}"))
    };
    c.apply(&with("", ""));
    let (port, admin, tls) = (free_port(), free_port(), free_port());
    let _gw = c
        .gateway_with(
            Path::new(&bin),
            port,
            admin,
            &format!("tls_listen = [\"127.0.0.1:{tls}\"]\n"),
            &[],
        )
        .await;
    assert!(ready(admin).await);
    assert!(
        until(port, "churn.example", "/app", 200, Duration::from_secs(10))
            .await
            .is_some()
    );
    let load = |args: Vec<String>| {
        Command::new(&oha)
            .args([
                "-z",
                &format!("{seconds}s"),
                "-c",
                "8",
                "--no-tui",
                "--output-format",
                "json",
            ])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("oha (make oha, or OHA=path)")
    };
    let http = load(vec![
        "-H".into(),
        "Host: churn.example".into(),
        format!("http://127.0.0.1:{port}/app/"),
    ]);
    let https = load(vec![
        "--insecure".into(),
        "--connect-to".into(),
        format!("churn.example:{tls}:127.0.0.1:{tls}"),
        format!("https://churn.example:{tls}/app/"),
    ]);
    let r = get(port, "/v2/x", &[("host", "churn.example")])
        .await
        .expect("v2");
    assert_eq!(r.status, 404, "{}", r.body);
    let mut took = Vec::new();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // A path added.
    c.apply(&with(
        "      - path: /v2\n        pathType: Prefix\n        backend:\n          service:\n            name: web\n            port:\n              number: 80\n",
        "",
    ));
    let t = Instant::now();
    let v2 = until(port, "churn.example", "/v2/x", 200, Duration::from_secs(5)).await;
    took.push(("path added", v2.map(|_| t.elapsed())));
    // Annotations: an allow list every loopback client passes, and a limit none reaches.
    c.apply(&with(
        "",
        "    nginx.ingress.kubernetes.io/whitelist-source-range: \"127.0.0.0/8\"\n    nginx.ingress.kubernetes.io/limit-rps: \"100000\"\n",
    ));
    let t = Instant::now();
    let mut seen = None;
    while t.elapsed() < Duration::from_secs(5) {
        let m = metrics(admin).await;
        if m.contains("limit=\"shop.churn.rps\"") || m.contains("shop.churn.rps") {
            seen = Some(t.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    took.push(("annotations changed", seen));
    // The endpoints moved to another backend.
    let before = b.hits();
    c.apply(&service("web", b.addr.port()));
    let t = Instant::now();
    while b.hits() == before && t.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    took.push(("endpoints moved", (b.hits() > before).then(|| t.elapsed())));
    // The TLS Secret renewed.
    let (crt2, key2) = ca
        .issue(&LeafSpec {
            common_name: "renewed".into(),
            ..LeafSpec::server(&["churn.example"])
        })
        .expect("renewed")
        .write(&c.dir, "churn2")
        .expect("write");
    c.tls_secret("site", &crt2, &key2);
    let t = Instant::now();
    let mut renewed = None;
    while t.elapsed() < Duration::from_secs(5) {
        if handshake_subject(tls, Some("churn.example"), &[]).as_deref() == Some("renewed") {
            renewed = Some(t.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    took.push(("secret renewed", renewed));
    let mut failed = Vec::new();
    for (what, child) in [("http", http), ("https", https)] {
        let out = child.wait_with_output().expect("oha");
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("oha {what}: {e}: {}", String::from_utf8_lossy(&out.stderr))
        });
        let codes = &j["statusCodeDistribution"];
        let ok = codes["200"].as_u64().unwrap_or(0);
        let total: u64 = codes
            .as_object()
            .map(|m| m.values().filter_map(|v| v.as_u64()).sum())
            .unwrap_or(0);
        // Requests in flight when oha's -z ends are its own cut, not failures.
        let mut errors = j["errorDistribution"].clone();
        if let Some(e) = errors.as_object_mut() {
            e.remove("aborted due to deadline");
        }
        println!(
            "oha {what}: {ok} of {total} answered 200, errors {errors}, {:.0} requests/s",
            j["summary"]["requestsPerSec"].as_f64().unwrap_or(0.0)
        );
        if ok == 0 || ok != total || errors.as_object().is_some_and(|e| !e.is_empty()) {
            failed.push(format!("{what}: {codes} {errors}"));
        }
    }
    for (what, t) in &took {
        println!("{what}: served after {t:?}");
    }
    assert!(failed.is_empty(), "{failed:?}");
    for (what, t) in took {
        assert!(
            t.is_some_and(|t| t < Duration::from_secs(1)),
            "{what}: {t:?}"
        );
    }
    assert!(a.hits() > 0 && b.hits() > 0);
}
