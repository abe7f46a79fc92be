#!/usr/bin/env python3
"""Side-by-side load test on loopback: the backend direct, Tollgate, and nginx as the proxy.

Every server runs one worker (Tollgate threads = 1, nginx worker_processes 1) so CPU per
request compares like with like. For each scenario: req/s, p50/p99 latency (oha), status mix,
and the proxy's CPU time per request (utime+stime from /proc over the run). Ratios are to the
direct backend and to the nginx proxy measured in the same run. Bounded: each scenario runs a
fixed number of seconds, traffic only to 127.0.0.1.
"""
import json, os, signal, socket, subprocess, sys, tempfile, time

SECS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
CONNS = int(sys.argv[2]) if len(sys.argv) > 2 else 50
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TG = os.path.join(ROOT, "target/release/tollgate")
TMP = tempfile.mkdtemp(prefix="tollgate-bench-")
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def cpu_seconds(pids):
    total = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                f = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
                total += int(f[11]) + int(f[12])
            except (OSError, IndexError):
                pass
    return total / TICK


def children(pid):
    out = [pid]
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p))
            except (OSError, IndexError):
                pass
    return out


def nginx(name, conf_body):
    d = os.path.join(TMP, name)
    os.makedirs(os.path.join(d, "logs"), exist_ok=True)
    conf = os.path.join(d, "nginx.conf")
    open(conf, "w").write(f"""
worker_processes 1;
daemon off;
error_log {d}/logs/error.log crit;
pid {d}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 100000;
  {conf_body}
}}
""")
    return subprocess.Popen(["nginx", "-p", d, "-c", conf], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def tollgate(name, toml):
    path = os.path.join(TMP, name + ".toml")
    open(path, "w").write(toml)
    log = open(os.path.join(TMP, name + ".log"), "w")
    return subprocess.Popen([TG, "run", "--config", path], stdout=log, stderr=log,
                            start_new_session=True)


def stop(p):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGINT)
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def oha(port, measure_pids):
    url = f"http://127.0.0.1:{port}/bench"
    # Warm-up: connections, caches, the allocator.
    subprocess.run(["oha", "-z", "1s", "-c", str(CONNS), "--no-tui", url],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    c0 = cpu_seconds(measure_pids)
    r = subprocess.run(["oha", "-z", f"{SECS}s", "-c", str(CONNS), "--no-tui",
                        "--output-format", "json", url], capture_output=True, text=True)
    c1 = cpu_seconds(measure_pids)
    j = json.loads(r.stdout)
    s = j["summary"]
    lat = j.get("latencyPercentiles", {})
    codes = j.get("statusCodeDistribution", {})
    n = sum(codes.values()) or 1
    return {
        "rps": s["requestsPerSec"],
        "p50": (lat.get("p50") or 0) * 1000,
        "p99": (lat.get("p99") or 0) * 1000,
        "codes": codes,
        "cpu_us": (c1 - c0) / n * 1e6,
    }


# The two limit shapes, (rate per second, burst), given to Tollgate and nginx alike.
SHAPES = {"allow": (100000000, 100000000), "deny": (100, 100)}


def tg_conf(port, be_port, limits):
    lim = ""
    route_limits = ""
    if limits:
        rate, burst = SHAPES[limits]
        route_limits = 'limits = ["per_ip"]'
        # nginx's limit_req burst=N nodelay, exactly: the leaky bucket with capacity N + 1
        # (nginx's burst is the queue beyond the request served) and all of it undelayed.
        lim = (f'[limits.per_ip]\nkey = "client_ip"\nalgorithm = "leaky_bucket"\n'
               f'rate = "{rate}/s"\nburst = {burst + 1}\ndelay = {burst + 1}\n')
    return f"""
[server]
listen = ["127.0.0.1:{port}"]
threads = 1
[upstreams.be]
targets = ["127.0.0.1:{be_port}"]
health_check = false
[[routes]]
name = "bench"
path_prefix = "/"
upstream = "be"
{route_limits}
{lim}
"""


def ngx_proxy(port, be_port, limits):
    zone, use = "", ""
    if limits:
        rate, burst = SHAPES[limits]
        zone = f"limit_req_zone $binary_remote_addr zone=ip:10m rate={rate}r/s;"
        use = f"limit_req zone=ip burst={burst} nodelay; limit_req_status 429;"
    return f"""
  {zone}
  upstream be {{ server 127.0.0.1:{be_port}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      {use}
      proxy_pass http://be;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
"""


def main():
    be_port = free_port()
    backend = nginx("backend", f"""
  server {{ listen 127.0.0.1:{be_port}; location / {{ return 200 "ok\\n"; }} }}""")
    assert wait_port(be_port), "backend did not start"
    results = []
    try:
        results.append(("a. backend direct", oha(be_port, children(backend.pid))))
        for tag, limits in [("b", None), ("c", "allow"), ("d", "deny")]:
            port = free_port()
            p = tollgate(f"tg-{tag}", tg_conf(port, be_port, limits))
            assert wait_port(port), f"tollgate {tag} did not start"
            label = {"b": "b. tollgate, no limits", "c": "c. tollgate, per-IP limit never denies",
                     "d": "d. tollgate, limit denies most"}[tag]
            results.append((label, oha(port, [p.pid])))
            stop(p)
        for tag, limits in [("e", None), ("f", "allow"), ("g", "deny")]:
            port = free_port()
            p = nginx(f"ngx-{tag}", ngx_proxy(port, be_port, limits))
            assert wait_port(port), f"nginx {tag} did not start"
            label = {"e": "e. nginx proxy, no limits", "f": "f. nginx limit_req never denies",
                     "g": "g. nginx limit_req denies most"}[tag]
            results.append((label, oha(port, children(p.pid))))
            stop(p)
    finally:
        stop(backend)

    base = results[0][1]["rps"]
    ngx = {r[0][0]: r[1] for r in results}
    print(f"\n{SECS}s per scenario, {CONNS} connections, one worker each, loopback, 2 cores shared with oha\n")
    print(f"{'scenario':42} {'req/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'CPU s/100k':>10} {'vs a':>6} {'vs nginx':>8}  statuses")
    pair = {"b": "e", "c": "f", "d": "g"}
    for label, r in results:
        k = label[0]
        vs_ngx = ""
        if k in pair and pair[k] in ngx:
            vs_ngx = f"{r['rps'] / ngx[pair[k]]['rps']:.2f}"
        codes = ",".join(f"{c}:{n}" for c, n in sorted(r["codes"].items()))
        # CPU seconds per 100k requests = microseconds per request / 10.
        print(f"{label:42} {r['rps']:9.0f} {r['p50']:7.2f} {r['p99']:7.2f} {r['cpu_us'] / 10:10.2f} "
              f"{r['rps'] / base:6.2f} {vs_ngx:>8}  {codes}")
    c, b = ngx.get("c"), ngx.get("b")
    if c and b:
        print(f"\n(c)/(b) throughput: {c['rps'] / b['rps']:.3f}  (target >= 0.9)")
    for t, n in [("b", "e"), ("c", "f"), ("d", "g")]:
        if t in ngx and n in ngx:
            print(f"tollgate ({t}) / nginx ({n}): CPU per request {ngx[t]['cpu_us'] / ngx[n]['cpu_us']:.2f}, "
                  f"req/s {ngx[t]['rps'] / ngx[n]['rps']:.2f}, p99 {ngx[t]['p99'] / max(ngx[n]['p99'], 1e-9):.2f}")
    for t in "bcdefg":
        if t in ngx:
            print(f"({t}) / direct (a): req/s {ngx[t]['rps'] / base:.2f}, "
                  f"CPU per request {ngx[t]['cpu_us'] / max(results[0][1]['cpu_us'], 1e-9):.2f}")


if __name__ == "__main__":
    main()
