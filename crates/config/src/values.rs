//! Parsers for the humane scalar values of the format: durations and rates.

use std::time::Duration;
use tollgate_limit::Rate;

/// "250ms", "5s", "1m", "2h", "1d" (also "us" and "ns"). A whole number and one unit.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(|| {
        format!("\"{s}\" has no unit: write e.g. \"20ms\", \"5s\", \"1m\", \"1h\"")
    })?;
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("\"{s}\" is not a duration: write e.g. \"20ms\", \"5s\", \"1h\""))?;
    let per_unit = match unit {
        "ns" => Duration::from_nanos(1),
        "us" | "µs" => Duration::from_micros(1),
        "ms" => Duration::from_millis(1),
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        "d" => Duration::from_secs(86_400),
        _ => {
            return Err(format!(
                "\"{s}\": unknown unit \"{unit}\" (use ns, us, ms, s, m, h or d)"
            ))
        }
    };
    per_unit
        .checked_mul(u32::try_from(n).map_err(|_| format!("\"{s}\" is too large"))?)
        .ok_or_else(|| format!("\"{s}\" is too large"))
}

/// "10/s", "5/m", "100/h", "1000/d"; long unit names are accepted too ("5/min").
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    let bad = || format!("\"{s}\" is not a rate: write N/s, N/m, N/h or N/d, e.g. \"10/s\"");
    let (n, unit) = s.trim().split_once('/').ok_or_else(bad)?;
    let n: u64 = n.trim().parse().map_err(|_| bad())?;
    let period = match unit.trim() {
        "s" | "sec" | "second" => 1,
        "m" | "min" | "minute" => 60,
        "h" | "hour" => 3600,
        "d" | "day" => 86_400,
        _ => return Err(bad()),
    };
    if n == 0 {
        return Err(format!("\"{s}\": the count must be at least 1"));
    }
    Rate::new(n, Duration::from_secs(period)).map_err(|e| format!("\"{s}\": {e}"))
}

/// A TOML value as JSON (a node's `metadata`): tables as objects, arrays, strings, integers,
/// floats and booleans as themselves, dates as their text; `None` for a float JSON cannot hold
/// (NaN, infinity).
pub(crate) fn toml_to_json(v: &crate::reader::Value) -> Option<serde_json::Value> {
    use toml::de::DeValue;
    Some(match v.get_ref() {
        DeValue::String(s) => serde_json::Value::String(s.to_string()),
        DeValue::Integer(i) => serde_json::Value::from(i.to_string().parse::<i64>().ok()?),
        DeValue::Float(f) => {
            serde_json::Value::from(serde_json::Number::from_f64(f.to_string().parse().ok()?)?)
        }
        DeValue::Boolean(b) => serde_json::Value::Bool(*b),
        DeValue::Datetime(d) => serde_json::Value::String(d.to_string()),
        DeValue::Array(items) => {
            serde_json::Value::Array(items.iter().map(toml_to_json).collect::<Option<Vec<_>>>()?)
        }
        DeValue::Table(t) => {
            let mut m = serde_json::Map::new();
            for (k, v) in t.iter() {
                m.insert(k.get_ref().to_string(), toml_to_json(v)?);
            }
            serde_json::Value::Object(m)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("20ms"), Ok(Duration::from_millis(20)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn rates() {
        let r = parse_rate("10/s").expect("rate");
        assert_eq!((r.count(), r.period()), (10, Duration::from_secs(1)));
        let r = parse_rate("5/min").expect("rate");
        assert_eq!((r.count(), r.period()), (5, Duration::from_secs(60)));
        assert!(parse_rate("0/s").is_err());
        assert!(parse_rate("10/x").is_err());
        assert!(parse_rate("ten/s").is_err());
    }
}
