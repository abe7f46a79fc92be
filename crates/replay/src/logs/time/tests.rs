use super::*;

const S: u64 = NANOS;

#[test]
fn rfc3339_forms() {
    // 2026-12-02T11:15:49Z, checked against the time crate below.
    let base = 1_796_210_149;
    assert_eq!(rfc3339("2026-12-02T11:15:49Z"), Some(base * S));
    assert_eq!(
        rfc3339("2026-12-02T11:15:49.123456Z"),
        Some(base * S + 123_456_000)
    );
    assert_eq!(
        rfc3339("2026-12-02T11:15:49.123456789123z"),
        Some(base * S + 123_456_789)
    );
    assert_eq!(rfc3339("2026-12-02T12:15:49+01:00"), Some(base * S));
    assert_eq!(rfc3339("2026-12-02T12:15:49+0100"), Some(base * S));
    assert_eq!(rfc3339("2026-12-02T10:15:49-01"), Some(base * S));
    assert_eq!(rfc3339("2026-12-02 11:15:49,5"), Some(base * S + S / 2));
    for bad in [
        "2026-12-02T11:15:49.Z",
        "2026-13-02T11:15:49Z",
        "2026-02-29T11:15:49Z",
        "2026-12-02T24:15:49Z",
        "2026-12-02T11:15:49+1:00",
        "2026-12-02T11:15:49 UTC",
        "1969-12-31T23:59:59Z",
        "2026-12-02",
        "２026-12-02T11:15:49Z",
    ] {
        assert_eq!(rfc3339(bad), None, "{bad}");
    }
    assert_eq!(rfc3339("2024-02-29T00:00:00Z"), Some(1_709_164_800 * S));
    assert_eq!(rfc3339("1970-01-01T00:00:00Z"), Some(0));
}

#[test]
fn civil_days_agree_with_the_time_crate() {
    let epoch = time::Date::from_calendar_date(1970, time::Month::January, 1)
        .expect("valid date")
        .to_julian_day();
    let mut date =
        time::Date::from_calendar_date(1900, time::Month::January, 1).expect("valid date");
    while date.year() < 2600 {
        let ours = days_from_civil(
            i64::from(date.year()),
            u32::from(u8::from(date.month())),
            u32::from(date.day()),
        );
        assert_eq!(ours, i64::from(date.to_julian_day() - epoch), "{date}");
        date = date.next_day().expect("in range");
    }
}

#[test]
fn nginx_local_forms() {
    assert_eq!(
        nginx_local("10/Oct/2000:13:55:36 -0700"),
        Some(971_211_336 * S)
    );
    assert_eq!(
        nginx_local("02/Dec/2026:11:15:49 +0000"),
        Some(1_796_210_149 * S)
    );
    assert_eq!(
        nginx_local("02/dec/2026:12:15:49 +0100"),
        Some(1_796_210_149 * S)
    );
    for bad in [
        "10/Oct/2000:13:55:36",
        "10/Okt/2000:13:55:36 -0700",
        "32/Oct/2000:13:55:36 -0700",
        "10/Oct/2000:13:55:36 ~0700",
        "10/Oct/2000 13:55:36 -0700",
    ] {
        assert_eq!(nginx_local(bad), None, "{bad}");
    }
}

#[test]
fn unix_forms() {
    assert_eq!(unix_seconds("1764672000"), Some(1_764_672_000 * S));
    assert_eq!(
        unix_seconds("1764672000.25"),
        Some(1_764_672_000 * S + S / 4)
    );
    assert_eq!(
        unix_seconds("1764672000.1234567891"),
        Some(1_764_672_000 * S + 123_456_789)
    );
    assert_eq!(unix_seconds("1764672000."), Some(1_764_672_000 * S));
    for bad in ["", ".5", "-1", "1e9", "17646720x0", "99999999999999999999"] {
        assert_eq!(unix_seconds(bad), None, "{bad}");
    }
    assert_eq!(
        unix_seconds_f64(1_764_672_000.123),
        Some(1_764_672_000 * S + 123_000_000)
    );
    assert_eq!(unix_seconds_f64(-1.0), None);
    assert_eq!(unix_seconds_f64(f64::NAN), None);
    assert_eq!(any("1764672000.5"), Some(1_764_672_000 * S + S / 2));
    assert_eq!(any("2026-12-02T11:15:49Z"), Some(1_796_210_149 * S));
    assert_eq!(any("02/Dec/2026:11:15:49 +0000"), Some(1_796_210_149 * S));
}
