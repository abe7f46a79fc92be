#!/usr/bin/env python3
"""HTTP/2 side by side on loopback: Tollgate, nginx and HAProxy terminating TLS with the same
ECDSA P-256 certificate and ALPN h2, one worker each, proxying over HTTP/1.1 kept-alive
connections to the same backend (nginx answering 200 "ok\\n", not measured).

The client is oha, the load tester Tollgate's users compare with (`make oha`): `oha --http2
-c C -p P -n N --insecure`, C connections each carrying P concurrent streams. Per proxy the
run is warmed up first (a tenth of N), then measured: requests per second, p99 latency, the
status mix, and the proxy's CPU time per request (utime+stime of its processes and threads
from /proc over the run), with each figure as a ratio to nginx in the same run. Scenarios:
  h2 streams   GET / over h2, oha -c C -p P
  h1 keep-alive  the same over HTTP/1.1 on TLS (oha without --http2, C*P connections), for
               the h2 share of the cost in the same run
Traffic only to 127.0.0.1; every run is bounded by its request count and oha's own timeout.

Usage: bench/h2_peers.py [requests] [connections] [streams]   (defaults 40000 4 8)
Environment: TOLLGATE=binary (default target/release/tollgate), OHA=binary (default
target/oha/bin/oha), RUNS=1 (repeat every measurement; each run's figures are printed).
"""
import json, os, shutil, subprocess, sys

N = int(sys.argv[1]) if len(sys.argv) > 1 else 40000
C = int(sys.argv[2]) if len(sys.argv) > 2 else 4
P = int(sys.argv[3]) if len(sys.argv) > 3 else 8
sys.argv = sys.argv[:1]
from common import certificate, free_port, haproxy_h2_proxy, nginx_h2_proxy, tls_pem, tollgate_tls_conf  # noqa: E402
from loadtest import ROOT, TMP, children, cpu_seconds, haproxy, nginx, stop, tollgate, wait_port  # noqa: E402

OHA = os.environ.get("OHA") or os.path.join(ROOT, "target/oha/bin/oha")
RUNS = int(os.environ.get("RUNS", "1"))


def oha(url, pids, h2, n):
    args = [OHA, "-n", str(n), "--insecure", "--no-tui", "--output-format", "json", "-t", "10s"]
    args += ["--http2", "-c", str(C), "-p", str(P)] if h2 else ["-c", str(C * P)]
    c0 = cpu_seconds(pids)
    out = subprocess.run(args + [url], capture_output=True, text=True, timeout=300)
    c1 = cpu_seconds(pids)
    r = json.loads(out.stdout)
    codes = r.get("statusCodeDistribution", {})
    done = sum(codes.values())
    return {
        "rps": r["summary"]["requestsPerSec"],
        "n": done,
        "ok": codes.get("200", 0),
        "errors": sum(r.get("errorDistribution", {}).values()),
        "p99": (r["latencyPercentiles"]["p99"] or 0) * 1000,
        "cpu_us": (c1 - c0) / max(done, 1) * 1e6,
    }


def main():
    if not os.path.exists(OHA):
        sys.exit(f"{OHA} missing: run `make oha`")
    have_hap = shutil.which("haproxy") is not None
    cert, key = certificate(TMP)
    pem = tls_pem(TMP, cert, key)
    be = free_port()
    backend = nginx("backend", f"""
  server {{ listen 127.0.0.1:{be}; location / {{ return 200 "ok\\n"; }} }}""")
    assert wait_port(be), "backend did not start"
    procs, rows = [], []
    try:
        tp, tt = free_port(), free_port()
        tg = tollgate("tg-h2", tollgate_tls_conf(tp, tt, be, cert, key))
        procs.append(tg)
        assert wait_port(tt), "tollgate did not start"
        nt = free_port()
        ngx = nginx("ngx-h2", nginx_h2_proxy(nt, be, cert, key))
        procs.append(ngx)
        assert wait_port(nt), "nginx did not start"
        peers = [("tollgate", tt, [tg.pid]), ("nginx", nt, children(ngx.pid))]
        if have_hap:
            ht = free_port()
            hap = haproxy("hap-h2", haproxy_h2_proxy(ht, be, pem))
            procs.append(hap)
            assert wait_port(ht), "haproxy did not start"
            peers.append(("haproxy", ht, [hap.pid]))
        for run in range(RUNS):
            for scen, h2 in [("h2 streams", True), ("h1 keep-alive", False)]:
                for who, port, pids in peers:
                    url = f"https://127.0.0.1:{port}/"
                    oha(url, pids, h2, max(N // 10, 100))  # warm-up
                    rows.append((run, scen, who, oha(url, pids, h2, N)))
    finally:
        for p in procs:
            stop(p)
        stop(backend)

    print(f"\noha, {N} requests per run; h2: -c {C} -p {P}; h1: -c {C * P}; TLS 1.3, one worker each, loopback")
    if not have_hap:
        print("haproxy not installed: skipped")
    print(f"\n{'run':>3} {'scenario':14} {'proxy':9} {'req/s':>8} {'CPU us/req':>10} {'vs nginx':>8} {'p99 ms':>7}  200s / errors")
    for run, scen, who, r in rows:
        base = next(x for (rr, s, w, x) in rows if rr == run and s == scen and w == "nginx")
        print(f"{run:3} {scen:14} {who:9} {r['rps']:8.0f} {r['cpu_us']:10.1f} {r['cpu_us'] / base['cpu_us']:8.2f} "
              f"{r['p99']:7.2f}  {r['ok']}/{r['n']} / {r['errors']}")


if __name__ == "__main__":
    main()
