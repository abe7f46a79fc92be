#!/usr/bin/env python3
"""Issue 25's key flood, end to end: can a client that varies a key switch global limits off?

Three Tollgate gateways (threads = 1, instances = 3) on one redis-server, each driven by wrk
with 32 connections sending a new key on every request (a random path, the limit keyed by the
path) for SECS seconds, while a second wrk on every gateway hammers one key that was exhausted
first (token bucket 10/s, burst 20). Reported, for an exact and a leased limit (lease_max 5),
both with on_error = "open" (the old default, the worst case): the hammered key's admissions
against its stated bound (burst + rate x t, + instances x lease_max with leases), Redis calls
per second, each gateway's calls that met an open breaker and its late calls, the breaker
changes in the logs (redis_down), and the worst PING latency of Redis itself during the flood
(sampled every 100 ms by this script).

Usage: bench/flood.py [SECS]   (default 15). TOLLGATE=binary (default target/release/tollgate).
Traffic only to 127.0.0.1; every run is bounded in time; every process started is stopped.
"""
import importlib, os, socket, subprocess, sys, threading, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loadtest import TMP, free_port, nginx, stop, tollgate, wait_port  # noqa: E402
_g = importlib.import_module("global")  # bench/global.py ("global" is a keyword)
redis_calls, redis_start = _g.redis_calls, _g.redis_start

SECS = int(sys.argv[1]) if len(sys.argv) > 1 else 15
WRK_LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wrk_status.lua")
RATE, BURST, LEASE_MAX, GATEWAYS, FLOOD_CONNS = 10, 20, 5, 3, 32


def conf(port, admin, be_port, redis_port, sync):
    lease = f'sync = "lease"\nlease_max = {LEASE_MAX}' if sync == "lease" else ""
    return f"""
[server]
listen = ["127.0.0.1:{port}"]
admin = "127.0.0.1:{admin}"
threads = 1
[redis]
url = "redis://127.0.0.1:{redis_port}"
instances = {GATEWAYS}
[upstreams.be]
targets = ["127.0.0.1:{be_port}"]
health_check = false
[[routes]]
name = "bench"
path_prefix = "/"
upstream = "be"
limits = ["l"]
[limits.l]
key = "path"
rate = "{RATE}/s"
burst = {BURST}
scope = "global"
on_error = "open"
{lease}
"""


def wrk(port, secs, conns, keylen):
    return subprocess.Popen(["wrk", "-t", "1", "-c", str(conns), "-d", f"{secs}s", "--timeout", "5s",
                             "-s", WRK_LUA, f"http://127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "WRK_KEYLEN": str(keylen)})


def statuses(p):
    out, _ = p.communicate()
    codes = {}
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "STATUS":
            codes[parts[1]] = int(parts[2])
    return codes


def metric(admin, name, label):
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read().decode()
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
               if l.startswith(name) and label in l)


def pinger(redis_port, until, worst):
    s = socket.create_connection(("127.0.0.1", redis_port))
    while time.monotonic() < until:
        t = time.monotonic()
        s.sendall(b"PING\r\n")
        s.recv(16)
        worst[0] = max(worst[0], time.monotonic() - t)
        time.sleep(0.1)
    s.close()


def run(sync, be_port, redis_port):
    subprocess.run(["redis-cli", "-p", str(redis_port), "FLUSHALL"], stdout=subprocess.DEVNULL)
    ports = [(free_port(), free_port()) for _ in range(GATEWAYS)]
    procs = [tollgate(f"flood-{sync}-{i}", conf(p, a, be_port, redis_port, sync))
             for i, (p, a) in enumerate(ports)]
    try:
        for p, _ in ports:
            assert wait_port(p), "tollgate did not start"
        time.sleep(1.2)
        t0 = time.monotonic()
        # The victim's key, exhausted on one gateway first.
        admitted = statuses(wrk(ports[0][0], 1, 2, 0)).get("200", 0)
        r0 = redis_calls(redis_port)[0]
        until = time.monotonic() + SECS
        worst = [0.0]
        ping = threading.Thread(target=pinger, args=(redis_port, until, worst))
        ping.start()
        floods = [wrk(p, SECS, FLOOD_CONNS, 8) for p, _ in ports]
        victims = [wrk(p, SECS, 2, 0) for p, _ in ports]
        fresh = sum(sum(statuses(f).values()) for f in floods)
        admitted += sum(statuses(v).get("200", 0) for v in victims)
        ping.join()
        secs = time.monotonic() - t0
        calls = redis_calls(redis_port)[0] - r0
        opened = sum(metric(a, "tollgate_redis_errors_total", 'kind="circuit_open"') for _, a in ports)
        late = sum(metric(a, "tollgate_redis_errors_total", 'kind="late"') for _, a in ports)
        shed = sum(metric(a, "tollgate_redis_errors_total", 'kind="saturated"') for _, a in ports)
    finally:
        for p in procs:
            stop(p)
    downs = sum(open(os.path.join(TMP, f"flood-{sync}-{i}.log")).read().count("redis_down")
                for i in range(GATEWAYS))
    bound = BURST + RATE * secs + (GATEWAYS * LEASE_MAX if sync == "lease" else 0)
    print(f"{sync:6}: hammered key admitted {admitted} in {secs:.1f} s, stated bound {bound:.0f}; "
          f"fresh-key requests {fresh} ({fresh / SECS:,.0f}/s); Redis {calls / SECS:,.0f} calls/s; "
          f"breaker opened {downs} times (redis_down), calls refused by an open breaker {opened:.0f}, "
          f"late {late:.0f}, shed {shed:.0f}; worst PING {worst[0] * 1000:.1f} ms", flush=True)


def main():
    be_port = free_port()
    backend = nginx("backend-flood", f"""
  server {{ listen 127.0.0.1:{be_port}; location / {{ return 200 "ok\\n"; }} }}""")
    assert wait_port(be_port), "backend did not start"
    rd, rd_port = redis_start()
    try:
        print(f"{GATEWAYS} gateways x {FLOOD_CONNS} connections of fresh keys, {SECS} s, "
              f"token bucket {RATE}/s burst {BURST}, on_error = open")
        for sync in ("exact", "lease"):
            run(sync, be_port, rd_port)
    finally:
        stop(rd)
        stop(backend)


if __name__ == "__main__":
    main()
