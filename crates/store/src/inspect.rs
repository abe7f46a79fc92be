//! Reading a limit's state in Redis as it is, for `tollgate explain --redis`: never a script,
//! never a write.

/// Each key's Redis type, time to live and value, one line each (`none` for a key Redis does
/// not hold: a fresh key, or one whose state has run out). A single node's URL (a cluster
/// member answers for the slots it holds).
pub async fn inspect(url: &str, keys: &[String]) -> Result<Vec<String>, String> {
    let client = redis::Client::open(url).map_err(|e| format!("{url}: {e}"))?;
    let mut c = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        client.get_multiplexed_async_connection(),
    )
    .await
    .map_err(|_| format!("{url}: no answer in 3 s"))?
    .map_err(|e| format!("{url}: {e}"))?;
    let mut out = Vec::with_capacity(keys.len());
    for k in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(k)
            .query_async(&mut c)
            .await
            .map_err(|e| e.to_string())?;
        if kind == "none" {
            out.push("none (no state: the key starts full)".to_string());
            continue;
        }
        let ttl: i64 = redis::cmd("PTTL")
            .arg(k)
            .query_async(&mut c)
            .await
            .map_err(|e| e.to_string())?;
        let mut cmd = match kind.as_str() {
            "string" => redis::cmd("GET"),
            "hash" => redis::cmd("HGETALL"),
            "zset" => redis::cmd("ZRANGE"),
            "list" => redis::cmd("LRANGE"),
            _ => redis::cmd("TYPE"),
        };
        cmd.arg(k);
        match kind.as_str() {
            "zset" => {
                cmd.arg(-5).arg(-1).arg("WITHSCORES");
            }
            "list" => {
                cmd.arg(0).arg(9);
            }
            _ => {}
        }
        let value = cmd
            .query_async::<redis::Value>(&mut c)
            .await
            .map_err(|e| e.to_string())?;
        out.push(format!("{kind} {} ttl {ttl} ms", show(&value)));
    }
    Ok(out)
}

fn show(v: &redis::Value) -> String {
    match v {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        redis::Value::SimpleString(s) => s.clone(),
        redis::Value::Int(i) => i.to_string(),
        redis::Value::Array(a) => format!("[{}]", a.iter().map(show).collect::<Vec<_>>().join(" ")),
        redis::Value::Map(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}={}", show(k), show(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        other => format!("{other:?}"),
    }
}
