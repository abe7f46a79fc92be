//! envoyproxy/ratelimit's own service and Redis-counting cases (tests/fixtures/envoy-ratelimit/
//! upstream/service.json: its ratelimit_test.go, fixed_cache_impl_test.go, base_limiter_test.go,
//! integration_test.go and README examples, as calls on fresh counters with the answers its
//! code gives) replayed over gRPC against the real binary: each case's YAML imported with
//! `tollgate import-envoy-ratelimit`, served on one real redis-server, every field of every
//! answer compared.

use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tollgate_proxy::rls::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::{Entry, RateLimitOverride},
    RateLimitDescriptor,
};
use tollgate_proxy::rls::pb::envoy::service::ratelimit::v3::{
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
