#!/usr/bin/env python3
"""TLS side by side on loopback: Tollgate and nginx terminating TLS with the same ECDSA P-256
certificate, one worker each, proxying to the same backend (nginx answering 200 ok).

Scenarios, each for SECS seconds with CONNS connections of wrk (OpenSSL; no session
resumption: every new connection is a full handshake):
  handshakes  one request per connection ("Connection: close"): new TLS 1.3 handshakes per
              second and the server's CPU per handshake (the one request included)
  keep-alive  requests on kept-alive TLS connections: req/s and CPU per request
  plaintext   the same over plain HTTP, for the TLS cost per request in the same run
CPU is utime+stime of the server's processes from /proc over the run. Traffic only to
127.0.0.1; every scenario is bounded in time. Usage: bench/tls.py [seconds] [connections]
"""
import os, re, subprocess, sys

sys.argv = sys.argv[:1] + sys.argv[1:3]
from common import certificate, free_port, tollgate_tls_conf
from loadtest import TMP, children, cpu_seconds, nginx, stop, tollgate, wait_port

SECS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
CONNS = int(sys.argv[2]) if len(sys.argv) > 2 else 50


def wrk(url, pids, close):
    def cmd(secs):
        a = ["wrk", "-t", "2", "-c", str(CONNS), "-d", f"{secs}s", "--latency"]
        return a + (["-H", "Connection: close"] if close else [])
    # Warm-up.
    subprocess.run(cmd(1) + [url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    args = cmd(SECS)
    c0 = cpu_seconds(pids)
    out = subprocess.run(args + [url], capture_output=True, text=True).stdout
    c1 = cpu_seconds(pids)
    n = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Socket errors: (.*)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 0.001, "ms": 1, "s": 1000}
    return {
        "rps": n / SECS,
        "n": n,
        "cpu_us": (c1 - c0) / max(n, 1) * 1e6,
        "p99": float(p99.group(1)) * scale[p99.group(2)] if p99 else 0.0,
        "errors": (errors.group(1) if errors else "") + (f" non2xx {non2xx.group(1)}" if non2xx else ""),
    }


def main():
    cert, key = certificate(TMP)
    be = free_port()
    backend = nginx("backend", f"""
  server {{ listen 127.0.0.1:{be}; location / {{ return 200 "ok\\n"; }} }}""")
    assert wait_port(be), "backend did not start"
    rows = []
    try:
        # Tollgate: one thread, TLS and plaintext listeners, no limits.
        tp, tt = free_port(), free_port()
        tg = tollgate("tg-tls", tollgate_tls_conf(tp, tt, be, cert, key))
        assert wait_port(tt), "tollgate did not start"
        # nginx: one worker, the same certificate, TLS 1.2/1.3, h2, sessions neither cached nor
        # ticketed (wrk would not resume anyway), keep-alive to the backend.
        np_, nt = free_port(), free_port()
        ngx = nginx("ngx-tls", f"""
  upstream be {{ server 127.0.0.1:{be}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{np_};
    listen 127.0.0.1:{nt} ssl http2;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    location / {{
      proxy_pass http://be;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}""")
        assert wait_port(nt), "nginx did not start"
        tg_pids, ngx_pids = [tg.pid], children(ngx.pid)
        for name, url_t, url_n, close in [
            ("handshakes (new TLS 1.3 connection per request)", f"https://127.0.0.1:{tt}/b", f"https://127.0.0.1:{nt}/b", True),
            ("keep-alive requests over TLS", f"https://127.0.0.1:{tt}/b", f"https://127.0.0.1:{nt}/b", False),
            ("keep-alive requests, plaintext", f"http://127.0.0.1:{tp}/b", f"http://127.0.0.1:{np_}/b", False),
        ]:
            rows.append((name, wrk(url_t, tg_pids, close), wrk(url_n, ngx_pids, close)))
        stop(tg)
        stop(ngx)
    finally:
        stop(backend)

    print(f"\n{SECS}s per scenario, {CONNS} connections (wrk -t2), one worker each, ECDSA P-256, loopback\n")
    print(f"{'scenario':50} {'server':9} {'per s':>8} {'CPU us':>8} {'p99 ms':>7}  errors")
    for name, t, n in rows:
        for who, r in [("tollgate", t), ("nginx", n)]:
            print(f"{name:50} {who:9} {r['rps']:8.0f} {r['cpu_us']:8.1f} {r['p99']:7.2f}  {r['errors']}")
    print()
    for name, t, n in rows:
        print(f"{name:50} tollgate/nginx CPU per unit {t['cpu_us'] / n['cpu_us']:.2f}, rate {t['rps'] / n['rps']:.2f}")
    tls_t, tls_n = rows[1][1]["cpu_us"], rows[1][2]["cpu_us"]
    pl_t, pl_n = rows[2][1]["cpu_us"], rows[2][2]["cpu_us"]
    print(f"\nTLS cost per kept-alive request: tollgate +{tls_t - pl_t:.1f} us, nginx +{tls_n - pl_n:.1f} us")
    print(f"ratio to nginx per request: plaintext {pl_t / pl_n:.2f}, TLS {tls_t / tls_n:.2f}")


if __name__ == "__main__":
    main()
