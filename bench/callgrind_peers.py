#!/usr/bin/env python3
"""Instructions (valgrind callgrind, Ir) per plaintext kept-alive request for Tollgate, nginx,
HAProxy and Caddy as the reverse proxy, one worker each, all in front of the same backend
(nginx answering 200 "ok\\n", not under valgrind). The method is bench/callgrind_tls.py's,
whose helpers this script reuses: each proxy runs under callgrind for the whole session; per
scenario it is warmed up, the counters are zeroed (callgrind_control -z), N1 requests are sent
and the counters dumped (callgrind_control -d), then the same for N2; one request costs
(Ir(N2) - Ir(N1)) / (N2 - N1), which cancels what a batch costs whatever its size.

Scenarios, each on CONNS kept-alive connections, round robin, one request at a time:
  allowed  GET /a: proxied, no limit
  limited  GET /l (Tollgate only): behind a per-client-address limit that never refuses:
           the cost of a limit on an allowed request
  denied   GET /d: behind a per-client-address limit of DENY_RATE per second (default 1/s,
           burst 1: nearly every request is refused with 429 at the proxy; the admitted count
           is printed). Tollgate: leaky bucket; nginx: limit_req; HAProxy: the stick-table
           counter of admitted requests (see bench/loadtest.py). Caddy has no limiter in
           Debian's build and runs the allowed scenario only. Bare Pingora answers /d with
           a bodiless 429 head on the kept-alive connection, no limiter: the framework's
           floor for a refusal.
One process per proxy serves every path (the refusing limit is on /d; Tollgate's /l has one
that never refuses). Caddy is a Go program: GOMAXPROCS=1; valgrind serialises its threads
anyway.

Traffic only to 127.0.0.1; every loop is bounded in count and time; every process started is
stopped (SIGINT, then SIGKILL) on the way out.

Usage: bench/callgrind_peers.py [tollgate-binary]   (default: target/release/tollgate)
With EDGE=1 Tollgate is also measured on routes with issue 28's edge features, each against a
route with none at all: /n (max_body_bytes = 0: no body cap either), /h (one request and one
response header rule), /r (an upstream with balance = "least_request" and retry).
With AUTH=1 Tollgate is also measured on routes that require authentication, each request
carrying its credentials: /j (auth = { jwt = "required" }, an HS256 token: after the first
request, a cached verification) and /b (auth = { basic = ... }, a bcrypt hash made by htpasswd:
bcrypt once per credential, then cached); each is reported against the allowed route.

With TRACING=RATIO Tollgate runs with [tracing] sample = RATIO, exporting to the backend (which
answers every POST 200, so exports succeed and their cost is counted with the requests').

With ROUTES=N Tollgate's config holds N more routes (on N/3 hosts no request names, each
with an exact path, a prefix and a regex) before the measured ones: a request's cost against
the route count (issue 40).

With REQ=browser every request carries seven more fields, as a browser's or an API client's.

Environment: KA=2000,6000  CONNS=2  DENY_RATE=1  PROXIES=tollgate,bare,nginx,haproxy,caddy  AUTH=0  EDGE=0  TRACING=  REQ=
             BARE=path of bench/bare-pingora's binary (default target/release/bare-pingora)
             KEEP=dir-to-keep-outputs
"""
import os, shutil, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import callgrind_tls as cg  # noqa: E402  (start, stop, nginx_conf, callgrind, control, dump, ...)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TG = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "target/release/tollgate")
KA = [int(x) for x in os.environ.get("KA", "2000,6000").split(",")]
CONNS = int(os.environ.get("CONNS", "2"))
DENY_RATE = int(os.environ.get("DENY_RATE", "1"))
PROXIES = os.environ.get("PROXIES", "tollgate,bare,nginx,haproxy,caddy").split(",")
AUTH = os.environ.get("AUTH", "0") == "1"
EDGE = os.environ.get("EDGE", "0") == "1"
TRACING = os.environ.get("TRACING", "")
# ROUTES=N: N more routes before the measured ones, on N/3 hosts the requests never name
# (each host: an exact path, a prefix and a regex), as a cluster's Ingresses give them.
ROUTES = int(os.environ.get("ROUTES", "0"))
# REQ=browser: every request also carries the fields a browser or an API client sends (7 more
# than Host), for costs that depend on the head's size (a proxy's header maps).
BROWSER = ("User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36\r\n"
           "Accept: application/json, text/plain, */*\r\nAccept-Encoding: gzip, deflate, br\r\n"
           "Accept-Language: en-GB,en;q=0.9\r\nReferer: https://app.example.com/orders\r\n"
           "Cookie: session=0123456789abcdef; theme=dark\r\nCache-Control: no-cache\r\n")
REQ_EXTRA = BROWSER if os.environ.get("REQ", "") == "browser" else ""
JWT_SECRET = "callgrind-secret-of-32-bytes-or-more"


def hs256(claims):
    import base64, hashlib, hmac, json
    b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    sig = hmac.new(JWT_SECRET.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


# The credentials each scenario's requests carry.
HEADERS = {
    "jwt": f"Authorization: Bearer {hs256({'sub': 'bench', 'exp': int(time.time()) + 86400})}\r\n",
    "basic": "Authorization: Basic YmVuY2g6YmVuY2gtcGFzcw==\r\n",   # bench:bench-pass
}
PHASE_LIMIT = 900   # seconds: no single load phase runs longer than this
SETTLE = 1.0        # seconds between the last response and a dump
TMP = os.environ.get("KEEP") or tempfile.mkdtemp(prefix="callgrind-peers-")
os.makedirs(TMP, exist_ok=True)
cg.TMP = TMP        # the reused helpers write their logs and outputs here


class KeepAlive:
    """CONNS kept-alive plaintext connections sending GET path round robin, one at a time."""

    def __init__(self, port, path, conns, headers=""):
        self.port, self.reconnects = port, 0
        self.req = f"GET {path} HTTP/1.1\r\nHost: bench\r\n{REQ_EXTRA}{headers}\r\n".encode()
        self.socks = [cg.connect(port, None) for _ in range(conns)]
        self.files = [s.makefile("rb") for s in self.socks]

    def run(self, n):
        """n requests; returns how many were answered with something other than 200."""
        bad, end = 0, time.time() + PHASE_LIMIT
        for i in range(n):
            if time.time() > end:
                raise RuntimeError(f"phase over {PHASE_LIMIT}s after {i} requests")
            j = i % len(self.socks)
            self.socks[j].sendall(self.req)
            code, keep = cg.read_response(self.files[j])
            bad += code != 200
            if not keep:    # a proxy closing after a 429 would show here; counted and reported
                self.reconnects += 1
                self.files[j].close()
                self.socks[j].close()
                self.socks[j] = cg.connect(self.port, None)
                self.files[j] = self.socks[j].makefile("rb")
        return bad

    def close(self):
        for f, s in zip(self.files, self.socks):
            f.close()
            s.close()


def measure(name, proc, out, port, scenarios):
    pid = proc.pid
    res = {}
    cg.control(pid, "-z")
    time.sleep(5)
    _, idle = cg.dump(pid, out)
    res["idle_per_s"] = idle / 5
    print(f"  {name:8} idle      {idle / 5:,.0f} Ir/s", flush=True)
    for key, path in scenarios:
        ka = KeepAlive(port, path, CONNS, HEADERS.get(key, ""))
        ka.run(200)                                 # warm-up; the connections stay open
        runs = []
        for n in KA:
            cg.control(pid, "-z")
            t0 = time.time()
            bad = ka.run(n)
            secs = time.time() - t0
            time.sleep(SETTLE)
            _, ir = cg.dump(pid, out)
            runs.append((ir, secs, bad))
            print(f"  {name:8} {key:8} n={n:5}  Ir={ir:>14,}  {secs:6.1f}s  non-200 {bad}", flush=True)
        res[key] = runs
        res[key + "-reconnects"] = ka.reconnects
        ka.close()
    return res


def per_request(runs):
    (ir1, s1, b1), (ir2, s2, b2) = runs
    n1, n2 = KA
    return (ir2 - ir1) / (n2 - n1), s2 - s1, (n1 - b1, n2 - b2)


def tollgate_conf(port, be):
    conf = os.path.join(TMP, "tollgate.toml")
    # The leaky bucket with capacity and delay = burst + 1: nginx's burst=N nodelay (loadtest.py).
    auth = ""
    if AUTH:
        users = os.path.join(TMP, "users.htpasswd")
        import subprocess
        subprocess.run(["htpasswd", "-cbB", users, "bench", "bench-pass"], check=True,
                       capture_output=True)
        auth = f"""[jwt]
secret = "{JWT_SECRET}"
algorithms = ["HS256"]
[[routes]]
name = "jwt"
path_prefix = "/j"
upstream = "be"
auth = {{ jwt = "required" }}
[[routes]]
name = "basic"
path_prefix = "/b"
upstream = "be"
auth = {{ basic = {{ htpasswd = "{users}" }} }}
"""
    edge = ""
    if EDGE:
        edge = f"""[upstreams.be_lr]
targets = ["127.0.0.1:{be}"]
health_check = false
balance = "least_request"
retry = {{ attempts = 1, on = ["connect", "503"] }}
[[routes]]
name = "nocap"
path_prefix = "/n"
upstream = "be"
max_body_bytes = 0
[[routes]]
name = "headers"
path_prefix = "/h"
upstream = "be"
request_headers = {{ set = {{ "X-Env" = "prod" }} }}
response_headers = {{ set = {{ "X-Frame-Options" = "DENY" }} }}
[[routes]]
name = "balanced"
path_prefix = "/r"
upstream = "be_lr"
"""
    tracing = f"""[tracing]
otlp = "http://127.0.0.1:{be}"
sample = {TRACING}
""" if TRACING else ""
    many = "".join(
        f"""[[routes]]
name = "h{i}"
host = "h{i // 3}.cluster.test"
{('path_exact = "/x"', 'path_prefix = "/api"', 'path_regex = "/v[0-9]+/"')[i % 3]}
upstream = "be"
""" for i in range(ROUTES))
    open(conf, "w").write(f"""[server]
listen = ["127.0.0.1:{port}"]
threads = 1
{tracing}{auth}{edge}{many}[upstreams.be]
targets = ["127.0.0.1:{be}"]
health_check = false
[[routes]]
name = "denied"
path_prefix = "/d"
upstream = "be"
limits = ["per_ip"]
[[routes]]
name = "limited"
path_prefix = "/l"
upstream = "be"
limits = ["never"]
[[routes]]
name = "allowed"
path_prefix = "/"
upstream = "be"
[limits.never]
key = "client_ip"
rate = "1000000/s"
burst = 1000000
[limits.per_ip]
key = "client_ip"
algorithm = "leaky_bucket"
rate = "{DENY_RATE}/s"
burst = 2
delay = 2
""")
    return [TG, "run", "--config", conf]


def nginx_cmd(port, be):
    return cg.nginx_conf("ngx-peers", f"""
  limit_req_zone $binary_remote_addr zone=ip:10m rate={DENY_RATE}r/s;
  upstream be {{ server 127.0.0.1:{be}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    location /d {{
      limit_req zone=ip burst=1 nodelay;
      limit_req_status 429;
      proxy_pass http://be;
    }}
    location / {{ proxy_pass http://be; }}
  }}""", True)


def haproxy_cmd(port, be):
    conf = os.path.join(TMP, "haproxy.cfg")
    open(conf, "w").write(f"""global
  nbthread 1
  maxconn 1024
defaults
  mode http
  timeout connect 60s
  timeout client 120s
  timeout server 120s
  option http-keep-alive
  http-reuse always
frontend fe
  bind 127.0.0.1:{port}
  acl lim path_beg /d
  stick-table type ip size 100k expire 10s store gpc0_rate(1s)
  http-request track-sc0 src if lim
  http-request deny deny_status 429 if lim {{ sc_gpc0_rate(0) ge {DENY_RATE} }}
  http-request sc-inc-gpc0(0) if lim
  default_backend be
backend be
  server s1 127.0.0.1:{be}
""")
    return ["haproxy", "-db", "-f", conf]


def caddy_cmd(port, be):
    d = os.path.join(TMP, "caddy")
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "Caddyfile")
    open(conf, "w").write(f"""{{
  admin off
  auto_https off
}}
:{port} {{
  bind 127.0.0.1
  reverse_proxy 127.0.0.1:{be}
}}
""")
    # asyncpreemptoff: Go preempts goroutines with SIGURG, which trips callgrind (3.19) in
    # vgCallgrind_post_signal; without it the Go runtime only preempts at function calls.
    os.environ.update(XDG_DATA_HOME=d, XDG_CONFIG_HOME=d, GOMAXPROCS="1", GODEBUG="asyncpreemptoff=1")
    return ["caddy", "run", "--config", conf, "--adapter", "caddyfile"]


BARE = os.environ.get("BARE") or os.path.join(ROOT, "target/release/bare-pingora")


def bare_cmd(port, be):
    # Pingora's proxy with nothing of Tollgate's: the floor (bench/bare-pingora); /d is
    # answered with a bodiless 429 head, connection kept (no limiter: the refusal floor).
    return [BARE, f"127.0.0.1:{port}", f"127.0.0.1:{be}", "/d"]


def main():
    print(f"outputs in {TMP}; tollgate {TG}; KA={KA} CONNS={CONNS} DENY_RATE={DENY_RATE}/s",
          flush=True)
    both = [("allowed", "/a"), ("denied", "/d")]
    tg_scenarios = both + [("limited", "/l")] + ([("jwt", "/j"), ("basic", "/b")] if AUTH else []) \
        + ([("nocap", "/n"), ("headers", "/h"), ("balanced", "/r")] if EDGE else [])
    plan = {"tollgate": (tollgate_conf, tg_scenarios), "nginx": (nginx_cmd, both),
            "haproxy": (haproxy_cmd, both), "caddy": (caddy_cmd, [("allowed", "/a")]),
            "bare": (bare_cmd, both)}
    results, failed = {}, {}
    try:
        be = cg.free_port()
        backend = cg.start("backend", cg.nginx_conf("backend", f"""
  server {{ listen 127.0.0.1:{be}; location / {{ return 200 "ok\\n"; }} }}""", False))
        assert cg.wait_port(be, backend, 20), "backend did not start"
        for name in PROXIES:
            make, scenarios = plan[name]
            if name == "bare" and not os.path.exists(BARE):
                failed[name] = f"{BARE} not built (cargo build --release -p bare-pingora)"
                continue
            if name not in ("tollgate", "bare") and not shutil.which(name):
                failed[name] = "not installed"
                continue
            port = cg.free_port()
            proc, out = cg.callgrind(name, make(port, be))
            try:
                if not cg.wait_port(port, proc):
                    failed[name] = f"did not start under valgrind (see {TMP}/{name}.log)"
                    continue
                results[name] = measure(name, proc, out, port, scenarios)
            except Exception as e:          # noqa: BLE001  (reported, the others still run)
                failed[name] = f"{type(e).__name__}: {e}"
            finally:
                cg.stop(proc)
    finally:
        for p in reversed(cg.PROCS):
            cg.stop(p)

    print(f"\nInstructions (Ir) per plaintext kept-alive request, (Ir(N2) - Ir(N1)) / (N2 - N1), "
          f"N = {KA[0]:,}/{KA[1]:,}, {CONNS} connections; one worker each, loopback\n")
    print(f"{'':9} {'allowed':>10} {'vs nginx':>9} {'denied':>10} {'vs nginx':>9}  admitted (N1/N2, denied)  idle Ir/s")
    ngx = results.get("nginx", {})
    for name in PROXIES:
        if name not in results:
            continue
        r, cells = results[name], []
        for key in ("allowed", "denied"):
            if key in r:
                ir, _, adm = per_request(r[key])
                base = per_request(ngx[key])[0] if key in ngx else None
                cells += [f"{ir:10,.0f}", f"{ir / base:9.2f}" if base else f"{'':9}"]
                if key == "denied":
                    cells.append(f"{adm[0]}/{adm[1]}")
            else:
                cells += [f"{'-':>10}", f"{'':9}"]
        while len(cells) < 5:
            cells.append("")
        print(f"{name:9} {' '.join(cells[:4])}  {cells[4]:24}  {r['idle_per_s']:,.0f}")
    tg, bare = results.get("tollgate", {}), results.get("bare", {})
    for key in ("allowed", "denied"):
        if key in tg and key in bare:
            t, b = per_request(tg[key])[0], per_request(bare[key])[0]
            print(f"tollgate over bare Pingora, {key}: +{t - b:,.0f} Ir ({t / b - 1:+.1%})")
    if "limited" in tg and "allowed" in tg:
        t, a = per_request(tg["limited"])[0], per_request(tg["allowed"])[0]
        print(f"tollgate, a per-IP limit that never refuses: {t:,.0f} Ir, +{t - a:,.0f} "
              f"({t / a - 1:+.1%}) over no limit")
    for key, what in (("jwt", "a required JWT (HS256, verified once, then cached)"),
                      ("basic", "basic auth (bcrypt once per credential, then cached)")):
        if key in tg and "allowed" in tg:
            t, a = per_request(tg[key])[0], per_request(tg["allowed"])[0]
            print(f"tollgate, {what}: {t:,.0f} Ir, +{t - a:,.0f} ({t / a - 1:+.1%}) over no auth")
    for key, what in (("nocap", "a route with no body cap (max_body_bytes = 0)"),
                      ("headers", "one request and one response header rule"),
                      ("balanced", "least_request with retry")):
        if key in tg and "allowed" in tg:
            t, a = per_request(tg[key])[0], per_request(tg["allowed"])[0]
            print(f"tollgate, {what}: {t:,.0f} Ir, {t - a:+,.0f} ({t / a - 1:+.1%}) vs the allowed route")
    for name in PROXIES:
        if name in results:
            for key in ("allowed", "limited", "denied", "jwt", "basic", "nocap", "headers", "balanced"):
                if key in results[name]:
                    _, dsecs, _ = per_request(results[name][key])
                    bound = dsecs * results[name]["idle_per_s"] / (KA[1] - KA[0])
                    print(f"  {name} {key}: idle-rate upper bound {bound:,.0f} Ir per request, "
                          f"reconnects {results[name][key + '-reconnects']}")
    for name, why in failed.items():
        print(f"{name}: left out: {why}")
    print(f"\noutputs in {TMP}")


if __name__ == "__main__":
    main()
