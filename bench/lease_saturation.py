#!/usr/bin/env python3
"""A global key driven far past its limit, exact against leased (issue 29): two Tollgate
gateways (instances = 2) on one redis-server, wrk on each at once (8 connections in all), one
key, a GCRA limit of RATE/s with burst RATE and lease_max 50. For each limit rate (RATES, so
that wrk's offered load is about 10x and 50x the limit) and each sync mode: the offered load
over the limit, admitted requests against rate·t and against the stated bound
(burst + rate·t, + instances x lease_max when leased), and Redis script calls per admitted
request (EVALSHA, from INFO commandstats).

Usage: bench/lease_saturation.py [SECS]   (default 3)   env RATES=2500,500 TG=target/release/tollgate
Bounded: fixed seconds per run, traffic only to 127.0.0.1; every process is stopped.
"""
import os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loadtest import free_port, nginx, stop, tollgate, wait_port  # noqa: E402
import importlib  # noqa: E402

_g = importlib.import_module("global")   # bench/global.py ("global" is a keyword)
WRK_LUA, redis_calls, redis_start = _g.WRK_LUA, _g.redis_calls, _g.redis_start

SECS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
RATES = [int(x) for x in os.environ.get("RATES", "2500,500").split(",")]
LEASE_MAX = 50


def conf(port, be_port, redis_port, rate, sync):
    lease = f'sync = "lease"\nlease_max = {LEASE_MAX}' if sync == "lease" else ""
    return f"""
[server]
listen = ["127.0.0.1:{port}"]
threads = 1
[redis]
url = "redis://127.0.0.1:{redis_port}"
timeout = "50ms"
instances = 2
[upstreams.be]
targets = ["127.0.0.1:{be_port}"]
[[routes]]
name = "bench"
path_prefix = "/"
upstream = "be"
limits = ["l"]
[limits.l]
key = "global"
algorithm = "gcra"
rate = "{rate}/s"
burst = {rate}
scope = "global"
{lease}
"""


def one(be_port, redis_port, rate, sync):
    subprocess.run(["redis-cli", "-p", str(redis_port), "FLUSHALL"], stdout=subprocess.DEVNULL)
    procs, ports = [], []
    for i in range(2):
        port = free_port()
        procs.append(tollgate(f"sat-{sync}-{rate}-{i}", conf(port, be_port, redis_port, rate, sync)))
        ports.append(port)
    try:
        for port in ports:
            assert wait_port(port), "tollgate did not start"
        time.sleep(1.2)
        r0 = redis_calls(redis_port)[0]
        t0 = time.monotonic()
        runs = [subprocess.Popen(["wrk", "-t", "1", "-c", "4", "-d", f"{SECS}s", "-s", WRK_LUA,
                                  f"http://127.0.0.1:{port}"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                for port in ports]
        admitted, total = 0, 0
        for r in runs:
            out, _ = r.communicate()
            for line in out.splitlines():
                parts = line.split()
                if parts and parts[0] == "STATUS":
                    total += int(parts[2])
                    if parts[1] == "200":
                        admitted += int(parts[2])
        secs = time.monotonic() - t0
        calls = redis_calls(redis_port)[0] - r0
    finally:
        for p in procs:
            stop(p)
    return admitted, total, secs, calls


def main():
    be_port = free_port()
    backend = nginx("backend-sat", f"""
  server {{ listen 127.0.0.1:{be_port}; location / {{ return 200 "ok\\n"; }} }}""")
    assert wait_port(be_port), "backend did not start"
    rd, rd_port = redis_start()
    rows = []
    try:
        for rate in RATES:
            for sync in ("exact", "lease"):
                rows.append((rate, sync, one(be_port, rd_port, rate, sync)))
    finally:
        stop(rd)
        stop(backend)
    print(f"\n2 gateways (instances = 2), one key, gcra RATE/s burst RATE, lease_max {LEASE_MAX}, "
          f"{SECS}s of wrk -c4 on each at once; loopback, release builds, 2 shared cores\n")
    print(f"{'rate/s':>7} {'sync':6} {'offered/s':>9} {'x limit':>7} {'admitted':>8} {'rate*t':>7} "
          f"{'% rate*t':>8} {'bound':>6} {'Redis calls':>11} {'calls/admitted':>14}")
    for rate, sync, (admitted, total, secs, calls) in rows:
        rate_t = rate * secs
        bound = rate + rate_t + (2 * LEASE_MAX if sync == "lease" else 0)
        print(f"{rate:7} {sync:6} {total / secs:9.0f} {total / secs / rate:7.1f} {admitted:8} "
              f"{rate_t:7.0f} {100 * admitted / rate_t:8.1f} {bound:6.0f} {calls:11} "
              f"{calls / max(1, admitted):14.4f}")


if __name__ == "__main__":
    main()
