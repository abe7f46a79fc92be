#!/usr/bin/env python3
"""`tollgate simulate` throughput on one core: N generated CSV lines (default 1,000,000; 0.5 ms
apart, 250k client addresses, 5,000 users, four paths) through a config with a per-address and
a per-user limit, pinned to CPU 0. Prints lines per second and per minute (all four passes:
x1, x0.5, x2, x4) and the peak memory.

Usage: bench/simulate.py [tollgate-binary] [lines]   (default target/release/tollgate, 1000000)
"""
import os, random, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TG = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "target/release/tollgate")
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000

tmp = tempfile.mkdtemp(prefix="tollgate-simulate-")
conf = os.path.join(tmp, "tollgate.toml")
log = os.path.join(tmp, "traffic.csv")
open(conf, "w").write("""[server]
listen = ["127.0.0.1:1"]
[upstreams.api]
targets = ["127.0.0.1:2"]
[limits.per_ip]
key = "client_ip"
rate = "10/s"
burst = 5
[limits.per_user]
key = "header:x-user"
rate = "2/s"
burst = 2
[[routes]]
name = "api"
path_prefix = "/api"
upstream = "api"
limits = ["per_ip", "per_user"]
[[routes]]
name = "health"
path_exact = "/healthz"
respond = { status = 200, body = "ok" }
""")
rnd = random.Random(1)
t0 = 1764672000.0
with open(log, "w") as f:
    f.write("time,method,host,path,client,x-user\n")
    for i in range(N):
        ip = f"10.{rnd.randint(0, 3)}.{rnd.randint(0, 255)}.{rnd.randint(1, 254)}"
        path = rnd.choice(["/api/a", "/api/b?x=1", "/healthz", "/api/c/d"])
        f.write(f"{t0 + i * 0.0005:.4f},GET,example.com,{path},{ip},user{rnd.randint(0, 5000)}\n")
size = os.path.getsize(log)
t = time.monotonic()
out = subprocess.run(["taskset", "-c", "0", "/usr/bin/time", "-f", "%M %U %S", TG, "simulate",
                      "--config", conf, log, "--json"], capture_output=True, text=True, timeout=600)
wall = time.monotonic() - t
if out.returncode != 0:
    sys.exit(out.stderr)
rss_kb, user, sys_s = out.stderr.strip().splitlines()[-1].split()
print(f"{N:,} lines ({size / 1e6:.0f} MB) in {wall:.2f} s wall, {float(user) + float(sys_s):.2f} s CPU on one core: "
      f"{N / wall:,.0f} lines/s, {N / wall * 60 / 1e6:.1f} M lines/min; peak memory {int(rss_kb) / 1024:.0f} MiB")
subprocess.run(["rm", "-rf", tmp])
