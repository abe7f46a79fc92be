//! Tollgate's own log: tracing-subscriber's JSON lines, events flattened. Requests are the
//! lines with `"event":"request"`; the rest are skipped.

use super::json::{self, Fields, Val};
use super::{client_ip, method, show, target, time, Client, Parsed, Record};
use serde::de::{IgnoredAny, MapAccess};

/// The keys a request line is read from; kept as any value until the line is known to be a
/// request (another event may use the same names for other things).
#[derive(Default)]
struct Line<'a> {
    event: Val<'a>,
    timestamp: Val<'a>,
    method: Val<'a>,
    host: Val<'a>,
    path: Val<'a>,
    client: Val<'a>,
    client_ip: Val<'a>,
    duration_ms: Val<'a>,
}

impl<'de> Fields<'de> for Line<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let slot = match key {
            "event" => &mut self.event,
            "timestamp" => &mut self.timestamp,
            "method" => &mut self.method,
            "host" => &mut self.host,
            "path" => &mut self.path,
            "client" => &mut self.client,
            "client_ip" => &mut self.client_ip,
            "duration_ms" => &mut self.duration_ms,
            _ => {
                map.next_value::<IgnoredAny>()?;
                return Ok(());
            }
        };
        *slot = map.next_value()?;
        Ok(())
    }
}

pub(super) fn parse(line: &[u8]) -> Result<Parsed, String> {
    let l: Line = json::object(line)?;
    if !matches!(&l.event, Val::Str(e) if e == "request") {
        return Ok(Parsed::Skip);
    }
    let ts = l.timestamp.text().ok_or("no timestamp")?;
    let end = time::rfc3339(ts).ok_or_else(|| format!("bad timestamp {}", show(ts)))?;
    // The line is written when the request ends: it arrived `duration_ms` before.
    let took = match l.duration_ms {
        Val::Num(ms) if ms.is_finite() && ms > 0.0 => (ms * 1e6) as u64,
        _ => 0,
    };
    let time = end.saturating_sub(took);
    let method = method(l.method.text().ok_or("no method")?)?;
    let mut host = l.host.into_text().map(String::from);
    let target = target(
        l.path
            .text()
            .ok_or("no path (the gateway logs it with [server] access_log_paths = true)")?,
        &mut host,
    )?;
    let client = match (l.client_ip.text(), l.client.text()) {
        (Some(ip), _) => client_ip(ip)?,
        (None, Some(c)) => Some(pseudonym(c)?),
        (None, None) => None,
    };
    Ok(Parsed::Record(Record {
        time,
        method,
        host,
        target,
        client,
        headers: Vec::new(),
    }))
}

/// Tollgate writes a client's pseudonym as 16 hex digits.
fn pseudonym(s: &str) -> Result<Client, String> {
    if s.len() <= 16 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        if let Ok(v) = u64::from_str_radix(s, 16) {
            return Ok(Client::Pseudonym(v));
        }
    }
    Err(format!("bad client pseudonym {}", show(s)))
}
