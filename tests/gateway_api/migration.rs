//! From ingress-nginx to the Gateway API (issue 42, item 6): the corpus's Ingresses served as
//! Ingresses, then as what ingress2gateway writes from them with the RateLimitPolicies of
//! `tollgate import-ingress-limits` (run as users run it), and the same requests from the
//! same client admitted and refused alike, with the same statuses.

use super::kube::*;
use std::net::IpAddr;
use std::time::{Duration, Instant};
use tollgate_testkit::*;

const CLIENT: [u8; 4] = [127, 0, 0, 1];
/// The readiness probe's own client address: its requests never count against CLIENT's.
const PROBE: [u8; 4] = [127, 0, 0, 9];

fn fixture(rel: &str) -> String {
    format!("{}/../tests/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"))
}

async fn send(port: u16, from: [u8; 4], host: &str, path: &str) -> u16 {
    match request_from(IpAddr::from(from), port, "GET", path, &[("host", host)], "").await {
        Ok(r) => r.status,
        Err(_) => 0,
    }
}

/// Until the api's limit is in force for the probe's address (a refusal seen), and the web
/// host served: the translation with the limit is live.
async fn limited(port: u16) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        let web = send(port, PROBE, "www.shop.test", "/").await;
        let api = send(port, PROBE, "api.shop.test", "/v1").await;
        if web == 200 && api != 200 && api != 404 && api != 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The requests both ways meet, in order: both paths of the api (one count per client for
/// the Ingress, 2/m with a burst of 2: three go through), and the web host (not limited).
async fn the_requests(port: u16) -> Vec<(String, u16)> {
    let mut seen = Vec::new();
    for (host, path) in [
        ("api.shop.test", "/v1"),
        ("api.shop.test", "/v2"),
        ("api.shop.test", "/v1/items"),
        ("api.shop.test", "/v2"),
        ("api.shop.test", "/v1"),
        // Exact: not the api's path; 404 both ways.
        ("api.shop.test", "/v2/x"),
        ("www.shop.test", "/"),
        ("www.shop.test", "/cart"),
        ("www.shop.test", "/"),
    ] {
        seen.push((
            format!("{host}{path}"),
            send(port, CLIENT, host, path).await,
        ));
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingress_and_its_ingress2gateway_conversion_admit_and_refuse_alike() {
    let c = Cluster::start().await;
    super::policy_crd(&c);
    let (api, web) = (
        Backend::start().await.expect("backend"),
        Backend::start().await.expect("backend"),
    );
    c.apply(&service("api", api.addr.port()));
    c.apply(&service("web", web.addr.port()));
    let (port, admin) = (free_port(), free_port());
    let gw = c
        .gateway_with(BIN.as_ref(), port, admin, "", &["--ingress-class", "nginx"])
        .await;
    assert!(ready(admin).await, "ready");

    // As an Ingress.
    let ingresses = std::fs::read_to_string(fixture("ingress/migrating.yaml")).expect("fixture");
    c.apply(&ingresses);
    assert!(
        limited(port).await,
        "the Ingress limited\n{}",
        gw.log_text()
    );
    let as_ingress = the_requests(port).await;

    // As the Gateway API: the Ingresses gone, ingress2gateway's objects and the policies in.
    c.kubectl(&["delete", "ingress", "api", "web", "-n", "shop"]);
    let out = std::process::Command::new(BIN)
        .args(["import-ingress-limits", &fixture("ingress/migrating.yaml")])
        .output()
        .expect("import-ingress-limits runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let policies = String::from_utf8(out.stdout).expect("utf-8");
    assert!(policies.contains("name: api-api-shop-test"), "{policies}");
    let listen = free_port();
    let converted = std::fs::read_to_string(fixture("ingress2gateway/migrating.yaml"))
        .expect("fixture")
        .replace(
            "port: 80\n    protocol",
            &format!("port: {listen}\n    protocol"),
        );
    c.apply(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata:\n  name: nginx\nspec:\n  controllerName: tollgate.io/gateway-controller\n",
    );
    c.apply(&converted);
    c.apply(&policies);
    assert!(
        limited(listen).await,
        "the HTTPRoute limited\n{}",
        gw.log_text()
    );
    let as_routes = the_requests(listen).await;

    let admitted = as_ingress.iter().filter(|(_, s)| *s == 200).count();
    assert_eq!(
        admitted, 6,
        "three api requests and the web's: {as_ingress:?}"
    );
    assert!(
        as_ingress
            .iter()
            .all(|(_, s)| matches!(s, 200 | 404 | 429 | 503)),
        "{as_ingress:?}"
    );
    assert_eq!(
        as_ingress, as_routes,
        "the same requests, the same answers, whichever way in"
    );
    // The policy's status names the Gateway its routes hang from.
    let st = c.kubectl(&[
        "get",
        "ratelimitpolicy",
        "api-limits",
        "-n",
        "shop",
        "-o",
        "json",
    ]);
    let st: serde_json::Value = serde_json::from_str(&st).expect("json");
    let anc = &st["status"]["ancestors"][0];
    assert_eq!(anc["ancestorRef"]["name"], "nginx", "{st}");
    assert_eq!(anc["conditions"][0]["status"], "True", "{st}");
}
