#!/usr/bin/env python3
"""Cluster scale (issue 40): N Ingresses imported, served and reloaded, side by side in one run.

For each N (default 10, 1000, 5000, 20000) it writes N Ingresses as a platform team's cluster
holds them (each its own host, `limit-rps`, two Prefix paths to two Services), then:
- imports them with `tollgate import-ingress` (the median wall time of three, and the
  importer's peak RSS);
- `tollgate check`s the output (wall time);
- points every upstream at one loopback backend (nginx answering 200) (every Service a distinct upstream, one address,
  as 10,000 Services behind one node's pods would be) and serves it, one worker;
- reads the RSS once ready, the CPU the idle process takes over IDLE seconds, and the CPU per
  proxied request with wrk -t1 -c16 to one host (REQS seconds), printed as a ratio to the
  first N of the same run;
- reloads it (SIGHUP after touching a route) and reports the build time the gateway logs
  (`reloaded ... ms`), the peak RSS while both runtimes were alive (VmHWM, reset first), and
  the requests that failed while it reloaded (wrk runs throughout).

Loopback only, bounded in time. Usage: bench/scale.py [BINARY [N ...]]; env IDLE (s, default 5),
REQS (s, default 5). The binary defaults to target/release/tollgate.
"""
import os, re, resource, shutil, signal, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import callgrind_tls as cg  # noqa: E402  (nginx_conf, start, stop, wait_port)
from common import free_port  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "tollgate")
SIZES = [int(a) for a in sys.argv[2:]] or [10, 1000, 5000, 20000]
IDLE = float(os.environ.get("IDLE", "5"))
REQS = float(os.environ.get("REQS", "5"))
TICK = os.sysconf("SC_CLK_TCK")


def ingresses(n):
    out = []
    for i in range(n):
        out.append(f"""apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: app-{i}
  namespace: team-{i % 50}
  creationTimestamp: "2026-01-01T00:00:{i % 60:02d}Z"
  annotations:
    nginx.ingress.kubernetes.io/limit-rps: "1000000"
spec:
  ingressClassName: nginx
  rules:
  - host: app-{i}.example.com
    http:
      paths:
      - path: /api
        pathType: Prefix
        backend:
          service:
            name: api-{i}
            port:
              number: 8080
      - path: /
        pathType: Prefix
        backend:
          service:
            name: web-{i}
            port:
              number: 80
""")
    return "---\n".join(out)


def status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def wrk(port, host, seconds):
    """(requests, non-2xx or socket errors) of wrk -t1 -c16 for `seconds`."""
    r = subprocess.run(["wrk", "-t1", "-c16", f"-d{int(seconds)}s", "-H", f"Host: {host}",
                        f"http://127.0.0.1:{port}/api/x"], capture_output=True, text=True)
    reqs = int(re.search(r"(\d+) requests in", r.stdout).group(1))
    bad = 0
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", r.stdout)
    if m:
        bad += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", r.stdout)
    if m:
        bad += sum(int(x) for x in m.groups())
    return reqs, bad


def one(n, d, backend):
    yaml = os.path.join(d, f"ing-{n}.yaml")
    with open(yaml, "w") as f:
        f.write(ingresses(n))
    toml = os.path.join(d, f"ing-{n}.toml")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # The median of three imports: the first exec of a fresh binary pays its page faults
    # (0.3-0.5 s of system time here), which is the machine's, not the import's.
    times = []
    for _ in range(3):
        t = time.perf_counter()
        r = subprocess.run([BIN, "import-ingress", yaml, "-o", toml], capture_output=True,
                           text=True)
        times.append(time.perf_counter() - t)
        if r.returncode != 0:
            raise SystemExit(f"import of {n} failed: {r.stderr[-2000:]}")
    imp = sorted(times)[1]
    imp_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    imp_rss = imp_rss if imp_rss > before else None
    text = open(toml).read()
    port, admin = free_port(), free_port()
    text = re.sub(r'targets = \[[^\]]*\]', f'targets = ["127.0.0.1:{backend}"]', text)
    text = re.sub(r'listen = \[[^\]]*\]', f'listen = ["127.0.0.1:{port}"]', text)
    text = re.sub(r'admin = "[^"]*"', f'admin = "127.0.0.1:{admin}"', text)
    if "[server]" not in text:
        text = f'[server]\nlisten = ["127.0.0.1:{port}"]\nadmin = "127.0.0.1:{admin}"\n' + text
    text = text.replace("[server]\n", "[server]\nthreads = 1\n", 1)
    with open(toml, "w") as f:
        f.write(text)
    routes = text.count("[[routes]]")
    upstreams = len(re.findall(r"^\[upstreams\.", text, re.M))
    t = time.perf_counter()
    r = subprocess.run([BIN, "check", toml], capture_output=True, text=True)
    chk = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"check of {n} failed: {r.stderr[-2000:]}")
    log = open(os.path.join(d, f"tollgate-{n}.log"), "w")
    p = subprocess.Popen([BIN, "run", "--config", toml], stdout=log, stderr=subprocess.STDOUT)
    try:
        host = f"app-{n // 2}.example.com"
        deadline = time.time() + 120
        while True:
            try:
                out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                      "-H", f"Host: {host}", f"http://127.0.0.1:{port}/api/x"],
                                     capture_output=True, text=True, timeout=5).stdout
                if out == "200":
                    break
            except subprocess.TimeoutExpired:
                pass
            if time.time() > deadline or p.poll() is not None:
                raise SystemExit(f"N={n}: not serving (see {log.name})")
            time.sleep(0.2)
        time.sleep(1)
        rss = status(p.pid, "VmRSS")
        c0 = cpu(p.pid)
        time.sleep(IDLE)
        idle = (cpu(p.pid) - c0) / IDLE
        c0 = cpu(p.pid)
        reqs, bad = wrk(port, host, REQS)
        per_req = (cpu(p.pid) - c0) / max(reqs, 1)
        # Reload with traffic throughout: one route's path changes, the rest is reused.
        with open(toml) as f:
            text = f.read()
        with open(toml, "w") as f:
            f.write(text.replace('path_prefix = "/api/"', 'path_prefix = "/api2/"', 1))
        with open(f"/proc/{p.pid}/clear_refs", "w") as f:
            f.write("5")
        base = status(p.pid, "VmRSS")
        result = {}
        w = threading.Thread(target=lambda: result.update(zip(("reqs", "bad"), wrk(port, host, 4))))
        w.start()
        time.sleep(1)
        os.kill(p.pid, signal.SIGHUP)
        w.join()
        log.flush()
        ms = None
        for line in open(log.name):
            if '"reloaded"' in line or "config reloaded" in line:
                m = re.search(r'"?ms"?[=:]\s*([0-9.]+)', line)
                if m:
                    ms = float(m.group(1))
        peak = status(p.pid, "VmHWM")
        return dict(n=n, routes=routes, upstreams=upstreams, imp=imp, imp_rss=imp_rss, chk=chk,
                    rss=rss, idle=idle, per_req=per_req, reqs=reqs, bad=bad, reload_ms=ms,
                    reload_peak=peak - base, reload_bad=result.get("bad"),
                    reload_reqs=result.get("reqs"))
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def main():
    if not shutil.which("wrk"):
        raise SystemExit("needs wrk (apt-get install wrk)")
    backend = free_port()
    ngx = cg.start("backend", cg.nginx_conf("backend", f"""
  server {{ listen 127.0.0.1:{backend}; location / {{ return 200 "ok\\n"; }} }}""", False))
    rows = []
    try:
        assert cg.wait_port(backend, ngx, 20), "the nginx backend did not start"
        with tempfile.TemporaryDirectory() as d:
            for n in SIZES:
                rows.append(one(n, d, backend))
                print(f"N={n}: {rows[-1]}", file=sys.stderr)
    finally:
        cg.stop(ngx)
    first = rows[0]
    print(f"binary: {BIN}")
    print("| Ingresses | routes | upstreams | import s | import MB | check s | RSS MB | idle CPU % "
          f"| CPU/request vs N={first['n']} | reload ms | reload peak +MB | failed during reload |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        imp_mb = f"{r['imp_rss'] / 1024:.0f}" if r["imp_rss"] else "-"
        print(f"| {r['n']:,} | {r['routes']:,} | {r['upstreams']:,} | {r['imp']:.2f} | {imp_mb} "
              f"| {r['chk']:.2f} | {r['rss'] / 1024:.0f} | {r['idle'] * 100:.1f} "
              f"| {r['per_req'] / first['per_req']:.2f}x ({r['per_req'] * 1e6:.0f} µs) "
              f"| {format(r['reload_ms'], '.0f') if r['reload_ms'] is not None else '-'} "
              f"| {r['reload_peak'] / 1024:.0f} | {r['reload_bad']} of {r['reload_reqs']} |")


if __name__ == "__main__":
    main()
