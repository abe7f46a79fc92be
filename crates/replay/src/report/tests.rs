use super::*;

fn limit(name: &str, refusals: bool) -> LimitReport {
    let n = 120;
    LimitReport {
        limit: name.to_owned(),
        route: "api".to_owned(),
        description: "gcra 10/s burst 5, key ip, global".to_owned(),
        requests: 12_345,
        admitted: if refusals { 12_000 } else { 12_345 },
        refused: if refusals { 345 } else { 0 },
        keys: 17,
        top_refused: if refusals {
            vec![
                KeyCount {
                    key: "<script>alert(1)</script>".to_owned(),
                    refused: 300,
                },
                KeyCount {
                    key: "\"><a href=\"https://evil.example/\">x</a>".to_owned(),
                    refused: 40,
                },
                KeyCount {
                    key: "k".repeat(200),
                    refused: 5,
                },
            ]
        } else {
            Vec::new()
        },
        first_refusal: refusals.then(|| FirstRefusal {
            time: 1_796_210_149_123_456_789,
            key: "<script>alert(1)</script>".to_owned(),
        }),
        scaled: vec![
            Scaled {
                factor: 0.5,
                admitted: 6_172,
                refused: 0,
            },
            Scaled {
                factor: 2.0,
                admitted: 20_000,
                refused: 4_690,
            },
            Scaled {
                factor: 4.0,
                admitted: 24_000,
                refused: 25_380,
            },
        ],
        series: Series {
            start: 1_796_210_100,
            step: 10,
            admitted: (0..n).map(|i| 90 + i % 17).collect(),
            refused: (0..n).map(|i| if refusals { i % 7 } else { 0 }).collect(),
        },
    }
}

fn report() -> Report {
    Report {
        config: "tollgate.toml".to_owned(),
        logs: vec!["access.log".to_owned(), "more & <more>.log".to_owned()],
        lines: 1_234_567,
        errors: 12,
        unrouted: 3,
        start: 1_796_210_100,
        end: 1_796_211_300,
        limits: vec![
            limit("per-ip", true),
            limit("<script>alert('limit')</script>", true),
            limit("quiet", false),
        ],
    }
}

/// Tags opened and closed in `html`, in order (enough to check nesting of what we write).
fn check_nesting(html: &str) {
    let void = ["meta", "rect", "line", "br", "!DOCTYPE"];
    let mut stack: Vec<&str> = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let end = rest.find('>').expect("a tag ends");
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        let self_closing = tag.ends_with('/');
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop(), Some(name), "closing {name}");
            continue;
        }
        let name = tag.split([' ', '/']).next().expect("a name");
        if !self_closing && !void.contains(&name) {
            stack.push(name);
        }
        if name == "style" {
            let close = rest.find("</style>").expect("style ends");
            rest = &rest[close..];
        }
    }
    assert!(stack.is_empty(), "left open: {stack:?}");
}

#[test]
fn html_has_two_charts_per_limit_with_refusals_and_escapes_everything() {
    let r = report();
    let page = html(&r);
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains("<title>Tollgate simulation: tollgate.toml</title>"));
    assert!(page.contains("<code>more &amp; &lt;more&gt;.log</code>"));
    // Two charts for each limit that refused, one for the quiet limit.
    for (name, charts) in [
        ("per-ip", 2),
        ("&lt;script&gt;alert(&#39;limit&#39;)&lt;/script&gt;", 2),
        ("quiet", 1),
    ] {
        let tag = format!("<svg class=\"chart\" data-limit=\"{name}\"");
        assert_eq!(page.matches(&tag).count(), charts, "{name}");
    }
    assert_eq!(page.matches("<svg class=\"chart\"").count(), 5);
    assert_eq!(page.matches("<svg").count(), page.matches("</svg>").count());
    assert!(page.contains("No refusals."));
    // Hostile keys and names come out as text.
    assert!(!page.contains("<script"), "no script element");
    assert!(!page.contains("<a "), "no link element");
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    // No external references of any kind.
    for bad in [
        "src=\"", "href=\"", "src='", "href='", "url(", "@import", "http://",
    ] {
        assert!(!page.contains(bad), "{bad}");
    }
    // Text from the report may hold "https://", escaped, never as an attribute.
    for (i, _) in page.match_indices("https://") {
        assert!(page[i..].starts_with("https://evil.example/&quot;"));
    }
    check_nesting(&page);
    // The summary and the tables.
    assert!(page.contains("<td>1,234,567</td>"));
    assert!(page.contains("2026-12-02 11:15:00"), "the start, in UTC");
    assert!(page.contains("20 min"), "the span");
    assert!(page.contains("First refusal: 2026-12-02 11:15:49.123, key <code>&lt;script&gt;"));
    assert!(page.contains("<td>&#xD7;0.5</td>"));
    assert!(page.contains(
        "<td>&#xD7;4</td><td>24,000</td><td>+12,000</td><td>25,380</td><td>+25,035</td>"
    ));
    assert!(page.contains("<td>6,172</td><td>&#x2212;5,828</td><td>0</td><td>&#x2212;345</td>"));
    assert!(page.contains(">admitted</text>") && page.contains(">refused</text>"));
    assert!(page.contains("time (UTC), 10 s per bar"));
    assert!(
        page.contains("kkkkkkkkkk…"),
        "long keys are cut in the label"
    );
}

#[test]
fn html_of_an_empty_report_is_a_page() {
    let page = html(&Report::default());
    check_nesting(&page);
    assert!(page.contains("No limit was asked about a request."));
    assert!(!page.contains("<svg"));
    let mut empty = limit("empty", false);
    empty.series = Series::default();
    empty.requests = 0;
    empty.scaled.clear();
    let page = html(&Report {
        limits: vec![empty],
        ..Report::default()
    });
    check_nesting(&page);
    assert!(page.contains("no requests"));
    assert_eq!(
        page.matches("<svg class=\"chart\" data-limit=\"empty\"")
            .count(),
        1
    );
}

#[test]
fn many_buckets_are_added_into_at_most_max_bars() {
    let mut l = limit("busy", true);
    let n = 100_000;
    l.series = Series {
        start: 1_796_210_100,
        step: 1,
        admitted: vec![1; n],
        refused: vec![1; n],
    };
    let page = html(&Report {
        limits: vec![l],
        ..Report::default()
    });
    check_nesting(&page);
    let bars = page.matches(&format!("fill=\"{REFUSED}\"/></g>")).count();
    assert!(bars <= MAX_BARS && bars > MAX_BARS / 2, "{bars}");
    assert!(page.len() < 400_000, "{}", page.len());
    // 209 buckets per bar: each bar holds 209 + 209.
    assert!(page.contains(": 209 admitted, 209 refused</title>"));
}

#[test]
fn json_field_names_are_the_documented_ones() {
    let value = serde_json::to_value(report()).expect("serializes");
    for key in [
        "config", "logs", "lines", "errors", "unrouted", "start", "end", "limits",
    ] {
        assert!(value.get(key).is_some(), "{key}");
    }
    let l = &value["limits"][0];
    for key in [
        "limit",
        "route",
        "description",
        "requests",
        "admitted",
        "refused",
        "keys",
        "top_refused",
        "first_refusal",
        "scaled",
        "series",
    ] {
        assert!(l.get(key).is_some(), "{key}");
    }
    assert_eq!(l["first_refusal"]["time"], 1_796_210_149_123_456_789_u64);
    assert_eq!(l["scaled"][0]["factor"], 0.5);
    assert_eq!(l["series"]["step"], 10);
    assert_eq!(l["top_refused"][0]["refused"], 300);
    assert!(value["limits"][2]["first_refusal"].is_null());
}

#[test]
fn small_formats() {
    assert_eq!(Count(0).to_string(), "0");
    assert_eq!(Count(999).to_string(), "999");
    assert_eq!(Count(1000).to_string(), "1,000");
    assert_eq!(Count(u64::MAX).to_string(), "18,446,744,073,709,551,615");
    assert_eq!(Span(0).to_string(), "0 s");
    assert_eq!(Span(200).to_string(), "3 min 20 s");
    assert_eq!(Span(7200).to_string(), "2 h");
    assert_eq!(Span(90_061).to_string(), "1 d 1 h");
    assert_eq!(Factor(0.5).to_string(), "0.5");
    assert_eq!(Factor(2.0).to_string(), "2");
    assert_eq!(Percent(1, 3).to_string(), "33.3%");
    assert_eq!(nice_step(0, 4), 1);
    assert_eq!(nice_step(97, 4), 50);
    assert_eq!(nice_step(1234, 4), 500);
    assert_eq!(
        Utc(0, Some(5_000_000)).to_string(),
        "1970-01-01 00:00:00.005"
    );
    assert_eq!(
        Esc("a<b>&\"'\u{0}\n").to_string(),
        "a&lt;b&gt;&amp;&quot;&#39;\u{fffd}\n"
    );
}

#[test]
fn extreme_numbers_do_not_panic() {
    let mut l = limit("max", true);
    l.admitted = u64::MAX;
    l.refused = u64::MAX;
    l.scaled[0].admitted = u64::MAX;
    l.scaled[0].refused = u64::MAX;
    l.first_refusal = Some(FirstRefusal {
        time: u64::MAX,
        key: String::new(),
    });
    l.series = Series {
        start: u64::MAX - 5,
        step: u64::MAX,
        admitted: vec![u64::MAX; 1000],
        refused: vec![u64::MAX; 1000],
    };
    let page = html(&Report {
        start: u64::MAX,
        limits: vec![l],
        ..Report::default()
    });
    check_nesting(&page);
    assert_eq!(nice_step(u64::MAX, 4), 5_000_000_000_000_000_000);
    assert_eq!(nice_step(u64::MAX / 2, 1), 10_000_000_000_000_000_000);
    assert_eq!(nice_step(u64::MAX, 1), u64::MAX);
}
