#!/usr/bin/env python3
"""Global (Redis) limits against local ones, side by side in one run, on loopback.

One Tollgate worker (threads = 1) and one redis-server; wrk drives each scenario for a fixed
number of seconds. For each: req/s, p50/p99, status mix, CPU per request of Tollgate and of
Redis, and Redis commands per request (from INFO commandstats). Scenarios:
  hot key never denied, many keys never denied (the key is the path, random letters per request:
  676 keys that recur, or 11.8M keys each seen about once),
  hot key mostly denied (where the edge verdict cache answers) - each local, global exact, and
  global with budget leases; then three gateways on one key, exact and leased, against the
  stated bound.
Bounded: fixed seconds per scenario, traffic only to 127.0.0.1.
"""
import os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loadtest import (TMP, cpu_seconds, free_port, nginx, stop, tollgate, wait_port)  # noqa: E402

SECS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
CONNS = int(sys.argv[2]) if len(sys.argv) > 2 else 50

# calls/req: EVALSHA round trips per request; cmds/req: every command Redis ran, including the
# TIME/GET/SET inside the scripts.
# (name, key, rate per second, burst, url path: /bench, or /bench/<N random letters>)
SCENARIOS = [
    ("hot key, allowed", "global", 1000000, 100000000, "/bench"),
    ("676 keys, allowed", "path", 1000000, 100000000, "/bench/[a-z]{2}"),
    ("11.8M keys, allowed", "path", 1000000, 100000000, "/bench/[a-z]{5}"),
    ("hot key, mostly denied", "global", 100, 100, "/bench"),
]
# Each scenario runs local, global (sync = "exact") and lease (global, sync = "lease"). A key
# seen once (the 11.8M keys) is asked about exactly under a lease too: nothing to lease.
SCOPES = ("local", "global", "lease")


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


def conf(port, be_port, redis_port, key, rate, burst, scope, instances=1):
    sync = 'sync = "lease"' if scope == "lease" else ""
    scope = "global" if scope == "lease" else scope
    return f"""
[server]
listen = ["127.0.0.1:{port}"]
threads = 1
[redis]
url = "redis://127.0.0.1:{redis_port}"
timeout = "50ms"
instances = {instances}
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
{sync}
"""


WRK_LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wrk_status.lua")


def wrk(port, path, secs, conns):
    """wrk -t2 on /bench (or random /bench/<letters> when `path` has a regex): req/s, p50/p99
    (ms) and the statuses counted by bench/wrk_status.lua."""
    keylen = int(path.split("{")[1].split("}")[0]) if "{" in path else 0
    r = subprocess.run(["wrk", "-t", "2", "-c", str(conns), "-d", f"{secs}s", "--timeout", "5s",
                        "-s", WRK_LUA, f"http://127.0.0.1:{port}"],
                       capture_output=True, text=True, env={**os.environ, "WRK_KEYLEN": str(keylen)})
    out = {"codes": {}}
    for line in r.stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == "STATUS":
            out["codes"][parts[1]] = int(parts[2])
        elif parts and parts[0] in ("RPS", "P50", "P99"):
            out[parts[0]] = float(parts[1])
    return out


def run(port, path, pids, redis_port):
    wrk(port, path, 1, CONNS)
    c0 = [cpu_seconds([p]) for p in pids]
    r0 = redis_calls(redis_port)
    j = wrk(port, path, SECS, CONNS)
    r1 = redis_calls(redis_port)
    c1 = [cpu_seconds([p]) for p in pids]
    codes = j["codes"]
    n = sum(codes.values()) or 1
    return {
        "rps": j.get("RPS", 0),
        "p50": j.get("P50", 0) / 1000,
        "p99": j.get("P99", 0) / 1000,
        "codes": codes,
        "tg_us": (c1[0] - c0[0]) / n * 1e6,
        "redis_us": (c1[1] - c0[1]) / n * 1e6,
        "calls_per_req": (r1[0] - r0[0]) / n,
        "calls_per_allowed": (r1[0] - r0[0]) / max(1, codes.get("200", 0)),
        "cmds_per_req": (r1[1] - r0[1]) / n,
    }


FLEET_RATE, FLEET_BURST = 2000, 2000


def overshoot(be_port, redis_port, scope):
    """Three gateways on one Redis, wrk on each at once: what the fleet admits on one key
    against the stated bound (burst + rate*t, + instances x lease_max with leases)."""
    subprocess.run(["redis-cli", "-p", str(redis_port), "FLUSHALL"], stdout=subprocess.DEVNULL)
    procs, ports = [], []
    for i in range(3):
        port = free_port()
        procs.append(tollgate(f"g-fleet-{scope}-{i}",
                              conf(port, be_port, redis_port, "global", FLEET_RATE,
                                   FLEET_BURST, scope, instances=3)))
        ports.append(port)
    try:
        for port in ports:
            assert wait_port(port), "tollgate did not start"
        time.sleep(1.2)
        r0 = redis_calls(redis_port)
        t0 = time.monotonic()
        runs = [subprocess.Popen(["wrk", "-t", "1", "-c", str(max(1, CONNS // 3)), "-d",
                                  f"{SECS}s", "-s", WRK_LUA, f"http://127.0.0.1:{port}"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                for port in ports]
        admitted = 0
        for r in runs:
            out, _ = r.communicate()
            for line in out.splitlines():
                if line.startswith("STATUS 200 "):
                    admitted += int(line.split()[2])
        secs = time.monotonic() - t0
        calls = redis_calls(redis_port)[0] - r0[0]
    finally:
        for p in procs:
            stop(p)
    lease_max = FLEET_BURST // (2 * 3)
    bound = FLEET_BURST + FLEET_RATE * secs + (3 * lease_max if scope == "lease" else 0)
    return admitted, secs, bound, calls


def main():
    be_port = free_port()
    backend = nginx("backend-g", f"""
  server {{ listen 127.0.0.1:{be_port}; location / {{ return 200 "ok\\n"; }} }}""")
    assert wait_port(be_port), "backend did not start"
    rd, rd_port = redis_start()
    rows = []
    try:
        for name, key, rate, burst, path in SCENARIOS:
            for scope in SCOPES:
                port = free_port()
                p = tollgate(f"g-{scope}-{key}-{rate}",
                             conf(port, be_port, rd_port, key, rate, burst, scope))
                assert wait_port(port), "tollgate did not start"
                time.sleep(1.2)  # the start-up probe has loaded the scripts
                rows.append((name, scope, run(port, path, [p.pid, rd.pid], rd_port)))
                stop(p)
                subprocess.run(["redis-cli", "-p", str(rd_port), "FLUSHALL"],
                               stdout=subprocess.DEVNULL)
        fleet = [(sync, overshoot(be_port, rd_port, sync)) for sync in ("global", "lease")]
    finally:
        stop(rd)
        stop(backend)
    print(f"\n{SECS}s per scenario, {CONNS} connections, Tollgate threads = 1, one redis-server,"
          " loopback, 2 cores shared with wrk\n")
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
        if scope != "local":
            print(f"{name:24} {scope:6}/local throughput: {r['rps'] / local[name]['rps']:.2f}"
                  f"   Redis calls per admitted request: {r['calls_per_allowed']:.4f}")
    print(f"\n3 gateways (instances = 3), one hot key, gcra {FLEET_RATE}/s burst {FLEET_BURST}, "
          f"{SECS}s of wrk on each at once:")
    for sync, (admitted, secs, bound, calls) in fleet:
        print(f"  {sync:6}: admitted {admitted} in {secs:.2f} s; stated bound {bound:.0f} "
              f"(burst + rate*t{' + 3 x lease_max' if sync == 'lease' else ''}); "
              f"Redis calls {calls}")


if __name__ == "__main__":
    main()
