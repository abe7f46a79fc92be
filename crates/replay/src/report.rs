//! The simulation's report: the data (also `--json`'s output, field names as written) and
//! [`html`], one self-contained page of it.

use serde::Serialize;
use std::fmt::{self, Write};

/// What a simulation found, over all its logs.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Report {
    /// The configuration file simulated.
    pub config: String,
    /// The logs replayed, in order.
    pub logs: Vec<String>,
    /// Lines read.
    pub lines: u64,
    /// Lines that could not be read as requests.
    pub errors: u64,
    /// Requests no route took.
    pub unrouted: u64,
    /// Unix seconds of the first request.
    pub start: u64,
    /// Unix seconds of the last request.
    pub end: u64,
    pub limits: Vec<LimitReport>,
}

/// What one limit did.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct LimitReport {
    pub limit: String,
    pub route: String,
    /// The limit in words, e.g. "gcra 10/s burst 5, key ip, global".
    pub description: String,
    /// Requests the limit was asked about.
    pub requests: u64,
    pub admitted: u64,
    pub refused: u64,
    /// Distinct keys seen.
    pub keys: u64,
    /// The keys refused most, most first.
    pub top_refused: Vec<KeyCount>,
    pub first_refusal: Option<FirstRefusal>,
    /// The same logs replayed with traffic scaled (x0.5, x2, x4).
    pub scaled: Vec<Scaled>,
    pub series: Series,
}

/// A key and how often it was refused.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct KeyCount {
    pub key: String,
    pub refused: u64,
}

/// When a limit first refused, and whom.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct FirstRefusal {
    /// Unix nanoseconds.
    pub time: u64,
    pub key: String,
}

/// The answer with traffic multiplied by `factor`.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Scaled {
    pub factor: f64,
    pub admitted: u64,
    pub refused: u64,
}

/// Admitted and refused requests per time bucket.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Series {
    /// Unix seconds at the start of the first bucket.
    pub start: u64,
    /// Seconds per bucket.
    pub step: u64,
    pub admitted: Vec<u64>,
    pub refused: Vec<u64>,
}

const ADMITTED: &str = "#3b75af";
const REFUSED: &str = "#e1812c";
/// At most this many bars in a time chart: more buckets are added together.
const MAX_BARS: usize = 480;
/// At most this many keys in a key chart.
const MAX_KEYS: usize = 25;

const STYLE: &str = "\
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#222;\
background:#fff;max-width:980px;margin:2em auto;padding:0 1em}\
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.3em;border-bottom:1px solid #ddd;\
padding-bottom:.2em;margin-top:2em}h3{font-size:1.15em;margin:0 0 .3em}\
h4{font-size:1em;margin:1.4em 0 .3em}\
table{border-collapse:collapse;margin:.5em 0}th,td{padding:.25em .9em;\
border-bottom:1px solid #e6e6e6;text-align:right;font-variant-numeric:tabular-nums}\
th:first-child,td:first-child{text-align:left}thead th{border-bottom:2px solid #ccc}\
code{background:#f3f3f3;padding:0 .25em;border-radius:3px;overflow-wrap:anywhere}\
.limit{margin-top:2.5em;padding-top:1em;border-top:3px solid #eee}\
.muted{color:#777}.chart{display:block;max-width:100%;height:auto;margin:.5em 0}\
.chart text{font:11px system-ui,sans-serif;fill:#333}";

/// Writes to a `String`, which cannot fail.
macro_rules! w {
    ($out:expr, $($arg:tt)*) => {{
        let _ = write!($out, $($arg)*);
    }};
}

/// One self-contained HTML page of `report`: inline CSS and SVG, no scripts, no external
/// references. Every string from the report is escaped.
pub fn html(report: &Report) -> String {
    let mut out = String::with_capacity(32 * 1024);
    w!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>Tollgate simulation: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        Esc(&report.config)
    );
    w!(
        out,
        "<h1>Tollgate simulation</h1>\n<p>Configuration <code>{}</code>, ",
        Esc(&report.config)
    );
    match report.logs.as_slice() {
        [] => out.push_str("no logs.</p>\n"),
        logs => {
            out.push_str(if logs.len() == 1 { "log " } else { "logs " });
            for (i, log) in logs.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                w!(out, "<code>{}</code>", Esc(log));
            }
            out.push_str(".</p>\n");
        }
    }
    summary(&mut out, report);
    out.push_str("<h2>Limits</h2>\n");
    if report.limits.is_empty() {
        out.push_str("<p>No limit was asked about a request.</p>\n");
    }
    for (i, limit) in report.limits.iter().enumerate() {
        section(&mut out, i, limit);
    }
    out.push_str(
        "<p class=\"muted\">Written by <code>tollgate simulate</code>. Times are UTC.</p>\n\
         </body>\n</html>\n",
    );
    out
}

fn summary(out: &mut String, r: &Report) {
    w!(
        out,
        "<h2>Summary</h2>\n<table>\n<tbody>\n\
         <tr><th>Lines read</th><td>{}</td></tr>\n\
         <tr><th>Lines not read (errors)</th><td>{}</td></tr>\n\
         <tr><th>Requests no route took</th><td>{}</td></tr>\n\
         <tr><th>First request</th><td>{}</td></tr>\n\
         <tr><th>Last request</th><td>{}</td></tr>\n\
         <tr><th>Time span</th><td>{}</td></tr>\n\
         </tbody>\n</table>\n",
        Count(r.lines),
        Count(r.errors),
        Count(r.unrouted),
        Utc(r.start, None),
        Utc(r.end, None),
        Span(r.end.saturating_sub(r.start)),
    );
}

fn section(out: &mut String, i: usize, l: &LimitReport) {
    w!(
        out,
        "<section class=\"limit\" id=\"limit-{i}\">\n<h3>Limit <code>{}</code></h3>\n\
         <p>Route <code>{}</code>: {}</p>\n",
        Esc(&l.limit),
        Esc(&l.route),
        Esc(&l.description)
    );
    w!(
        out,
        "<table>\n<tbody>\n<tr><th>Requests</th><td>{}</td><td></td></tr>\n\
         <tr><th>Admitted</th><td>{}</td><td>{}</td></tr>\n\
         <tr><th>Refused</th><td>{}</td><td>{}</td></tr>\n\
         <tr><th>Distinct keys</th><td>{}</td><td></td></tr>\n</tbody>\n</table>\n",
        Count(l.requests),
        Count(l.admitted),
        Percent(l.admitted, l.requests),
        Count(l.refused),
        Percent(l.refused, l.requests),
        Count(l.keys),
    );
    match &l.first_refusal {
        Some(f) => w!(
            out,
            "<p>First refusal: {}, key <code>{}</code>.</p>\n",
            Utc(f.time / 1_000_000_000, Some(f.time % 1_000_000_000)),
            Esc(&f.key)
        ),
        None => out.push_str("<p>No request was refused.</p>\n"),
    }
    if !l.scaled.is_empty() {
        scaled(out, l);
    }
    out.push_str("<h4>Admitted and refused over time</h4>\n");
    series_chart(out, &l.limit, &l.series);
    out.push_str("<h4>Keys refused most</h4>\n");
    if l.top_refused.iter().any(|k| k.refused > 0) {
        keys_chart(out, &l.limit, &l.top_refused);
    } else {
        out.push_str("<p>No refusals.</p>\n");
    }
    out.push_str("</section>\n");
}

fn scaled(out: &mut String, l: &LimitReport) {
    w!(
        out,
        "<h4>With more or less traffic</h4>\n<table>\n<thead><tr><th>Traffic</th>\
         <th>Admitted</th><th>change vs &#xD7;1</th><th>Refused</th><th>change vs &#xD7;1</th>\
         <th>Refused share</th></tr></thead>\n<tbody>\n\
         <tr><td>&#xD7;1 (as logged)</td><td>{}</td><td></td><td>{}</td><td></td><td>{}</td></tr>\n",
        Count(l.admitted),
        Count(l.refused),
        Percent(l.refused, l.admitted.saturating_add(l.refused)),
    );
    for s in &l.scaled {
        w!(
            out,
            "<tr><td>&#xD7;{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            Factor(s.factor),
            Count(s.admitted),
            Delta(s.admitted, l.admitted),
            Count(s.refused),
            Delta(s.refused, l.refused),
            Percent(s.refused, s.admitted.saturating_add(s.refused)),
        );
    }
    out.push_str("</tbody>\n</table>\n");
}

/// Stacked bars of admitted (below) and refused (above) requests per bucket, buckets added
/// together when there are more than [`MAX_BARS`].
/// The chart's size and margins (SVG user units).
const W: f64 = 760.0;
const H: f64 = 270.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 48.0;

/// The series in at most `MAX_BARS` bars of (admitted, refused), and the steps per bar.
fn binned(s: &Series) -> (Vec<(u64, u64)>, usize) {
    let n = s.admitted.len().max(s.refused.len());
    let per_bar = n.div_ceil(MAX_BARS).max(1);
    let bars = (0..n.div_ceil(per_bar))
        .map(|b| {
            let r = b * per_bar..((b + 1) * per_bar).min(n);
            let sum = |v: &[u64]| {
                v.get(r.start..r.end.min(v.len()))
                    .unwrap_or(&[])
                    .iter()
                    .fold(0u64, |t, x| t.saturating_add(*x))
            };
            (sum(&s.admitted), sum(&s.refused))
        })
        .collect();
    (bars, per_bar)
}

/// The legend: admitted and refused.
fn legend(out: &mut String) {
    w!(
        out,
        "<rect x=\"{LEFT}\" y=\"8\" width=\"12\" height=\"12\" fill=\"{ADMITTED}\"/>\
         <text x=\"{}\" y=\"18\">admitted</text>\
         <rect x=\"{}\" y=\"8\" width=\"12\" height=\"12\" fill=\"{REFUSED}\"/>\
         <text x=\"{}\" y=\"18\">refused</text>\n",
        LEFT + 16.0,
        LEFT + 90.0,
        LEFT + 106.0
    );
}

/// The horizontal grid lines and their counts, every `tick` up to `top`.
fn y_grid(out: &mut String, top: u64, tick: u64, pw: f64, y_of: &dyn Fn(u64) -> f64) {
    let mut v = 0;
    while v <= top {
        let y = y_of(v);
        w!(
            out,
            "<line stroke=\"#e8e8e8\" x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            LEFT + pw,
            LEFT - 6.0,
            y + 4.0,
            Count(v)
        );
        match v.checked_add(tick) {
            Some(next) => v = next,
            None => break,
        }
    }
}

/// The axes, the time labels (start, middle, end) and the titles.
fn axes(out: &mut String, start: u64, end: u64, step: u64, pw: f64, ph: f64) {
    let base = TOP + ph;
    w!(
        out,
        "<line stroke=\"#888\" x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{base}\"/>\
         <line stroke=\"#888\" x1=\"{LEFT}\" y1=\"{base}\" x2=\"{:.1}\" y2=\"{base}\"/>\n",
        LEFT + pw
    );
    let mid = start + (end - start) / 2;
    for (x, t, anchor) in [
        (LEFT, start, "start"),
        (LEFT + pw / 2.0, mid, "middle"),
        (LEFT + pw, end, "end"),
    ] {
        w!(
            out,
            "<line stroke=\"#888\" x1=\"{x:.1}\" y1=\"{base}\" x2=\"{x:.1}\" y2=\"{:.1}\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{}</text>\n",
            base + 4.0,
            base + 16.0,
            Utc(t, None)
        );
    }
    w!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">time (UTC), {} per bar</text>\n\
         <text transform=\"translate(14 {:.1}) rotate(-90)\" text-anchor=\"middle\">requests</text>\n\
         </svg>\n",
        LEFT + pw / 2.0,
        H - 8.0,
        Span(step),
        TOP + ph / 2.0
    );
}

fn series_chart(out: &mut String, limit: &str, s: &Series) {
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let (bars, per_bar) = binned(s);
    // Saturating: a report is the simulator's, but a page is written whatever it holds.
    let step = s.step.max(1).saturating_mul(per_bar as u64);
    let time_of = |bar: usize| s.start.saturating_add(step.saturating_mul(bar as u64));
    let end = time_of(bars.len());
    let max = bars
        .iter()
        .map(|(a, r)| a.saturating_add(*r))
        .max()
        .unwrap_or(0);
    let tick = nice_step(max, 4);
    let top = max.div_ceil(tick).max(1).saturating_mul(tick);
    w!(
        out,
        "<svg class=\"chart\" data-limit=\"{}\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" \
         height=\"{H}\" font-family=\"sans-serif\" font-size=\"11\" role=\"img\" aria-label=\"Admitted and refused requests over time, \
         limit {}\">\n",
        Esc(limit),
        Esc(limit)
    );
    legend(out);
    // Y grid and counts.
    let y_of = |v: u64| TOP + ph - ph * v as f64 / top as f64;
    y_grid(out, top, tick, pw, &y_of);
    // Bars.
    if bars.is_empty() {
        w!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">no requests</text>\n",
            LEFT + pw / 2.0,
            TOP + ph / 2.0
        );
    }
    let bw = pw / bars.len().max(1) as f64;
    let gap = if bw > 4.0 { 1.0 } else { 0.0 };
    for (i, &(a, r)) in bars.iter().enumerate() {
        if a == 0 && r == 0 {
            continue;
        }
        let x = LEFT + bw * i as f64;
        let t = time_of(i);
        w!(
            out,
            "<g><title>{}: {} admitted, {} refused</title>",
            Utc(t, None),
            Count(a),
            Count(r)
        );
        let (ya, yr) = (y_of(a), y_of(a.saturating_add(r)));
        if a > 0 {
            w!(
                out,
                "<rect x=\"{x:.2}\" y=\"{ya:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{ADMITTED}\"/>",
                bw - gap,
                TOP + ph - ya
            );
        }
        if r > 0 {
            w!(
                out,
                "<rect x=\"{x:.2}\" y=\"{yr:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{REFUSED}\"/>",
                bw - gap,
                ya - yr
            );
        }
        out.push_str("</g>\n");
    }
    axes(out, s.start, end, step, pw, ph);
}

/// Horizontal bars of the keys refused most.
fn keys_chart(out: &mut String, limit: &str, keys: &[KeyCount]) {
    const W: f64 = 760.0;
    const LABEL: f64 = 280.0;
    const ROW: f64 = 22.0;
    const TOP: f64 = 8.0;
    let keys = &keys[..keys.len().min(MAX_KEYS)];
    let h = TOP + ROW * keys.len() as f64 + 30.0;
    let max = keys.iter().map(|k| k.refused).max().unwrap_or(0).max(1);
    let pw = W - LABEL - 80.0;
    w!(
        out,
        "<svg class=\"chart\" data-limit=\"{}\" viewBox=\"0 0 {W} {h}\" width=\"{W}\" \
         height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\" role=\"img\" aria-label=\"Keys refused most, limit {}\">\n",
        Esc(limit),
        Esc(limit)
    );
    for (i, k) in keys.iter().enumerate() {
        let y = TOP + ROW * i as f64;
        let bw = (pw * k.refused as f64 / max as f64).max(1.0);
        w!(
            out,
            "<g><title>{}: {} refused</title>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{LABEL}\" y=\"{:.1}\" width=\"{bw:.2}\" height=\"{:.1}\" fill=\"{REFUSED}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text></g>\n",
            Esc(&k.key),
            Count(k.refused),
            LABEL - 8.0,
            y + 15.0,
            Esc(&Short(&k.key, 36).to_string()),
            y + 3.0,
            ROW - 6.0,
            LABEL + bw + 6.0,
            y + 15.0,
            Count(k.refused)
        );
    }
    let base = TOP + ROW * keys.len() as f64;
    w!(
        out,
        "<line stroke=\"#888\" x1=\"{LABEL}\" y1=\"{TOP}\" x2=\"{LABEL}\" y2=\"{base:.1}\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">requests refused, per key</text>\n\
         </svg>\n",
        LABEL + pw / 2.0,
        base + 22.0
    );
}

/// A round step (1, 2 or 5 times a power of ten) that divides `0..=max` into about `ticks`.
fn nice_step(max: u64, ticks: u64) -> u64 {
    let raw = max.div_ceil(ticks).max(1);
    let mut magnitude = 1;
    while magnitude <= raw / 10 {
        magnitude *= 10;
    }
    [1, 2, 5, 10]
        .into_iter()
        .map(|m| magnitude.saturating_mul(m))
        .find(|s| *s >= raw)
        .unwrap_or(u64::MAX)
}

/// Text escaped for HTML (content and quoted attributes); control characters, which HTML
/// does not allow, become U+FFFD.
struct Esc<'a>(&'a str);

impl fmt::Display for Esc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        let mut start = 0;
        for (i, c) in s.char_indices() {
            let replacement = match c {
                '&' => "&amp;",
                '<' => "&lt;",
                '>' => "&gt;",
                '"' => "&quot;",
                '\'' => "&#39;",
                '\t' | '\n' => continue,
                c if c.is_control() => "\u{FFFD}",
                _ => continue,
            };
            f.write_str(&s[start..i])?;
            f.write_str(replacement)?;
            start = i + c.len_utf8();
        }
        f.write_str(&s[start..])
    }
}

/// At most `n` characters, then "…".
struct Short<'a>(&'a str, usize);

impl fmt::Display for Short<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.char_indices().nth(self.1) {
            Some((i, _)) => write!(f, "{}…", &self.0[..i]),
            None => f.write_str(self.0),
        }
    }
}

/// 1,234,567.
struct Count(u64);

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.0.to_string();
        for (i, d) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// `part` of `whole` as a percentage, one decimal.
struct Percent(u64, u64);

impl fmt::Display for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.1 == 0 {
            return f.write_str("&#x2013;");
        }
        write!(f, "{:.1}%", self.0 as f64 * 100.0 / self.1 as f64)
    }
}

/// `now - then`, signed: +1,000 / &#x2212;12 / 0.
struct Delta(u64, u64);

impl fmt::Display for Delta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (now, then) = (self.0, self.1);
        match now.cmp(&then) {
            std::cmp::Ordering::Greater => write!(f, "+{}", Count(now - then)),
            std::cmp::Ordering::Less => write!(f, "&#x2212;{}", Count(then - now)),
            std::cmp::Ordering::Equal => f.write_str("0"),
        }
    }
}

/// A traffic factor: 0.5, 2, 4.
struct Factor(f64);

impl fmt::Display for Factor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.0.is_finite() {
            f.write_str("?")
        } else if self.0.fract() == 0.0 && self.0.abs() < 1e15 {
            write!(f, "{:.0}", self.0)
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// Unix seconds (and nanoseconds, shown to the millisecond) in UTC: 2026-12-02 11:15:49.123.
struct Utc(u64, Option<u64>);

impl fmt::Display for Utc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = i64::try_from(self.0)
            .ok()
            .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok());
        let Some(t) = t else {
            return write!(f, "{} s", self.0);
        };
        write!(
            f,
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        )?;
        if let Some(nanos) = self.1 {
            write!(f, ".{:03}", nanos / 1_000_000)?;
        }
        Ok(())
    }
}

/// A duration in seconds, in words: 45 s, 3 min 20 s, 2 h 5 min, 3 d 4 h.
struct Span(u64);

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
        match s {
            0..60 => write!(f, "{sec} s"),
            60..3600 if sec == 0 => write!(f, "{m} min"),
            60..3600 => write!(f, "{m} min {sec} s"),
            3600..86_400 if m == 0 => write!(f, "{h} h"),
            3600..86_400 => write!(f, "{h} h {m} min"),
            _ if h == 0 => write!(f, "{d} d"),
            _ => write!(f, "{d} d {h} h"),
        }
    }
}

#[cfg(test)]
mod tests;
