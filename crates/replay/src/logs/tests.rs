use super::*;
use std::io::Cursor;

const SEC: u64 = 1_000_000_000;
/// 2026-12-02T11:15:49Z.
const BASE: u64 = 1_796_210_149;

/// Reads `text`, returning the format, every item, and the lines skipped.
fn read(text: &str, format: Option<Format>) -> (Format, Vec<Result<Record, LineError>>, u64) {
    let mut reader = Reader::new(text.as_bytes(), format).expect("a reader");
    let items: Vec<_> = reader.by_ref().collect();
    (reader.format(), items, reader.skipped())
}

fn records(items: Vec<Result<Record, LineError>>) -> Vec<Record> {
    items
        .into_iter()
        .map(|r| r.expect("every line reads"))
        .collect()
}

fn rec(
    time: u64,
    method: &str,
    host: Option<&str>,
    target: &str,
    client: Option<Client>,
    headers: &[(&str, &str)],
) -> Record {
    Record {
        time,
        method: method.to_owned(),
        host: host.map(str::to_owned),
        target: target.to_owned(),
        client,
        headers: headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

fn ip(s: &str) -> Option<Client> {
    Some(Client::Ip(s.parse().expect("an address")))
}

/// The line numbers of the errors, and whether each message contains its word.
fn errors(items: &[Result<Record, LineError>], expected: &[(u64, &str)]) {
    let got: Vec<&LineError> = items.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(got.len(), expected.len(), "{got:#?}");
    for (e, (line, word)) in got.iter().zip(expected) {
        assert_eq!(e.line, *line, "{e}");
        assert!(
            e.why.contains(word),
            "line {line}: {:?} lacks {word:?}",
            e.why
        );
        assert_eq!(e.to_string(), format!("line {}: {}", e.line, e.why));
    }
}

const TOLLGATE: &str = r#"{"timestamp":"2026-12-02T11:15:40.000001Z","level":"INFO","event":"listening","addr":"0.0.0.0:8080","target":"tollgate::main"}
{"timestamp":"2026-12-02T11:15:49.123456Z","level":"INFO","event":"request","request_id":"a1","method":"GET","host":"api.example.com","path":"/v1/x?a=1","route":"api","status":200,"duration_ms":0.4,"decision":"allowed","limit":"","shadow_exceeded":0,"client":"00ff00ff00ff00ff","upstream_tries":1,"error":"","trace_id":"","target":"tollgate_proxy::service"}
{"timestamp":"2026-12-02T11:15:49.5Z","level":"INFO","event":"request","method":"POST","host":"","path":"/v1/caf\u00e9?q=\"x\"","status":429,"client":"0000000000000001","client_ip":"2001:db8::1","target":"tollgate_proxy::service"}
{"timestamp":"2026-12-02T11:15:50Z","level":"WARN","message":"upstream slow","method":7,"target":"pingora_core"}

{"timestamp":"2026-12-02T12:15:51.000000001+01:00","level":"INFO","event":"request","method":"GET","path":"http://other.example:8080/p?x=1","client":"ffffffffffffffff"}
{"timestamp":"2026-12-02T11:15:52Z","level":"INFO","event":"request","method":"OPTIONS","host":"api.example.com","path":"/"}
"#;

#[test]
fn tollgate_lines_read_exactly() {
    let (format, items, skipped) = read(TOLLGATE, None);
    assert_eq!(format, Format::Tollgate);
    assert_eq!(skipped, 3, "the other events and the blank line");
    assert_eq!(
        records(items),
        vec![
            // Logged at its end: it arrived duration_ms (0.4 ms) before.
            rec(
                BASE * SEC + 123_456_000 - 400_000,
                "GET",
                Some("api.example.com"),
                "/v1/x?a=1",
                Some(Client::Pseudonym(0x00ff_00ff_00ff_00ff)),
                &[]
            ),
            rec(
                BASE * SEC + SEC / 2,
                "POST",
                None,
                "/v1/café?q=\"x\"",
                ip("2001:db8::1"),
                &[]
            ),
            rec(
                (BASE + 2) * SEC + 1,
                "GET",
                Some("other.example:8080"),
                "/p?x=1",
                Some(Client::Pseudonym(u64::MAX)),
                &[]
            ),
            rec(
                (BASE + 3) * SEC,
                "OPTIONS",
                Some("api.example.com"),
                "/",
                None,
                &[]
            ),
        ]
    );
}

#[test]
fn crlf_line_ends_read_as_lf() {
    for text in [TOLLGATE, COMBINED, NGINX_JSON, CSV] {
        let crlf = text.replace('\n', "\r\n");
        let (format, items, skipped) = read(&crlf, None);
        let (format_lf, items_lf, skipped_lf) = read(text, None);
        assert_eq!((format, skipped), (format_lf, skipped_lf));
        assert_eq!(records(items), records(items_lf), "{format}");
    }
}

#[test]
fn tollgate_hostile_lines_are_errors_and_reading_goes_on() {
    let text = r#"{"timestamp":"2026-12-02T11:15:49Z","level":"INFO","event":"request","method":"GET","host":"h","path":"/a","client":"0000000000000001"}
{"timestamp":"2026-12-02T11:15:49.123456Z","level":"INFO","event":"requ
{"timestamp":"2026-12-02 25:00:00Z","level":"INFO","event":"request","method":"GET","path":"/"}
{"timestamp":"2026-12-02T11:15:49Z","level":"INFO","event":"request","method":"GET","host":"h"}
{"timestamp":"2026-12-02T11:15:49Z","level":"INFO","event":"request","method":"GET","path":"/","client":"zz"}
thread 'main' panicked at gateway/src/main.rs:1:1:
[1,2]
{"timestamp":"2026-12-02T11:15:49Z","level":"INFO","event":"request","method":"G T","path":"/"}
{"timestamp":"2026-12-02T11:15:49Z","level":"INFO","event":"request","method":"GET","path":"*"}
{"level":"INFO","event":"request","method":"GET","path":"/"}
{"timestamp":"2026-12-02T11:15:49Z","level":"INFO","event":"request","method":"GET","path":"/","client_ip":"1.2.3"}
{"timestamp":"2026-12-02T11:15:49Z","level":"INFO","event":"request","method":"GET","path":"/b"} trailing
{"timestamp":"2026-12-02T11:15:50Z","level":"INFO","event":"request","method":"GET","host":"h","path":"/z"}
"#;
    let (format, items, _) = read(text, None);
    assert_eq!(format, Format::Tollgate);
    errors(
        &items,
        &[
            (2, "bad JSON"),
            (3, "bad timestamp"),
            (4, "no path"),
            (5, "bad client pseudonym"),
            (6, "bad JSON"),
            (7, "bad JSON"),
            (8, "bad method"),
            (9, "neither a path"),
            (10, "no timestamp"),
            (11, "bad client address"),
            (12, "bad JSON"),
        ],
    );
    let good: Vec<Record> = items.into_iter().filter_map(Result::ok).collect();
    assert_eq!(good.len(), 2);
    assert_eq!(good[1].target, "/z");
    assert_eq!(good[1].time, (BASE + 1) * SEC);
}

const COMBINED: &str = r#"192.0.2.10 - - [02/Dec/2026:11:15:49 +0000] "GET /api/v1/items?page=2 HTTP/1.1" 200 512 "https://example.com/start" "Mozilla/5.0 (X11; Linux x86_64)"
2001:db8::7 - alice [02/Dec/2026:12:15:50 +0100] "POST /login HTTP/2.0" 302 0 "-" "curl/8.4.0"
10.244.0.1 - - [02/Dec/2026:11:15:51 +0000] "GET /healthz HTTP/1.1" 200 2 "-" "kube-probe/1.29" 112 0.001 [default-api-80] [] 10.244.1.5:8080 2 0.001 200 6b2a1c9c7d2f4e8a9b0c1d2e3f4a5b6c
198.51.100.23 - - [02/Dec/2026:11:15:52 +0000] "GET /search?q=\x22hi\x22 HTTP/1.1" 200 10 "-" "Agent \x22quoted\x22 \xC3\xA9 \"x\" \\"
198.51.100.23 - - [01/Dec/2026:23:15:53 -1200] "GET http://proxy.example/p?a=1 HTTP/1.1" 200 10 "-" "-"
198.51.100.24 - - [02/Dec/2026:11:15:54 +0000] "HEAD / HTTP/1.0" 200 0
"#;

#[test]
fn combined_lines_read_exactly() {
    let (format, items, skipped) = read(COMBINED, None);
    assert_eq!(format, Format::NginxCombined);
    assert_eq!(skipped, 0);
    assert_eq!(
        records(items),
        vec![
            rec(
                BASE * SEC,
                "GET",
                None,
                "/api/v1/items?page=2",
                ip("192.0.2.10"),
                &[
                    ("referer", "https://example.com/start"),
                    ("user-agent", "Mozilla/5.0 (X11; Linux x86_64)")
                ]
            ),
            rec(
                (BASE + 1) * SEC,
                "POST",
                None,
                "/login",
                ip("2001:db8::7"),
                &[("user-agent", "curl/8.4.0")]
            ),
            // ingress-nginx's upstreaminfo: combined, then more fields.
            rec(
                (BASE + 2) * SEC,
                "GET",
                None,
                "/healthz",
                ip("10.244.0.1"),
                &[("user-agent", "kube-probe/1.29")]
            ),
            // \x22 is nginx's escape of `"`; \xC3\xA9 is é in UTF-8.
            rec(
                (BASE + 3) * SEC,
                "GET",
                None,
                "/search?q=\"hi\"",
                ip("198.51.100.23"),
                &[("user-agent", "Agent \"quoted\" é \"x\" \\")]
            ),
            rec(
                (BASE + 4) * SEC,
                "GET",
                Some("proxy.example"),
                "/p?a=1",
                ip("198.51.100.23"),
                &[]
            ),
            // The common format: no referer, no user agent.
            rec(
                (BASE + 5) * SEC,
                "HEAD",
                None,
                "/",
                ip("198.51.100.24"),
                &[]
            ),
        ]
    );
}

#[test]
fn combined_hostile_lines_are_errors_and_reading_goes_on() {
    let text = r#"203.0.113.9 - - [02/Dec/2026:11:15:49 +0000] "GET /a HTTP/1.1" 200 1 "-" "-"
203.0.113.9 - - [02/Dec/2026:11:15:53 +0000] "-" 400 0 "-" "-"
203.0.113.9 - - [02/Dec/2026:11:15:53 +0000] "\x16\x03\x01\x02\x00\x01\x00\x01\xFC\x03\x03" 400 157 "-" "-"
203.0.113.9 - - [02/Dec/2026:11:15:53] "GET / HTTP/1.1" 200 1 "-" "-"
203.0.113.9 - - [02/Dec/2026:11:15:53 +0000] "GET /x HTTP/1.1
203.0.113.9 - - [02/Dec/20
not-an-ip - - [02/Dec/2026:11:15:53 +0000] "GET / HTTP/1.1" 200 1 "-" "-"
203.0.113.9 - - [02/Dec/2026:11:15:53 +0000] "GET / HTTP/1.1" 200 1 "-" "unterminated
203.0.113.9 - - [02/Dec/2026:11:15:53 +0000] "GET /x" 400 1 "-" "-"
203.0.113.9 - - [02/Dec/2026:11:15:53 +0000] "GET /x HTTP/1.1 extra" 400 1 "-" "-"
203.0.113.9 - - [02/Dec/2026:11:15:53 +0000] "CONNECT example.com:443 HTTP/1.1" 400 1 "-" "-"
I1202 11:15:49.123456       7 controller.go:190] "Configuration changes detected, backend reload required"
2026/12/02 11:15:49 [error] 31#31: *1 connect() failed (111: Connection refused)
203.0.113.9 - - [02/Dec/2026:11:15:50 +0000] "GET /z HTTP/1.1" 200 1 "-" "-"
"#;
    let (format, items, skipped) = read(text, None);
    assert_eq!(format, Format::NginxCombined);
    assert_eq!(skipped, 2, "the controller's lines");
    errors(
        &items,
        &[
            (2, "is not \"METHOD target HTTP/version\""),
            (3, "is not \"METHOD target HTTP/version\""),
            (4, "bad time"),
            (5, "unterminated"),
            (6, "no ] after the time"),
            (7, "bad client address"),
            (8, "unterminated"),
            (9, "is not"),
            (10, "is not"),
            (11, "neither a path"),
        ],
    );
    let good: Vec<Record> = items.into_iter().filter_map(Result::ok).collect();
    assert_eq!(good.len(), 2);
    assert_eq!(
        (good[1].target.as_str(), good[1].time),
        ("/z", (BASE + 1) * SEC)
    );
}

#[test]
fn kubectl_logs_of_an_ingress_controller_read_as_combined() {
    let text = r#"-------------------------------------------------------------------------------
NGINX Ingress controller
  Release:       v1.11.3
  Build:         0106de65cfccb74405a6dfa7d9daffc6f0a6ef1a
  Repository:    https://github.com/kubernetes/ingress-nginx
  nginx version: nginx/1.25.5

-------------------------------------------------------------------------------

W1202 11:15:40.000000       7 client_config.go:659] Neither --kubeconfig nor --master was specified.
I1202 11:15:40.000001       7 main.go:205] "Creating API client" host="https://10.96.0.1:443"
10.244.0.1 - - [02/Dec/2026:11:15:51 +0000] "GET /healthz HTTP/1.1" 200 2 "-" "kube-probe/1.29" 112 0.001 [default-api-80] [] 10.244.1.5:8080 2 0.001 200 6b2a1c9c
"#;
    let mut reader = Reader::new(text.as_bytes(), None).expect("a reader");
    assert_eq!(reader.format(), Format::NginxCombined);
    let got: Vec<Record> = records(reader.by_ref().collect());
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].target, "/healthz");
    assert_eq!(reader.skipped(), 11);
    assert_eq!(reader.lines(), 12);
}

const NGINX_JSON: &str = r#"{"time_iso8601":"2026-12-02T11:15:49+00:00","msec":"1796210149.123","remote_addr":"192.0.2.10","request_method":"GET","request_uri":"/api/v1/items?page=2","host":"api.example.com","status":"200","http_user_agent":"curl/8.4.0","http_x_api_key":"k-123","http_referer":"-","http_x_forwarded_for":""}
{"time": "2026-12-02T11:15:50+00:00", "remote_addr": "", "x_forwarded_for": "203.0.113.5, 10.0.0.1", "request_id": "6b2a1c9c7d2f4e8a", "remote_user": "", "bytes_sent": 512, "request_time": 0.003, "status": 200, "vhost": "shop.example.com", "request_proto": "HTTP/1.1", "path": "/cart", "request_query": "id=7", "request_length": 91, "duration": 0.003,"method": "POST", "http_referrer": "https://shop.example.com/", "http_user_agent": "Mozilla/5.0" }
{"msec":1796210151.25,"remote_addr":"2001:db8::2","request":"GET /old?x=1 HTTP/1.1","uri":"/new","args":"","http_host":"h.example"}
{"time_local":"02/Dec/2026:11:15:52 +0000","remote_addr":"unix:","request":"DELETE /items/9 HTTP/1.1","server_name":"_","http_X_Trace_Id":"t\"1"}
{"timestamp":"2026-12-02T11:15:53.5Z","remote_addr":"198.51.100.1","request_method":"GET","uri":"/s","args":"q=a%20b","http_host":"h.example:8443"}
"#;

#[test]
fn nginx_json_lines_read_exactly() {
    let (format, items, skipped) = read(NGINX_JSON, None);
    assert_eq!(format, Format::NginxJson);
    assert_eq!(skipped, 0);
    assert_eq!(
        records(items),
        vec![
            // msec is preferred: it has milliseconds.
            rec(
                BASE * SEC + 123_000_000,
                "GET",
                Some("api.example.com"),
                "/api/v1/items?page=2",
                ip("192.0.2.10"),
                &[("user-agent", "curl/8.4.0"), ("x-api-key", "k-123")]
            ),
            // ingress-nginx's JSON example: remote_addr is $proxy_protocol_addr, empty.
            rec(
                (BASE + 1) * SEC,
                "POST",
                Some("shop.example.com"),
                "/cart?id=7",
                ip("203.0.113.5"),
                &[
                    ("referer", "https://shop.example.com/"),
                    ("user-agent", "Mozilla/5.0")
                ]
            ),
            rec(
                (BASE + 2) * SEC + SEC / 4,
                "GET",
                Some("h.example"),
                "/new",
                ip("2001:db8::2"),
                &[]
            ),
            rec(
                (BASE + 3) * SEC,
                "DELETE",
                Some("_"),
                "/items/9",
                None,
                &[("x-trace-id", "t\"1")]
            ),
            rec(
                (BASE + 4) * SEC + SEC / 2,
                "GET",
                Some("h.example:8443"),
                "/s?q=a%20b",
                ip("198.51.100.1"),
                &[]
            ),
        ]
    );
}

#[test]
fn nginx_json_hostile_lines_are_errors_and_reading_goes_on() {
    let text = r#"{"time_iso8601":"2026-12-02T11:15:49+00:00","remote_addr":"1.2.3.4","request_method":"GET","request_uri":"/a"}
{"time_iso8601":"2026-12-02T11:15:49+00:00","remote_addr":"1.2.3.4","request_method":"GET","request_u
{"time_iso8601":"yesterday","request_method":"GET","request_uri":"/"}
{"remote_addr":"1.2.3.4","request_method":"GET","request_uri":"/"}
{"time_iso8601":"2026-12-02T11:15:49+00:00","remote_addr":"1.2.3.4","request":"\u0016\u0003\u0001\u0002"}
{"time_iso8601":"2026-12-02T11:15:49+00:00","remote_addr":"1.2.3.4","request_method":"GET"}
{"time_iso8601":"2026-12-02T11:15:49+00:00","remote_addr":"1.2.3.4","request":"-"}
{"msec":-5,"request_method":"GET","request_uri":"/"}
{"time_iso8601":"2026-12-02T11:15:49+00:00","remote_addr":"example.com","request_method":"GET","request_uri":"/"}
{"time_iso8601":"2026-12-02T11:15:50+00:00","request_method":"GET","request_uri":"/z","request":"\u0016\u0003"}
"#;
    let (format, items, _) = read(text, None);
    assert_eq!(format, Format::NginxJson);
    errors(
        &items,
        &[
            (2, "bad JSON"),
            (3, "bad time"),
            (4, "no time"),
            (5, "is not \"METHOD target HTTP/version\""),
            (6, "no request_uri, uri, path or request"),
            (7, "no request_method"),
            (8, "bad time"),
            (9, "bad client address"),
        ],
    );
    let good: Vec<Record> = items.into_iter().filter_map(Result::ok).collect();
    assert_eq!(good.len(), 2);
    assert_eq!(
        (good[1].target.as_str(), good[1].time),
        ("/z", (BASE + 1) * SEC)
    );
}

const CSV: &str = "time,method,host,path,client,x-api-key,user-agent
1796210149.25,GET,api.example.com,/v1/x?a=1,192.0.2.1,k-1,curl/8
1796210150,POST,,/v1/y,,,\"Mozilla/5.0 (X11, Linux)\"
1796210151,GET,h,\"/q?s=\"\"a,b\"\"\",2001:db8::1,\"\",

2026-12-02T11:15:52.5Z,get,h,http://other/p,10.0.0.1,k-2,
";

#[test]
fn csv_lines_read_exactly() {
    let (format, items, skipped) = read(CSV, None);
    assert_eq!(format, Format::Csv);
    assert_eq!(skipped, 2, "the header and the blank line");
    assert_eq!(
        records(items),
        vec![
            rec(
                BASE * SEC + SEC / 4,
                "GET",
                Some("api.example.com"),
                "/v1/x?a=1",
                ip("192.0.2.1"),
                &[("x-api-key", "k-1"), ("user-agent", "curl/8")]
            ),
            rec(
                (BASE + 1) * SEC,
                "POST",
                None,
                "/v1/y",
                None,
                &[("user-agent", "Mozilla/5.0 (X11, Linux)")]
            ),
            rec(
                (BASE + 2) * SEC,
                "GET",
                Some("h"),
                "/q?s=\"a,b\"",
                ip("2001:db8::1"),
                &[]
            ),
            rec(
                (BASE + 3) * SEC + SEC / 2,
                "get",
                Some("h"),
                "/p",
                ip("10.0.0.1"),
                &[("x-api-key", "k-2")]
            ),
        ]
    );
}

#[test]
fn csv_columns_in_any_order_and_a_header_that_lacks_one() {
    let text = "Client,PATH,time,Method,host,X-Api-Key\n\
                192.0.2.1,/a,1796210149,GET,h,k\n\
                Client,PATH,time,Method,host,X-Api-Key\n\
                ,/b,1796210150, PUT ,,\n";
    let (format, items, skipped) = read(text, Some(Format::Csv));
    assert_eq!(
        (format, skipped),
        (Format::Csv, 2),
        "header, and the header again"
    );
    assert_eq!(
        records(items),
        vec![
            rec(
                BASE * SEC,
                "GET",
                Some("h"),
                "/a",
                ip("192.0.2.1"),
                &[("x-api-key", "k")]
            ),
            rec((BASE + 1) * SEC, "PUT", None, "/b", None, &[]),
        ]
    );
    for format in [None, Some(Format::Csv)] {
        let e = Reader::new(
            &b"\ntime,method,path,client,x-api-key\n1,GET,/,,\n"[..],
            format,
        )
        .err()
        .expect("a header without host is an error");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let e = e
            .get_ref()
            .and_then(|e| e.downcast_ref::<LineError>())
            .expect("a LineError");
        assert_eq!(e.line, 2, "the first line is blank");
        assert!(e.why.contains("\"host\""), "{e}");
    }
    let e = Reader::new(&b"time,method\n"[..], None)
        .err()
        .expect("an error");
    assert!(
        e.to_string().contains("\"host\", \"path\", \"client\""),
        "{e}"
    );
}

#[test]
fn csv_hostile_lines_are_errors_and_reading_goes_on() {
    let text = "time,method,host,path,client
1796210149,GET,h,/x
1796210149,GET,h,\"/x,1.2.3.4
soon,GET,h,/x,1.2.3.4
1796210149,GET,h,/x,not-ip
1796210149,GET,h,x,1.2.3.4
1796210149,GET,h,/x,1.2.3.4,extra
1796210149,GET,h,\"/x\"y,1.2.3.4
1796210149,,h,/x,1.2.3.4
1796210149,GET,h,,1.2.3.4
,GET,h,/x,1.2.3.4
-1796210149,GET,h,/x,1.2.3.4
1796210150,GET,h,/z,1.2.3.4
";
    let (format, items, _) = read(text, None);
    assert_eq!(format, Format::Csv);
    errors(
        &items,
        &[
            (2, "4 fields, the header has 5"),
            (3, "unterminated quote"),
            (4, "bad time"),
            (5, "bad client address"),
            (6, "neither a path"),
            (7, "more fields than the header's 5"),
            (8, "text after a closing quote"),
            (9, "no method"),
            (10, "no path"),
            (11, "no time"),
            (12, "bad time"),
        ],
    );
    let good: Vec<Record> = items.into_iter().filter_map(Result::ok).collect();
    assert_eq!(good.len(), 1);
    assert_eq!(
        (good[0].target.as_str(), good[0].time),
        ("/z", (BASE + 1) * SEC)
    );
}

#[test]
fn open_reads_a_csv_path_as_csv_and_detects_others() {
    let dir = std::env::temp_dir().join(format!("tollgate-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let csv = dir.join("log.CSV");
    std::fs::write(&csv, CSV).expect("written");
    let json = dir.join("access.log");
    std::fs::write(&json, NGINX_JSON).expect("written");
    let reader = open(&csv).expect("opened");
    assert_eq!(reader.format(), Format::Csv);
    assert_eq!(reader.filter(Result::is_ok).count(), 4);
    let reader = open(&json).expect("opened");
    assert_eq!(reader.format(), Format::NginxJson);
    assert_eq!(reader.filter(Result::is_ok).count(), 5);
    assert!(open(&dir.join("missing.log")).is_err());
    std::fs::remove_dir_all(&dir).expect("removed");
}

#[test]
fn detection_from_the_first_line_that_tells() {
    // An empty log has no records.
    let (format, items, skipped) = read("", None);
    assert_eq!((format, items.len(), skipped), (Format::Tollgate, 0, 0));
    let (_, items, skipped) = read("\n\n  \n", None);
    assert_eq!((items.len(), skipped), (0, 3));
    // A Tollgate line that does not parse still shows its format.
    let (format, items, _) = read(
        "{\"timestamp\":\"x\",\"level\":\"INFO\",\"event\":\"re\n",
        None,
    );
    assert_eq!(format, Format::Tollgate);
    assert_eq!(items.len(), 1);
    // A line that tells nothing, then one that does: both are read in that format.
    let text = format!("garbage\n{}", COMBINED.lines().next().expect("a line"));
    let (format, items, _) = read(&text, None);
    assert_eq!(format, Format::NginxCombined);
    errors(&items, &[(1, "not a combined log line")]);
    assert_eq!(items.len(), 2);
    // Nothing tells.
    let e = Reader::new(&b"hello world\n{\"a\":1}\n"[..], None)
        .err()
        .expect("unknown format");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(
        e.to_string()
            .starts_with("line 1: cannot tell the log format"),
        "{e}"
    );
    // A byte-order mark is dropped.
    let (format, items, _) = read(&format!("\u{feff}{CSV}"), None);
    assert_eq!(format, Format::Csv);
    assert_eq!(records(items).len(), 4);
    // A format given is not second-guessed.
    let (format, items, _) = read(COMBINED, Some(Format::Tollgate));
    assert_eq!(format, Format::Tollgate);
    assert!(items.iter().all(Result::is_err));
}

#[test]
fn a_line_too_long_is_an_error_and_the_next_reads() {
    let good = COMBINED.lines().next().expect("a line");
    let long = format!(
        "{good}\n1.2.3.4 {}\n{good}\n",
        "x".repeat(MAX_LINE_BYTES + 10)
    );
    let (format, items, _) = read(&long, None);
    assert_eq!(format, Format::NginxCombined);
    errors(&items, &[(2, "longer than")]);
    assert_eq!(items.len(), 3);
    // Also when it is the line detection looks at.
    let long = format!("{}\n{good}\n", "x".repeat(MAX_LINE_BYTES + 1));
    let (_, items, _) = read(&long, None);
    errors(&items, &[(1, "longer than")]);
    assert_eq!(items.len(), 2);
}

#[test]
fn invalid_utf8_is_an_error_not_a_panic() {
    let mut text = b"time,method,host,path,client\n1796210149,GET,h,/\xff,\n".to_vec();
    text.extend_from_slice(b"1796210149,GET,h,/ok,\n");
    let mut reader = Reader::new(Cursor::new(text), None).expect("a reader");
    let first = reader.next().expect("a line");
    assert_eq!(first.err().map(|e| e.line), Some(2));
    assert!(reader.next().expect("a line").is_ok());
    let json = b"{\"timestamp\":\"2026-12-02T11:15:49Z\",\"level\":\"INFO\",\"event\":\"request\",\"method\":\"GET\",\"path\":\"/\xff\"}\n";
    let items: Vec<_> = Reader::new(&json[..], None).expect("a reader").collect();
    errors(&items, &[(1, "bad JSON")]);
    // Combined decodes bytes nginx escaped as they are, invalid UTF-8 replaced.
    let line =
        b"1.2.3.4 - - [02/Dec/2026:11:15:49 +0000] \"GET /\xff\\xfe HTTP/1.1\" 200 1 \"-\" \"-\"\n";
    let got: Vec<_> = Reader::new(&line[..], None).expect("a reader").collect();
    assert_eq!(records(got)[0].target, "/\u{fffd}\u{fffd}");
}

/// Fails after `ok` bytes.
struct Failing {
    data: Cursor<Vec<u8>>,
    ok: usize,
}

impl Read for Failing {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let pos = usize::try_from(self.data.position()).expect("small");
        if pos >= self.ok {
            return Err(io::Error::other("disk on fire"));
        }
        let n = buf.len().min(self.ok - pos);
        self.data.read(&mut buf[..n])
    }
}

#[test]
fn an_io_error_ends_the_iteration() {
    let text = COMBINED.as_bytes().to_vec();
    let first = COMBINED.find('\n').expect("a line") + 1;
    let input = io::BufReader::with_capacity(
        16,
        Failing {
            data: Cursor::new(text),
            ok: first + 10,
        },
    );
    let mut reader = Reader::new(input, None).expect("a reader");
    assert!(reader.next().expect("the first line").is_ok());
    let e = reader
        .next()
        .expect("an error")
        .expect_err("the read error");
    assert_eq!(e.line, 2);
    assert!(e.why.contains("disk on fire"), "{e}");
    assert!(reader.next().is_none());
    assert!(reader.io_error().is_some());
}

/// Parses a million generated lines per format and prints lines per second. Run in release:
/// `cargo test -p tollgate-replay --release -- --ignored --nocapture`.
#[test]
#[ignore = "a speed measure, for release builds"]
fn speed() {
    const N: u64 = 1_000_000;
    let paths = [
        "/api/v1/items",
        "/api/v1/items/42",
        "/login",
        "/search",
        "/static/app.js",
    ];
    let generate = |format: Format| -> Vec<u8> {
        let mut out = String::with_capacity(300 * N as usize);
        if format == Format::Csv {
            out.push_str("time,method,host,path,client,x-api-key,user-agent\n");
        }
        for i in 0..N {
            let secs = BASE + i / 1000;
            let (milli, path) = (i % 1000, paths[(i % 5) as usize]);
            let ip = format!("10.{}.{}.{}", i % 200, i / 200 % 250, i % 251);
            use std::fmt::Write as _;
            let _ = match format {
                Format::Tollgate => writeln!(
                    out,
                    r#"{{"timestamp":"2026-12-02T11:{:02}:{:02}.{milli:03}123Z","level":"INFO","event":"request","request_id":"{i:016x}","method":"GET","host":"api.example.com","path":"{path}?page={i}","route":"api","status":200,"duration_ms":0.4,"decision":"allowed","limit":"","shadow_exceeded":0,"client":"{:016x}","upstream_tries":1,"error":"","trace_id":"","target":"tollgate_proxy::service"}}"#,
                    secs / 60 % 60,
                    secs % 60,
                    i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
                ),
                Format::NginxCombined => writeln!(
                    out,
                    r#"{ip} - - [02/Dec/2026:11:{:02}:{:02} +0000] "GET {path}?page={i} HTTP/1.1" 200 {} "https://example.com/" "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36" 112 0.001 [default-api-80] [] 10.244.1.5:8080 512 0.001 200 {i:032x}"#,
                    secs / 60 % 60,
                    secs % 60,
                    i % 4096
                ),
                Format::NginxJson => writeln!(
                    out,
                    r#"{{"time_iso8601":"2026-12-02T11:{:02}:{:02}+00:00","msec":"{secs}.{milli:03}","remote_addr":"{ip}","request_method":"GET","request_uri":"{path}?page={i}","host":"api.example.com","status":"200","body_bytes_sent":"512","request_time":"0.001","http_user_agent":"Mozilla/5.0 (X11; Linux x86_64)","http_referer":"-","http_x_api_key":"k-{}"}}"#,
                    secs / 60 % 60,
                    secs % 60,
                    i % 100
                ),
                Format::Csv => writeln!(
                    out,
                    r#"{secs}.{milli:03},GET,api.example.com,{path}?page={i},{ip},k-{},"Mozilla/5.0 (X11, Linux x86_64)""#,
                    i % 100
                ),
            };
        }
        out.into_bytes()
    };
    for format in [
        Format::Tollgate,
        Format::NginxCombined,
        Format::NginxJson,
        Format::Csv,
    ] {
        let data = generate(format);
        let started = std::time::Instant::now();
        let mut reader = Reader::new(&data[..], None).expect("a reader");
        assert_eq!(reader.format(), format);
        let (mut ok, mut bytes) = (0u64, 0usize);
        for r in reader.by_ref() {
            let r = r.expect("generated lines read");
            ok += 1;
            bytes += r.target.len();
        }
        let elapsed = started.elapsed();
        assert_eq!(ok, N);
        assert!(bytes > 0);
        println!(
            "{format:>15}: {N} lines ({} MB) in {:.3} s: {:.0} lines/s",
            data.len() / 1_000_000,
            elapsed.as_secs_f64(),
            N as f64 / elapsed.as_secs_f64()
        );
    }
}
