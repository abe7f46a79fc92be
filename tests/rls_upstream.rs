//! envoyproxy/ratelimit's own service and Redis-counting cases (tests/fixtures/envoy-ratelimit/
//! upstream/service.json: its ratelimit_test.go, fixed_cache_impl_test.go, base_limiter_test.go,
//! integration_test.go and README examples, as calls on fresh counters with the answers its
//! code gives) replayed over gRPC against the real binary: each case's YAML imported with
//! `tollgate import-envoy-ratelimit`, served on one real redis-server, every field of every
//! answer compared.

use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tollgate_rls::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::{Entry, RateLimitOverride},
    RateLimitDescriptor,
};
use tollgate_rls::pb::envoy::service::ratelimit::v3::{
    rate_limit_response::Code, rate_limit_service_client::RateLimitServiceClient, RateLimitRequest,
    RateLimitResponse,
};
use tollgate_testkit::*;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

type Client = RateLimitServiceClient<tonic::transport::Channel>;

async fn client(port: u16) -> Client {
    for _ in 0..100 {
        if let Ok(ch) = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .expect("endpoint")
            .connect()
            .await
        {
            return RateLimitServiceClient::new(ch);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the rate limit service does not listen on {port}");
}

const UNITS: [(&str, i32, u64); 7] = [
    ("SECOND", 1, 1),
    ("MINUTE", 2, 60),
    ("HOUR", 3, 3600),
    ("DAY", 4, 86_400),
    ("MONTH", 5, 30 * 86_400),
    ("YEAR", 6, 365 * 86_400),
    ("WEEK", 7, 7 * 86_400),
];

fn unit_number(name: &str) -> i32 {
    UNITS.iter().find(|u| u.0 == name).map_or(0, |u| u.1)
}

fn span_of(number: i32) -> u64 {
    UNITS.iter().find(|u| u.1 == number).map_or(1, |u| u.2)
}

fn unit_name(number: i32) -> &'static str {
    UNITS
        .iter()
        .find(|u| u.1 == number)
        .map_or("UNKNOWN", |u| u.0)
}

fn request(r: &Value) -> RateLimitRequest {
    RateLimitRequest {
        domain: r["domain"].as_str().unwrap_or_default().into(),
        hits_addend: r["hits_addend"].as_u64().unwrap_or(0) as u32,
        descriptors: r["descriptors"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| RateLimitDescriptor {
                entries: d["entries"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| Entry {
                        key: e[0].as_str().unwrap_or_default().into(),
                        value: e[1].as_str().unwrap_or_default().into(),
                    })
                    .collect(),
                limit: (!d["limit"].is_null()).then(|| RateLimitOverride {
                    requests_per_unit: d["limit"]["requests_per_unit"].as_u64().unwrap_or(0) as u32,
                    unit: unit_number(d["limit"]["unit"].as_str().unwrap_or_default()),
                }),
                hits_addend: d["hits_addend"].as_u64(),
            })
            .collect(),
    }
}

fn unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A struct as JSON.
fn struct_json(s: &prost_types::Struct) -> Value {
    Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_json(v)))
            .collect(),
    )
}

fn value_json(v: &prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match &v.kind {
        Some(Kind::NullValue(_)) | None => Value::Null,
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => {
            Value::String(s.split_whitespace().collect::<Vec<_>>().join(" "))
        }
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::StructValue(s)) => struct_json(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(value_json).collect()),
    }
}

/// Numbers as f64 and strings whitespace-normalized, so both sides compare alike.
fn normalize(v: &Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => Value::String(s.split_whitespace().collect::<Vec<_>>().join(" ")),
        Value::Array(a) => Value::Array(a.iter().map(normalize).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, v)| (k.clone(), normalize(v))).collect())
        }
        other => other.clone(),
    }
}

fn compare(want: &Value, got: &Result<RateLimitResponse, tonic::Status>, at: u64) -> Vec<String> {
    let mut d = Vec::new();
    let r = match (want["error"].as_str(), got) {
        (Some(w), Err(s)) => {
            let msg = w.split_once(": ").map_or(w, |(_, m)| m);
            if !s.message().contains(msg) {
                d.push(format!("error {w:?}, got {s:?}"));
            }
            return d;
        }
        (Some(w), Ok(r)) => {
            d.push(format!("error {w:?}, got an answer {r:?}"));
            return d;
        }
        (None, Err(s)) => {
            d.push(format!("an answer, got {s:?}"));
            return d;
        }
        (None, Ok(r)) => r,
    };
    let code = |c: i32| {
        if c == Code::OverLimit as i32 {
            "OVER_LIMIT"
        } else if c == Code::Ok as i32 {
            "OK"
        } else {
            "UNKNOWN"
        }
    };
    if want["overall_code"].as_str() != Some(code(r.overall_code)) {
        d.push(format!(
            "overall_code {} vs {}",
            want["overall_code"],
            code(r.overall_code)
        ));
    }
    let statuses = want["statuses"].as_array().cloned().unwrap_or_default();
    if statuses.len() != r.statuses.len() {
        d.push(format!(
            "{} statuses vs {}",
            statuses.len(),
            r.statuses.len()
        ));
    }
    for (i, (w, s)) in statuses.iter().zip(&r.statuses).enumerate() {
        if w["code"].as_str() != Some(code(s.code)) {
            d.push(format!("status {i} code {} vs {}", w["code"], code(s.code)));
        }
        let got_limit = s.current_limit.as_ref().map(|l| {
            json!({"requests_per_unit": l.requests_per_unit, "unit": unit_name(l.unit), "name": l.name})
        });
        if normalize(&w["current_limit"]) != normalize(&got_limit.clone().unwrap_or(Value::Null)) {
            d.push(format!(
                "status {i} current_limit {} vs {:?}",
                w["current_limit"], got_limit
            ));
        }
        if w["limit_remaining"].as_u64() != Some(u64::from(s.limit_remaining)) {
            d.push(format!(
                "status {i} limit_remaining {} vs {}",
                w["limit_remaining"], s.limit_remaining
            ));
        }
        match (&w["duration_until_reset"], &s.duration_until_reset) {
            (Value::Null, None) => {}
            (Value::Null, Some(g)) => d.push(format!("status {i}: no duration, got {}", g.seconds)),
            (_, None) => d.push(format!("status {i}: a duration, got none")),
            (_, Some(g)) => {
                let span = s.current_limit.as_ref().map_or(1, |l| span_of(l.unit));
                let want = span - at % span;
                if (g.seconds - want as i64).abs() > 1 {
                    d.push(format!("status {i}: duration {} vs {want}", g.seconds));
                }
            }
        }
    }
    let want_h: Vec<(String, String)> = want["response_headers_to_add"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| {
            (
                h[0].as_str().unwrap_or_default().to_ascii_lowercase(),
                h[1].as_str().unwrap_or_default().into(),
            )
        })
        .collect();
    let got_h: Vec<(String, String)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.to_ascii_lowercase(), h.value.clone()))
        .collect();
    let same_h = want_h.len() == got_h.len()
        && want_h.iter().zip(&got_h).all(|((wk, wv), (gk, gv))| {
            wk == gk
                && (wv == gv
                    || (wv == "reset"
                        && gv.parse::<i64>().is_ok_and(|g| {
                            let span = r
                                .statuses
                                .iter()
                                .filter_map(|s| s.current_limit.as_ref())
                                .map(|l| span_of(l.unit))
                                .next()
                                .unwrap_or(1);
                            (g - (span - at % span) as i64).abs() <= 1
                        })))
        });
    if !same_h {
        d.push(format!("headers {want_h:?} vs {got_h:?}"));
    }
    let got_m = r
        .dynamic_metadata
        .as_ref()
        .map(struct_json)
        .unwrap_or(Value::Null);
    if normalize(&want["dynamic_metadata"]) != normalize(&got_m) {
        d.push(format!(
            "dynamic_metadata {} vs {got_m}",
            want["dynamic_metadata"]
        ));
    }
    d
}

/// Calls Tollgate answers otherwise on purpose: (case, call, why).
const DEVIATIONS: [(&str, usize, &str); 1] = [(
    "source/dynamic_metadata",
    1,
    "the service's metadata merge writes into its own config (a data race, kept until the next load); Tollgate merges into the answer only",
)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_own_cases_answer_field_for_field() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/envoy-ratelimit/upstream/service.json");
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json");
    let redis = RedisServer::start().expect("redis-server");
    let mut failures = Vec::new();
    let mut calls = 0;
    for case in &cases {
        let name = case["name"].as_str().unwrap_or_default();
        let s = &case["settings"];
        redis.cli(&["FLUSHALL"]);
        let dir = temp_dir("rls-upstream");
        let mut args: Vec<String> = vec!["import-envoy-ratelimit".into()];
        for (i, f) in case["file_list"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let p = dir.join(format!("{i:02}-{}", f[0].as_str().unwrap_or("f.yaml")));
            std::fs::write(&p, f[1].as_str().unwrap_or_default()).expect("write");
            args.push(p.display().to_string());
        }
        let (port, admin, rls) = (free_port(), free_port(), free_port());
        args.extend([
            "--redis-url".into(),
            redis.url(),
            "--listen".into(),
            format!("127.0.0.1:{rls}"),
        ]);
        if s["merge_domains"].as_bool() == Some(true) {
            args.push("--merge-domains".into());
        }
        if s["shadow_mode"].as_bool() == Some(true) {
            args.push("--shadow-mode".into());
        }
        if s["dynamic_metadata"].as_bool() == Some(true) {
            args.push("--dynamic-metadata".into());
        }
        if s["quota_mode"].as_bool() == Some(true) {
            args.push("--quota-mode".into());
        }
        if s["stop_cache_key_increment_when_overlimit"].as_bool() == Some(true) {
            args.push("--stop-increment-when-over-limit".into());
        }
        if s["response_headers"].as_bool() == Some(true) {
            args.extend(["--response-headers".into(), "envoy".into()]);
        }
        let out = std::process::Command::new(BIN)
            .args(&args)
            .output()
            .expect("import");
        let mut toml = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            // A config the service cannot load (its initial load error): every call fails.
            let expected_load_error = case["calls"]
                .as_array()
                .is_some_and(|c| c.iter().all(|c| !c["expect"]["error"].is_null()));
            if !expected_load_error {
                failures.push(format!(
                    "{name}: import failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            continue;
        }
        let mut extra = String::new();
        let names = &s["header_names"];
        if s["response_headers"].as_bool() == Some(true) {
            extra.push_str(&format!(
                "header_names = {{ limit = {}, remaining = {}, reset = {} }}\n",
                names["limit"], names["remaining"], names["reset"]
            ));
        }
        toml = toml.replacen("[rls]\n", &format!("[rls]\n{extra}"), 1);
        let config = serving_one_thread(port, admin, &toml.replacen("[redis]", "\n[redis]", 1));
        let _gw = running(std::path::Path::new(BIN), &config, port, admin).await;
        let mut c = client(rls).await;
        // Calls of a case stay in one second (a per-second limit's window).
        loop {
            let ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.subsec_millis());
            if ms < 300 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(u64::from(1000 - ms) + 5)).await;
        }
        for (i, call) in case["calls"].as_array().into_iter().flatten().enumerate() {
            calls += 1;
            let at = unix();
            let got = c
                .should_rate_limit(request(&call["request"]))
                .await
                .map(|r| r.into_inner());
            let d = compare(&call["expect"], &got, at);
            if !d.is_empty() && !DEVIATIONS.iter().any(|(n, c, _)| *n == name && *c == i) {
                failures.push(format!("{name} call {i}: {}", d.join("; ")));
            }
        }
    }
    eprintln!("{calls} calls of {} cases", cases.len());
    assert!(calls >= 450, "{calls} calls");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// One call of one descriptor (`key`, `value`) spending `hits` (None: the request's own).
fn call(domain: &str, entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        hits_addend: 0,
        descriptors: vec![RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
            limit: None,
            hits_addend: hits,
        }],
    }
}

/// What an attacker (or a broken Envoy) sends: values of any length, hundreds of descriptors,
/// counts past any limit, a flood past the gateway's own bound on Redis calls. The service
/// answers every one of them; none is refused where the service would count it, none wraps a
/// counter, and a full pipe to Redis makes calls wait rather than fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_calls_are_counted_as_the_service_counts_them() {
    let redis = RedisServer::start().expect("redis-server");
    let dir = temp_dir("rls-hostile");
    let yaml = dir.join("hostile.yaml");
    std::fs::write(
        &yaml,
        "domain: hostile\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n  - key: big\n    rate_limit: {unit: hour, requests_per_unit: 10}\n  - key: flood\n    rate_limit: {unit: hour, requests_per_unit: 100}\n",
    )
    .expect("write");
    let (port, admin, rls) = (free_port(), free_port(), free_port());
    let out = std::process::Command::new(BIN)
        .args(["import-envoy-ratelimit", &yaml.display().to_string()])
        .args(["--redis-url", &redis.url()])
        .args(["--listen", &format!("127.0.0.1:{rls}")])
        .output()
        .expect("import");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The smallest bound on Redis calls in flight: the flood below is 75 times it.
    let toml = String::from_utf8_lossy(&out.stdout).replacen(
        "[redis]\n",
        "\n[redis]\nmax_in_flight = 4\n",
        1,
    );
    let config = serving_one_thread(port, admin, &toml);
    let _gw = running(std::path::Path::new(BIN), &config, port, admin).await;
    let mut c = client(rls).await;
    // Counts are per hour: stay clear of the hour's end.
    if unix() % 3600 > 3590 {
        tokio::time::sleep(Duration::from_secs(3600 - unix() % 3600 + 1)).await;
    }
    let ok = Code::Ok as i32;
    let over = Code::OverLimit as i32;

    // A 64 KiB value is a value like any other (the service sets no length).
    let long = "v".repeat(64 * 1024);
    let r = c
        .should_rate_limit(call("hostile", &[("k", &long)], None))
        .await
        .expect("a long value is answered")
        .into_inner();
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (ok, 99));
    let r = c
        .should_rate_limit(call("hostile", &[("k", &long)], None))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(r.statuses[0].limit_remaining, 98, "counted in its own key");
    let m = metrics(admin).await;
    assert!(
        !m.contains(&long[..300]),
        "a long key is not a metric label"
    );

    // 500 descriptors: 500 answers, each counted.
    let mut many = call("hostile", &[("k", "many-0")], None);
    many.descriptors = (0..500)
        .map(|i| {
            call("hostile", &[("k", &format!("many-{i}"))], None)
                .descriptors
                .remove(0)
        })
        .collect();
    let r = c
        .should_rate_limit(many)
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(r.statuses.len(), 500);
    assert!(r
        .statuses
        .iter()
        .all(|s| s.code == ok && s.limit_remaining == 99));

    // Counts past any limit are over it, and stay over: no counter wraps back under.
    let r = c
        .should_rate_limit(call("hostile", &[("big", "a")], Some(u64::MAX)))
        .await
        .expect("a huge count is an answer, not an error")
        .into_inner();
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (over, 0));
    for _ in 0..2 {
        let r = c
            .should_rate_limit(call("hostile", &[("big", "a")], Some(u64::MAX)))
            .await
            .expect("answered")
            .into_inner();
        assert_eq!(r.overall_code, over, "still over after a second huge count");
    }
    let r = c
        .should_rate_limit(call("hostile", &[("big", "a")], None))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(r.overall_code, over);
    let mut whole = call("hostile", &[("big", "b")], None);
    whole.hits_addend = u32::MAX;
    let r = c
        .should_rate_limit(whole)
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(r.overall_code, over);
    // A check (hits 0) of a key past its limit says so and spends nothing.
    let r = c
        .should_rate_limit(call("hostile", &[("big", "a")], Some(0)))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(r.overall_code, over);

    // 300 calls at once against 4 slots to Redis: every one answered, exactly 100 admitted.
    let calls = (0..300).map(|_| {
        let mut c = c.clone();
        async move {
            c.should_rate_limit(call("hostile", &[("flood", "x")], None))
                .await
                .map(|r| r.into_inner().overall_code)
        }
    });
    let codes = futures_util::future::join_all(calls).await;
    let errors: Vec<_> = codes.iter().filter_map(|c| c.as_ref().err()).collect();
    assert!(
        errors.is_empty(),
        "{} failed: {:?}",
        errors.len(),
        errors.first()
    );
    let admitted = codes
        .iter()
        .filter(|c| matches!(c, Ok(c) if *c == ok))
        .count();
    assert_eq!(admitted, 100, "exactly the limit, however many wait");

    // Calls the service cannot answer at all are errors, as the service's are.
    let e = c
        .should_rate_limit(call("", &[("k", "v")], None))
        .await
        .expect_err("an empty domain");
    assert!(e.message().contains("domain must not be empty"), "{e:?}");
    let mut none = call("hostile", &[], None);
    none.descriptors.clear();
    let e = c.should_rate_limit(none).await.expect_err("no descriptors");
    assert!(
        e.message().contains("descriptor list must not be empty"),
        "{e:?}"
    );
}

/// A ConfigMap mounted as the kubelet mounts it: `config/a.yaml -> ..data/a.yaml`, `..data ->
/// ..2026_12_03_00_00_00.1`, the real files in that hidden folder. Read as the service reads
/// it with RUNTIME_IGNOREDOTFILES=true (its advice for Kubernetes): each file once; with
/// `--dot-files` (its default) the hidden folder is read too, and the domain is there twice.
#[test]
fn a_mounted_configmap_is_read_once_and_dot_files_read_as_the_services_default() {
    let root = temp_dir("rls-configmap");
    let config = root.join("config");
    let stamp = config.join("..2026_12_03_00_00_00.1");
    std::fs::create_dir_all(&stamp).expect("mkdir");
    std::fs::write(
        stamp.join("a.yaml"),
        "domain: mounted\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
    )
    .expect("write");
    std::os::unix::fs::symlink("..2026_12_03_00_00_00.1", config.join("..data")).expect("link");
    std::os::unix::fs::symlink("..data/a.yaml", config.join("a.yaml")).expect("link");
    let import = |extra: &[&str]| {
        std::process::Command::new(BIN)
            .arg("import-envoy-ratelimit")
            .arg(&root)
            .args(extra)
            .output()
            .expect("import")
    };
    let out = import(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let toml = String::from_utf8_lossy(&out.stdout);
    assert_eq!(toml.matches("domain = \"mounted\"").count(), 1, "{toml}");
    let out = import(&["--dot-files"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("duplicate domain 'mounted'"), "{err}");
}
