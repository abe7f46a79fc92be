#!/usr/bin/env python3
"""Instructions (valgrind callgrind, Ir) per HTTP/2 stream for Tollgate, nginx and HAProxy
terminating TLS with ALPN h2, one worker each, the same ECDSA P-256 certificate, proxying over
HTTP/1.1 to the same backend nginx answering 200 "ok\\n" (the backend is not under valgrind).

bench/callgrind_tls.py's method: each proxy runs under callgrind for the whole session; oha
(`make oha`) warms it up on its connections, the counters are zeroed, N1 requests are sent
(`oha --http2 -c C -p P -n N1`: C connections, P streams in flight on each) and the counters
dumped, then the same for N2; one stream costs (Ir(N2) - Ir(N1)) / (N2 - N1). Each batch opens
its C connections (C TLS handshakes per batch: the difference cancels them). The figure
includes TLS record encryption for every proxy alike.

Traffic only to 127.0.0.1; every batch is bounded by its count and oha's timeout; every process
started is stopped on the way out.

Usage: bench/callgrind_h2.py [tollgate-binary]   (default: target/release/tollgate)
Environment: KA=2000,6000  C=1  P=8  PROXIES=tollgate,nginx,haproxy  KEEP=dir
"""
import os, shutil, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import callgrind_tls as cg  # noqa: E402
from common import haproxy_h2_proxy, nginx_h2_proxy, tls_pem  # noqa: E402

ROOT = cg.ROOT
TG = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "target/release/tollgate")
OHA = os.environ.get("OHA") or os.path.join(ROOT, "target/oha/bin/oha")
KA = [int(x) for x in os.environ.get("KA", "2000,6000").split(",")]
C = int(os.environ.get("C", "1"))
P = int(os.environ.get("P", "8"))
PROXIES = os.environ.get("PROXIES", "tollgate,nginx,haproxy").split(",")


def oha(port, n):
    r = subprocess.run([OHA, "-n", str(n), "--http2", "-c", str(C), "-p", str(P), "--insecure",
                        "--no-tui", "-t", "60s", f"https://127.0.0.1:{port}/b"],
                       capture_output=True, text=True, timeout=cg.PHASE_LIMIT)
    ok = [line for line in r.stdout.splitlines() if line.strip().startswith("[200]")]
    return ok[0].split()[1] if ok else "0"


def measure(name, proc, out, port):
    oha(port, 200)  # warm-up: code paths, the allocator, the upstream pool
    irs = []
    for n in KA:
        cg.control(proc.pid, "-z")
        got = oha(port, n)
        irs.append(cg.dump(proc.pid, out)[1])
        print(f"  {name:9} n={n:6} Ir={irs[-1]:>14,}  200s {got}", flush=True)
    return (irs[1] - irs[0]) / (KA[1] - KA[0])


def main():
    assert os.path.exists(OHA), f"{OHA} missing: run `make oha`"
    print(f"outputs in {cg.TMP}; tollgate {TG}; KA={KA} C={C} P={P}", flush=True)
    cert, key = cg.certificate(cg.TMP)
    pem = tls_pem(cg.TMP, cert, key)
    res = {}
    try:
        be = cg.free_port()
        backend = cg.start("backend", cg.nginx_conf("backend", f"""
  server {{ listen 127.0.0.1:{be}; location / {{ return 200 "ok\\n"; }} }}""", False))
        assert cg.wait_port(be, backend, 20), "backend did not start"
        if "tollgate" in PROXIES:
            tp, tt = cg.free_port(), cg.free_port()
            conf = os.path.join(cg.TMP, "tollgate.toml")
            open(conf, "w").write(cg.tollgate_tls_conf(tp, tt, be, cert, key))
            p, out = cg.callgrind("tollgate", [TG, "run", "--config", conf])
            assert cg.wait_port(tt, p), "tollgate did not start"
            res["tollgate"] = measure("tollgate", p, out, tt)
            cg.stop(p)
        if "nginx" in PROXIES:
            nt = cg.free_port()
            p, out = cg.callgrind("nginx", cg.nginx_conf("ngx-h2", nginx_h2_proxy(nt, be, cert, key), True))
            assert cg.wait_port(nt, p), "nginx did not start"
            res["nginx"] = measure("nginx", p, out, nt)
            cg.stop(p)
        if "haproxy" in PROXIES and shutil.which("haproxy"):
            ht = cg.free_port()
            cfg = os.path.join(cg.TMP, "haproxy.cfg")
            open(cfg, "w").write(f"""global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
  http-reuse always
{haproxy_h2_proxy(ht, be, pem)}""")
            p, out = cg.callgrind("haproxy", ["haproxy", "-db", "-f", cfg])
            assert cg.wait_port(ht, p), "haproxy did not start"
            res["haproxy"] = measure("haproxy", p, out, ht)
            cg.stop(p)
    finally:
        for p in reversed(cg.PROCS):
            cg.stop(p)
    base = res.get("nginx")
    print(f"\nInstructions (Ir) per HTTP/2 stream over TLS, oha --http2 -c {C} -p {P}, "
          f"(Ir(N2) - Ir(N1)) / (N2 - N1), N = {KA[0]:,}/{KA[1]:,}; one worker each, loopback\n")
    for who, ir in res.items():
        ratio = f"{ir / base:5.2f}x nginx" if base else ""
        print(f"  {who:9} {ir:10,.0f}  {ratio}")


if __name__ == "__main__":
    main()
