#!/usr/bin/env python3
"""The rate limit service (issue 29) side by side with the proxy's own decision path, in one
run: one Tollgate worker (threads = 1), one redis-server, loopback.

For a limit that never refuses, local, global exact and global leased: RLS decisions per
second and Tollgate CPU per decision (h2load sending the same ShouldRateLimit call over h2c,
4 connections x 16 streams; every call checked in tollgate_rls_requests_total{code="ok"}),
against proxied requests per second and CPU per request on a route with the same limit (wrk
-t1 -c16, to an nginx backend); Redis script calls per decision from INFO commandstats. The
reference figure for envoyproxy/ratelimit is its own: INCRBY + EXPIRE, 2 Redis commands per
descriptor per call.

The row "tree" is an imported envoyproxy/ratelimit config ([[rls.domains]], counting as that
service counts, in Redis) with the same call; TREE=0 leaves it out (for a build without it).

Usage: bench/rls.py [SECS]   (default 5)   env TG=target/release/tollgate TREE=1
Bounded: fixed seconds per run, traffic only to 127.0.0.1; every process is stopped.
"""
import importlib, os, struct, subprocess, sys, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loadtest import TMP, cpu_seconds, free_port, nginx, stop, tollgate, wait_port  # noqa: E402

_g = importlib.import_module("global")   # bench/global.py ("global" is a keyword)
redis_calls, redis_start = _g.redis_calls, _g.redis_start

SECS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
TREE = os.environ.get("TREE", "1") == "1"
PATH = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


def pb_string(field, s):
    b = s.encode()
    return bytes([field << 3 | 2, len(b)]) + b


def grpc_body(domain, key, value):
    entry = pb_string(1, key) + pb_string(2, value)
    descriptor = bytes([1 << 3 | 2, len(entry)]) + entry
    msg = pb_string(1, domain) + bytes([2 << 3 | 2, len(descriptor)]) + descriptor
    return b"\x00" + struct.pack(">I", len(msg)) + msg


def conf(port, admin, rls, be_port, redis_port):
    limits = ""
    rules = ""
    routes = ""
    for mode, extra in (("local", ""), ("exact", 'scope = "global"'),
                        ("lease", 'scope = "global"\nsync = "lease"\nlease_max = 100')):
        limits += f"""
[limits.rls_{mode}]
key = "descriptor"
rate = "100000000/s"
burst = 100000000
{extra}
[limits.px_{mode}]
key = "global"
rate = "100000000/s"
burst = 100000000
{extra}
"""
        rules += f"""
[[rls.rules]]
domain = "bench"
descriptor = [{{ key = "{mode}" }}]
limits = ["rls_{mode}"]
"""
        routes += f"""
[[routes]]
name = "{mode}"
path_prefix = "/{mode}"
upstream = "be"
limits = ["px_{mode}"]
"""
    tree = """
local_cache = false
[[rls.domains]]
domain = "benchtree"
[[rls.domains.descriptors]]
key = "tree"
rate_limit = { requests_per_unit = 4000000000, unit = "second" }
""" if TREE else ""
    return f"""
[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
threads = 1
[redis]
url = "redis://127.0.0.1:{redis_port}"
timeout = "50ms"
[upstreams.be]
targets = ["127.0.0.1:{be_port}"]
{routes}
{limits}
[rls]
listen = "127.0.0.1:{rls}"
{tree}
{rules}
"""


def ok_calls(admin):
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read().decode()
    n = 0.0
    for line in text.splitlines():
        if line.startswith("tollgate_rls_requests_total{") and 'code="ok"' in line:
            n += float(line.rsplit(" ", 1)[1])
    return n


def h2load(rls, body_file, secs):
    r = subprocess.run(["h2load", "-D", str(secs), "-c", "4", "-m", "16", "-t", "1",
                        "-d", body_file, "-H", "content-type: application/grpc",
                        "-H", "te: trailers", f"http://127.0.0.1:{rls}{PATH}"],
                       capture_output=True, text=True)
    done = 0
    for line in r.stdout.splitlines():
        if line.startswith("requests:"):
            done = int(line.split()[7])   # "N succeeded"
    return done


def wrk(port, path, secs):
    """Proxied 2xx answers of wrk on `path` (wrk's own count, less its non-2xx ones)."""
    r = subprocess.run(["wrk", "-t", "1", "-c", "16", "-d", f"{secs}s",
                        f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True)
    total, bad = 0, 0
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[1] == "requests" and parts[2] == "in":
            total = int(parts[0])
        elif line.strip().startswith("Non-2xx or 3xx responses:"):
            bad = int(parts[-1])
    return total - bad


def main():
    be_port = free_port()
    backend = nginx("backend-rls", f"""
  server {{ listen 127.0.0.1:{be_port}; location / {{ return 200 "ok\\n"; }} }}""")
    assert wait_port(be_port), "backend did not start"
    rd, rd_port = redis_start()
    port, admin, rls = free_port(), free_port(), free_port()
    tg = tollgate("rls-bench", conf(port, admin, rls, be_port, rd_port))
    rows = []
    try:
        assert wait_port(port) and wait_port(rls), "tollgate did not start"
        time.sleep(1.2)
        for mode in ("local", "exact", "lease") + (("tree",) if TREE else ()):
            body = os.path.join(TMP, f"rls-{mode}.bin")
            domain = "benchtree" if mode == "tree" else "bench"
            open(body, "wb").write(grpc_body(domain, mode, "client-1"))
            h2load(rls, body, 1)                                  # warm-up
            c0, r0, k0 = cpu_seconds([tg.pid]), redis_calls(rd_port)[0], ok_calls(admin)
            t0 = time.monotonic()
            n = h2load(rls, body, SECS)
            secs = time.monotonic() - t0
            c1, r1, k1 = cpu_seconds([tg.pid]), redis_calls(rd_port)[0], ok_calls(admin)
            rls_row = (n / secs, (c1 - c0) / max(1, n) * 1e6, (r1 - r0) / max(1, n), k1 - k0, n)
            if mode == "tree":
                rows.append((mode, rls_row, (0.0, 0.0, 0.0)))
                continue
            wrk(port, f"/{mode}", 1)
            c0, r0 = cpu_seconds([tg.pid]), redis_calls(rd_port)[0]
            t0 = time.monotonic()
            m = wrk(port, f"/{mode}", SECS)
            secs = time.monotonic() - t0
            c1, r1 = cpu_seconds([tg.pid]), redis_calls(rd_port)[0]
            px_row = (m / secs, (c1 - c0) / max(1, m) * 1e6, (r1 - r0) / max(1, m))
            rows.append((mode, rls_row, px_row))
    finally:
        stop(tg)
        stop(rd)
        stop(backend)
    print(f"\n{SECS}s per run; one Tollgate worker, one redis-server, loopback, release build,"
          " 2 shared cores (the load generators on them too)\n")
    print(f"{'limit':6} | {'RLS calls/s':>11} {'CPU us/call':>11} {'Redis/call':>10} {'decided ok':>10} |"
          f" {'proxy req/s':>11} {'CPU us/req':>10} {'Redis/req':>9} | {'RLS/proxy CPU':>13}")
    for mode, (rps, us, redis, ok, n), (prps, pus, predis) in rows:
        print(f"{mode:6} | {rps:11.0f} {us:11.1f} {redis:10.4f} {ok:6.0f}/{n:<4} |"
              f" {prps:11.0f} {pus:10.1f} {predis:9.4f} | {us / pus if pus else 0:13.2f}")
    print("\nenvoyproxy/ratelimit, its own design: INCRBY + EXPIRE per descriptor per call, "
          "2 Redis commands per decision (fixed window only)")


if __name__ == "__main__":
    main()
