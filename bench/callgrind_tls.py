#!/usr/bin/env python3
"""Instructions (valgrind callgrind, Ir) per TLS handshake and per kept-alive request, Tollgate
and nginx side by side, one worker each, the same ECDSA P-256 certificate, both proxying to the
same backend nginx answering 200 "ok\\n" (the backend is not under valgrind).

Each proxy runs under callgrind for the whole session. For every scenario the script warms up,
zeroes the counters (callgrind_control -z), drives N1 units, dumps (callgrind_control -d), then
zeroes, drives N2 units and dumps again; the cost of one unit is (Ir(N2) - Ir(N1)) / (N2 - N1),
which cancels what a batch costs regardless of its size (the last connection's teardown, timers
that fire once per batch, the settling pause before the dump).

Scenarios (the same Python client, stdlib ssl = OpenSSL, for both servers):
  handshake   a new TLS 1.3 connection (X25519, no session resumption) per request, one
              "GET /b" with "Connection: close", read to EOF; sequential (concurrency 1)
  ka-tls      GETs on CONNS already open, warmed-up TLS connections, round robin, sequential
  ka-plain    the same over plain HTTP
An idle interval is measured as well (Ir per second while no traffic flows), because the
difference method cannot cancel costs that grow with wall time and N2 takes longer than N1.

Traffic only to 127.0.0.1; every loop is bounded in count and time; every process started is
stopped (SIGINT, then SIGKILL) on the way out.

Usage: bench/callgrind_tls.py [tollgate-binary]   (default: target/release/tollgate)
Environment: HS=200,600  KA=2000,6000  CONNS=2  KEEP=dir-to-keep-outputs
"""
import os, re, shutil, signal, socket, ssl, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import certificate, free_port, tollgate_tls_conf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TG = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "target/release/tollgate")
HS = [int(x) for x in os.environ.get("HS", "200,600").split(",")]
KA = [int(x) for x in os.environ.get("KA", "2000,6000").split(",")]
CONNS = int(os.environ.get("CONNS", "2"))
PHASE_LIMIT = 900        # seconds: no single load phase runs longer than this
SOCK_TIMEOUT = 60        # seconds: per socket operation (valgrind is ~50x slower)
TMP = os.environ.get("KEEP") or tempfile.mkdtemp(prefix="callgrind-tls-")
os.makedirs(TMP, exist_ok=True)
PROCS = []


def wait_port(port, proc, timeout=180):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return True
        except OSError:
            time.sleep(0.2)
    return False


def start(name, args):
    log = open(os.path.join(TMP, name + ".log"), "w")
    p = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    PROCS.append(p)
    return p


def stop(p, timeout=60):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGINT)
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        except ProcessLookupError:
            pass


def nginx_conf(name, body, single_process):
    d = os.path.join(TMP, name)
    os.makedirs(os.path.join(d, "logs"), exist_ok=True)
    conf = os.path.join(d, "nginx.conf")
    head = "master_process off;\n" if single_process else ""
    open(conf, "w").write(f"""{head}worker_processes 1;
daemon off;
error_log {d}/logs/error.log crit;
pid {d}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;
  uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
  {body}
}}
""")
    return ["nginx", "-p", d, "-c", conf]


# ---------------------------------------------------------------- callgrind control and output

def callgrind(name, cmd):
    out = os.path.join(TMP, name + ".callgrind")
    return start(name, ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + cmd), out


def control(pid, flag):
    r = subprocess.run(["callgrind_control", flag, str(pid)], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0 or "Error" in r.stdout:
        raise RuntimeError(f"callgrind_control {flag} {pid}: {r.stdout} {r.stderr}")


def dump(pid, base):
    """Dump the counters since the last zero/dump; return (file, Ir)."""
    d, stem = os.path.split(base)
    before = set(os.listdir(d))
    control(pid, "-d")
    end = time.time() + 60
    while time.time() < end:
        new = sorted(f for f in set(os.listdir(d)) - before if f.startswith(stem))
        if new:
            path = os.path.join(d, new[-1])
            for _ in range(100):                   # the file may still be being written
                txt = open(path).read()
                m = re.search(r"^totals:\s+(\d+)", txt, re.M) or re.search(r"^summary:\s+(\d+)", txt, re.M)
                if m:
                    return path, int(m.group(1))
                time.sleep(0.1)
        time.sleep(0.1)
    raise RuntimeError("no callgrind dump appeared for " + base)


# ---------------------------------------------------------------- the client

REQ_CLOSE = b"GET /b HTTP/1.1\r\nHost: bench.test\r\nConnection: close\r\n\r\n"
REQ_KA = b"GET /b HTTP/1.1\r\nHost: bench.test\r\n\r\n"


def client_ctx(cert):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cert)
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def connect(port, ctx):
    s = socket.create_connection(("127.0.0.1", port), timeout=SOCK_TIMEOUT)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if ctx is not None:
        s = ctx.wrap_socket(s, server_hostname="bench.test")
    return s


def read_response(f):
    """One HTTP/1.1 response from a buffered reader; returns (status, keep_alive)."""
    status = f.readline()
    if not status:
        raise ConnectionError("connection closed before a response")
    code = int(status.split()[1])
    length, chunked, close = None, False, False
    while True:
        line = f.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        k, _, v = line.decode("latin-1").partition(":")
        k, v = k.strip().lower(), v.strip().lower()
        if k == "content-length":
            length = int(v)
        elif k == "transfer-encoding" and "chunked" in v:
            chunked = True
        elif k == "connection" and "close" in v:
            close = True
    if chunked:
        while True:
            n = int(f.readline().split(b";")[0], 16)
            f.read(n + 2) if n else None
            if n == 0:
                while f.readline() not in (b"\r\n", b"\n", b""):
                    pass
                break
    elif length is not None:
        f.read(length)
    else:
        f.read()
        close = True
    return code, not close


def handshakes(port, ctx, n):
    """n sequential new TLS connections, one request each with Connection: close."""
    bad, end = 0, time.time() + PHASE_LIMIT
    for i in range(n):
        if time.time() > end:
            raise RuntimeError(f"handshake phase over {PHASE_LIMIT}s after {i}")
        s = connect(port, ctx)
        assert s.version() == "TLSv1.3" and not s.session_reused
        s.sendall(REQ_CLOSE)
        f = s.makefile("rb")
        code, _ = read_response(f)
        while f.read(4096):                        # to the server's close
            pass
        f.close()
        s.close()
        bad += code != 200
    return bad


class KeepAlive:
    def __init__(self, port, ctx, conns):
        self.port, self.ctx, self.reconnects = port, ctx, 0
        self.socks = [connect(port, ctx) for _ in range(conns)]
        self.files = [s.makefile("rb") for s in self.socks]

    def run(self, n):
        bad, end = 0, time.time() + PHASE_LIMIT
        for i in range(n):
            if time.time() > end:
                raise RuntimeError(f"keep-alive phase over {PHASE_LIMIT}s after {i}")
            j = i % len(self.socks)
            self.socks[j].sendall(REQ_KA)
            code, keep = read_response(self.files[j])
            bad += code != 200
            if not keep:                           # should not happen; counted and reported
                self.reconnects += 1
                self.files[j].close()
                self.socks[j].close()
                self.socks[j] = connect(self.port, self.ctx)
                self.files[j] = self.socks[j].makefile("rb")
        return bad

    def close(self):
        for f, s in zip(self.files, self.socks):
            f.close()
            s.close()


# ---------------------------------------------------------------- one server

SETTLE = 1.0  # seconds between the last response and a dump, for the server to finish up


def measure(name, proc, out, tls_port, plain_port, ctx):
    pid = proc.pid
    res, files = {}, {}

    def phase(key, n, fn):
        control(pid, "-z")
        t0 = time.time()
        bad = fn(n)
        secs = time.time() - t0
        time.sleep(SETTLE)
        path, ir = dump(pid, out)
        files[(key, n)] = path
        print(f"  {name:8} {key:9} n={n:5}  Ir={ir:>14,}  {secs:6.1f}s  non-200 {bad}", flush=True)
        return ir, secs

    # Idle: what the process costs per second doing nothing (timers, housekeeping).
    control(pid, "-z")
    time.sleep(5)
    _, idle = dump(pid, out)
    res["idle_per_s"] = idle / 5
    print(f"  {name:8} idle      {idle / 5:,.0f} Ir/s", flush=True)

    handshakes(tls_port, ctx, 20)                  # warm-up
    s = connect(tls_port, ctx)
    res["cipher"] = f"{s.version()} {s.cipher()[0]} alpn={s.selected_alpn_protocol()}"
    s.close()
    print(f"  {name:8} negotiated {res['cipher']}", flush=True)
    a = [phase("handshake", n, lambda n: handshakes(tls_port, ctx, n)) for n in HS]
    res["handshake"] = (a, HS)

    for key, c in [("ka-tls", ctx), ("ka-plain", None)]:
        port = tls_port if c else plain_port
        ka = KeepAlive(port, c, CONNS)
        ka.run(200)                                # warm-up, connections stay open
        a = [phase(key, n, ka.run) for n in KA]
        res[key] = (a, KA)
        res[key + "-reconnects"] = ka.reconnects
        ka.close()
    return res, files


def per_unit(r):
    (ir1, s1), (ir2, s2) = r[0]
    n1, n2 = r[1]
    return (ir2 - ir1) / (n2 - n1), (s2 - s1)


def main():
    assert os.access(TG, os.X_OK), f"no tollgate binary at {TG}"
    print(f"outputs in {TMP}; tollgate {TG}; HS={HS} KA={KA} CONNS={CONNS}", flush=True)
    cert, key = certificate(TMP)
    ctx = client_ctx(cert)
    results, files = {}, {}
    try:
        be = free_port()
        backend = start("backend", nginx_conf("backend", f"""
  server {{ listen 127.0.0.1:{be}; location / {{ return 200 "ok\\n"; }} }}""", False))
        assert wait_port(be, backend, 20), "backend did not start"

        # Tollgate: one thread, TLS and plaintext listeners.
        tp, tt = free_port(), free_port()
        conf = os.path.join(TMP, "tollgate.toml")
        open(conf, "w").write(tollgate_tls_conf(tp, tt, be, cert, key))
        tg, tg_out = callgrind("tollgate", [TG, "run", "--config", conf])
        assert wait_port(tt, tg) and wait_port(tp, tg), "tollgate did not start (see tollgate.log)"
        results["tollgate"], files["tollgate"] = measure("tollgate", tg, tg_out, tt, tp, ctx)
        stop(tg)

        # nginx: one process (master_process off, so callgrind sees the worker), same cert,
        # TLS 1.2/1.3, keep-alive to the backend.
        np_, nt = free_port(), free_port()
        ngx, ngx_out = callgrind("nginx", nginx_conf("ngx-tls", f"""
  upstream be {{ server 127.0.0.1:{be}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{np_};
    listen 127.0.0.1:{nt} ssl;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    location / {{
      proxy_pass http://be;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}""", True))
        assert wait_port(nt, ngx) and wait_port(np_, ngx), "nginx did not start (see nginx.log)"
        results["nginx"], files["nginx"] = measure("nginx", ngx, ngx_out, nt, np_, ctx)
        stop(ngx)
    finally:
        for p in reversed(PROCS):
            stop(p)

    t, n = results["tollgate"], results["nginx"]
    print(f"\nInstructions (Ir) per unit, (Ir(N2) - Ir(N1)) / (N2 - N1); one worker each, "
          f"ECDSA P-256, TLS 1.3 X25519, loopback\n")
    print(f"{'':28} {'tollgate':>12} {'nginx':>12} {'tg/nginx':>9}")
    rows = {}
    for key, label in [("handshake", "handshake (+1 req, close)"), ("ka-tls", "kept-alive request, TLS"),
                       ("ka-plain", "kept-alive request, plain")]:
        (a, _), (b, _) = per_unit(t[key]), per_unit(n[key])
        rows[key] = (a, b)
        print(f"{label:28} {a:12,.0f} {b:12,.0f} {a / b:9.2f}")
    a, b = rows["ka-tls"][0] - rows["ka-plain"][0], rows["ka-tls"][1] - rows["ka-plain"][1]
    print(f"{'TLS extra per request':28} {a:12,.0f} {b:12,.0f} {a / b:9.2f}")
    print(f"{'idle Ir per second':28} {t['idle_per_s']:12,.0f} {n['idle_per_s']:12,.0f}")
    for key in ["handshake", "ka-tls", "ka-plain"]:
        for who, r in [("tollgate", t), ("nginx", n)]:
            (_, dsecs) = per_unit(r[key])
            d = dsecs * r["idle_per_s"] / (r[key][1][1] - r[key][1][0])
            print(f"  idle-rate upper bound in {who} {key}: {d:,.0f} Ir per unit", end="")
            print(f", reconnects {r.get(key + '-reconnects', 0)}" if key != "handshake" else "")
    print(f"negotiated: tollgate {t['cipher']}; nginx {n['cipher']}")
    print(f"\nTLS/plaintext per kept-alive request: tollgate {rows['ka-tls'][0] / rows['ka-plain'][0]:.2f}, "
          f"nginx {rows['ka-tls'][1] / rows['ka-plain'][1]:.2f}")

    hs = files["tollgate"][("handshake", HS[-1])]
    print(f"\nTollgate, handshake run n={HS[-1]}: top inclusive functions ({hs})\n")
    r = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", hs],
                       capture_output=True, text=True)
    open(os.path.join(TMP, "tollgate-handshake-inclusive.txt"), "w").write(r.stdout)
    lines = [l for l in r.stdout.splitlines() if re.match(r"^\s*[\d,]+ \(", l)]
    for l in lines[:40]:
        print(l[:200])
    print(f"\nfull annotations in {TMP}")


if __name__ == "__main__":
    main()
