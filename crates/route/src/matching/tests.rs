//! The hostile spellings first: a second field, a case, an escape, a repeat, an absence.

use super::MatchRt;
use http::{HeaderMap, HeaderValue};
use tollgate_config::model::{Matches, ValueMatch, ValueMatcher};

fn exact(name: &str, v: &str) -> ValueMatch {
    ValueMatch {
        name: name.into(),
        value: ValueMatcher::Exact(v.into()),
    }
}

fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
            HeaderValue::from_bytes(v).expect("value"),
        );
    }
    h
}

#[test]
fn a_header_is_its_fields_joined_and_its_name_has_no_case() {
    let m = MatchRt::new(&Matches {
        headers: vec![exact("x-env", "canary")],
        query: vec![],
    })
    .expect("compiles");
    assert!(m.accepts(&headers(&[("X-Env", b"canary")]), None));
    // A second field is part of the value: "canary, prod" is not "canary".
    assert!(!m.accepts(&headers(&[("x-env", b"canary"), ("x-env", b"prod")]), None));
    assert!(!m.accepts(&headers(&[("x-env", b"Canary")]), None));
    assert!(!m.accepts(&headers(&[("x-env", b"")]), None));
    assert!(!m.accepts(&headers(&[]), None));
    assert!(!m.accepts(&headers(&[("x-env", b"canary\xff")]), None));
    let empty = MatchRt::new(&Matches {
        headers: vec![exact("x-env", "")],
        query: vec![],
    })
    .expect("compiles");
    // An empty value is matched by an empty field, never by an absent one.
    assert!(empty.accepts(&headers(&[("x-env", b"")]), None));
    assert!(!empty.accepts(&headers(&[]), None));
}

#[test]
fn a_regex_matches_the_whole_value() {
    let m = MatchRt::new(&Matches {
        headers: vec![ValueMatch {
            name: "x-version".into(),
            value: ValueMatcher::Regex("v[12]".into()),
        }],
        query: vec![],
    })
    .expect("compiles");
    assert!(m.accepts(&headers(&[("x-version", b"v2")]), None));
    assert!(!m.accepts(&headers(&[("x-version", b"v21")]), None));
    assert!(!m.accepts(&headers(&[("x-version", b"xv1")]), None));
}

#[test]
fn a_query_parameter_is_decoded_and_every_repeat_must_match() {
    let m = MatchRt::new(&Matches {
        headers: vec![],
        query: vec![exact("animal", "whale")],
    })
    .expect("compiles");
    let h = HeaderMap::new();
    assert!(m.accepts(&h, Some("animal=whale")));
    assert!(m.accepts(&h, Some("a=1&animal=%77hale")));
    assert!(m.accepts(&h, Some("animal=whale&animal=whale")));
    // The upstream may read either one: both must be what was checked.
    assert!(!m.accepts(&h, Some("animal=whale&animal=dolphin")));
    assert!(!m.accepts(&h, Some("animal=dolphin&animal=whale")));
    assert!(!m.accepts(&h, Some("Animal=whale")));
    assert!(!m.accepts(&h, Some("animalx=whale")));
    assert!(!m.accepts(&h, None));
    assert!(!m.accepts(&h, Some("")));
    let spaced = MatchRt::new(&Matches {
        headers: vec![],
        query: vec![exact("q", "a b")],
    })
    .expect("compiles");
    assert!(spaced.accepts(&h, Some("q=a+b")));
    assert!(spaced.accepts(&h, Some("q=a%20b")));
}

#[test]
fn a_split_gives_each_backend_its_weight_and_zero_gets_nothing() {
    use tollgate_config::model::{Backend, Split};
    let split = Split {
        backends: vec![
            Backend {
                upstream: Some(0),
                weight: 3,
            },
            Backend {
                upstream: Some(1),
                weight: 0,
            },
            Backend {
                upstream: None,
                weight: 1,
            },
            Backend {
                upstream: Some(2),
                weight: 6,
            },
        ],
        total: 10,
    };
    let got: Vec<Option<usize>> = (0..10).map(|r| super::split_choice(&split, r)).collect();
    let count = |want: Option<usize>| got.iter().filter(|g| **g == want).count();
    assert_eq!(count(Some(0)), 3);
    assert_eq!(count(Some(1)), 0);
    assert_eq!(count(None), 1);
    assert_eq!(count(Some(2)), 6);
}
