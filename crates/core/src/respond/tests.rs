#[test]
fn fields_follow_the_draft_remaining_never_over_the_quota() {
    use super::{quota_window, reset_secs};
    let limit = |toml: &str| {
        let c = tollgate_config::parse_str(
            &format!("[limits.l]\nkey = \"global\"\n{toml}\n"),
            "t.toml",
        )
        .expect("config");
        c.limits[0].clone()
    };
    let bucket = limit("rate = \"10/s\"\nburst = 20");
    assert_eq!(quota_window(&bucket), (20, 2));
    const S: u64 = 1_000_000_000;
    // 13 left, full again in 0.7 s: the next token within 0.1 s, shown as 1 s.
    assert_eq!(reset_secs(&bucket, 13, 7 * S / 10), 1);
    assert_eq!(reset_secs(&bucket, 20, 0), 0, "full: nothing more to come");
    let slow = limit("rate = \"1/m\"\nburst = 5");
    assert_eq!(quota_window(&slow), (5, 300));
    assert_eq!(
        reset_secs(&slow, 3, 120 * S),
        60,
        "the next token, not a full bucket"
    );
    let gcra = limit("algorithm = \"gcra\"\nrate = \"100/h\"");
    assert_eq!(quota_window(&gcra), (100, 3600));
    let window = limit("algorithm = \"fixed_window\"\nrate = \"100/m\"");
    assert_eq!(quota_window(&window), (100, 60));
    assert_eq!(reset_secs(&window, 40, 25 * S), 25, "the window's end");
    let sliding = limit("algorithm = \"sliding_window\"\nrate = \"5/s\"");
    assert_eq!(quota_window(&sliding), (5, 1));
    let leaky = limit("algorithm = \"leaky_bucket\"\nrate = \"2/s\"\nburst = 6");
    assert_eq!(quota_window(&leaky), (6, 3));
}

use super::*;

#[test]
fn problem_bodies_follow_the_contract() {
    let b = Problem::RateLimited.body(
        "say \"slow\"",
        "abc",
        &[
            ("limit", Extra::Str("per_ip")),
            ("retry_after", Extra::Int(3)),
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&b).expect("json");
    assert_eq!(v["status"], 429);
    assert_eq!(v["error_code"], "RATE_LIMIT_EXCEEDED");
    assert_eq!(v["request_id"], "abc");
    assert_eq!(v["title"], "Too Many Requests");
    assert!(v["type"]
        .as_str()
        .is_some_and(|t| t.starts_with("urn:tollgate:problem:")));
    assert_eq!(v["limit"], "per_ip");
    assert_eq!(v["retry_after"], 3);
    assert_eq!(v["detail"], "say \"slow\"");
    let keys: Vec<_> = v
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(
        keys,
        [
            "type",
            "title",
            "status",
            "detail",
            "error_code",
            "request_id",
            "limit",
            "retry_after"
        ]
    );
}

/// A template filled in is byte for byte the body written directly, for every refusal
/// shape, hostile names and ids included.
#[test]
fn templates_fill_to_the_same_bytes_as_bodies() {
    for name in ["per_ip", "say \"slow\"\\ \u{1}é", ""] {
        for (secs, id) in [
            (1u64, "abc"),
            (u64::MAX, "0123456789abcdef0123456789abcdef"),
            (0, "a\"b"),
        ] {
            let detail = format!("Rate limit \"{name}\" exceeded: retry in {secs} s.");
            let direct = Problem::RateLimited.body(
                &detail,
                id,
                &[
                    ("limit", Extra::Str(name)),
                    ("retry_after", Extra::Int(secs)),
                ],
            );
            let quoted = format!("Rate limit \"{name}\" exceeded: retry in ");
            let t = Problem::RateLimited.template(
                &[
                    Piece::Text(&quoted),
                    Piece::Hole(Hole::Secs),
                    Piece::Text(" s."),
                ],
                &[
                    ("limit", Piece::Text(name)),
                    ("retry_after", Piece::Hole(Hole::Secs)),
                ],
            );
            assert_eq!(t.fill(secs, id), direct, "{name} {secs} {id}");
            let direct = Problem::ChallengeRequired.body(
                name,
                id,
                &[
                    ("limit", Extra::Str(name)),
                    ("retry_after", Extra::Int(secs)),
                    ("challenge_url", Extra::Str("https://x/?a=\"b\"")),
                ],
            );
            let t = Problem::ChallengeRequired.template(
                &[Piece::Text(name)],
                &[
                    ("limit", Piece::Text(name)),
                    ("retry_after", Piece::Hole(Hole::Secs)),
                    ("challenge_url", Piece::Text("https://x/?a=\"b\"")),
                ],
            );
            assert_eq!(t.fill(secs, id), direct, "{name} {secs} {id}");
        }
    }
}

#[test]
fn structured_field_strings_are_escaped() {
    assert_eq!(sf_string("per_ip"), "\"per_ip\"");
    assert_eq!(sf_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
    assert_eq!(policy_item("\"x\"", 10, 1), "\"x\";q=10;w=1");
    assert_eq!(
        ratelimit_value("\"x\"", 7, 1)
            .as_ref()
            .and_then(|v| v.to_str().ok()),
        Some("\"x\";r=7;t=1")
    );
    assert_eq!(
        ratelimit_value("\"x\"", u64::MAX, 0)
            .as_ref()
            .and_then(|v| v.to_str().ok()),
        Some("\"x\";r=18446744073709551615;t=0")
    );
}
