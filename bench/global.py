#!/usr/bin/env python3
"""Global (Redis) limits against local ones, side by side in one run, on loopback.

One Tollgate worker (threads = 1) and one redis-server; oha drives each scenario for a fixed
number of seconds. For each: req/s, p50/p99, status mix, CPU per request of Tollgate and of
Redis, and Redis commands per request (from INFO commandstats). Scenarios:
  hot key never denied, many keys never denied (the key is the path, oha picks random ones),
  hot key mostly denied (where the edge verdict cache answers) - each local, then global.
Bounded: fixed seconds per scenario, traffic only to 127.0.0.1.
"""
import json, os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loadtest import (TMP, cpu_seconds, free_port, nginx, stop, tollgate, wait_port)  # noqa: E402

SECS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
CONNS = int(sys.argv[2]) if len(sys.argv) > 2 else 50

# calls/req: EVALSHA round trips per request; cmds/req: every command Redis ran, including the
# TIME/GET/SET inside the scripts.
# (name, key, rate per second, burst, url path regex for oha)
SCENARIOS = [
    ("hot key, allowed", "global", 1000000, 100000000, "/bench"),
    ("many keys, allowed", "path", 1000000, 100000000, "/bench/[a-z]{5}"),
    ("hot key, mostly denied", "global", 100, 100, "/bench"),
]


def redis_start():
    port = free_port()
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    assert wait_port(port), "redis-server did not start"
    return p, port


def redis_calls(port):
    """(round trips from Tollgate: EVALSHA calls, all commands run including those inside the
    scripts), from INFO commandstats; the probe's PINGs and this script's INFO left out."""
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"],
                         capture_output=True, text=True).stdout
    evalsha, total = 0, 0
    for line in out.splitlines():
        if line.startswith("cmdstat_") and "calls=" in line:
            name = line.split(":", 1)[0]
            if name in ("cmdstat_info", "cmdstat_ping"):
                continue
            n = int(line.split("calls=", 1)[1].split(",", 1)[0])
            total += n
            if name == "cmdstat_evalsha":
                evalsha = n
    return evalsha, total


def conf(port, be_port, redis_port, key, rate, burst, scope):
    return f"""
[server]
listen = ["127.0.0.1:{port}"]
threads = 1
[redis]
url = "redis://127.0.0.1:{redis_port}"
timeout = "50ms"
[upstreams.be]
targets = ["127.0.0.1:{be_port}"]
[[routes]]
name = "bench"
path_prefix = "/"
upstream = "be"
limits = ["l"]
[limits.l]
key = "{key}"
algorithm = "gcra"
rate = "{rate}/s"
burst = {burst}
scope = "{scope}"
"""


def run(port, path, pids, redis_port):
    url = f"http://127.0.0.1:{port}{path}"
    args = ["oha", "--no-tui", "-c", str(CONNS)]
    if "[" in path:
        args.append("--rand-regex-url")
    subprocess.run(args + ["-z", "1s", url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    c0 = [cpu_seconds([p]) for p in pids]
    r0 = redis_calls(redis_port)
    r = subprocess.run(args + ["-z", f"{SECS}s", "--output-format", "json", url],
                       capture_output=True, text=True)
    r1 = redis_calls(redis_port)
    c1 = [cpu_seconds([p]) for p in pids]
    j = json.loads(r.stdout)
    codes = j.get("statusCodeDistribution", {})
    n = sum(codes.values()) or 1
    lat = j.get("latencyPercentiles", {})
    return {
        "rps": j["summary"]["requestsPerSec"],
        "p50": (lat.get("p50") or 0) * 1000,
        "p99": (lat.get("p99") or 0) * 1000,
        "codes": codes,
        "tg_us": (c1[0] - c0[0]) / n * 1e6,
        "redis_us": (c1[1] - c0[1]) / n * 1e6,
        "calls_per_req": (r1[0] - r0[0]) / n,
        "cmds_per_req": (r1[1] - r0[1]) / n,
    }


def main():
    be_port = free_port()
    backend = nginx("backend-g", f"""
  server {{ listen 127.0.0.1:{be_port}; location / {{ return 200 "ok\\n"; }} }}""")
    assert wait_port(be_port), "backend did not start"
    rd, rd_port = redis_start()
    rows = []
    try:
        for name, key, rate, burst, path in SCENARIOS:
            for scope in ("local", "global"):
                port = free_port()
                p = tollgate(f"g-{scope}-{key}-{rate}",
                             conf(port, be_port, rd_port, key, rate, burst, scope))
                assert wait_port(port), "tollgate did not start"
                time.sleep(1.2)  # the start-up probe has loaded the scripts
                rows.append((name, scope, run(port, path, [p.pid, rd.pid], rd_port)))
                stop(p)
                subprocess.run(["redis-cli", "-p", str(rd_port), "FLUSHALL"],
                               stdout=subprocess.DEVNULL)
    finally:
        stop(rd)
        stop(backend)
    print(f"\n{SECS}s per scenario, {CONNS} connections, Tollgate threads = 1, one redis-server,"
          " loopback, 2 cores shared with oha\n")
    print(f"{'scenario':24} {'scope':7} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'TG us/req':>9} {'Redis us/req':>12} {'calls/req':>9} {'cmds/req':>8}  statuses")
    local = {}
    for name, scope, r in rows:
        codes = ",".join(f"{c}:{n}" for c, n in sorted(r["codes"].items()))
        print(f"{name:24} {scope:7} {r['rps']:8.0f} {r['p50']:7.2f} {r['p99']:7.2f} "
              f"{r['tg_us']:9.1f} {r['redis_us']:12.1f} {r['calls_per_req']:9.4f} "
              f"{r['cmds_per_req']:8.3f}  {codes}")
        if scope == "local":
            local[name] = r
    print()
    for name, scope, r in rows:
        if scope == "global":
            print(f"{name:24} global/local throughput: {r['rps'] / local[name]['rps']:.2f}")


if __name__ == "__main__":
    main()
