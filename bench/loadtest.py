#!/usr/bin/env python3
"""Side-by-side load test on loopback: the backend direct, then Tollgate, nginx, HAProxy and
Caddy as the reverse proxy in front of it.

Every server runs one worker (Tollgate threads = 1, nginx worker_processes 1, HAProxy
nbthread 1, Caddy GOMAXPROCS=1) so CPU per request compares like with like. For each scenario:
req/s, p50/p99 latency (wrk, 2 threads unless WRK_THREADS), status mix, and the proxy's CPU time per request
(utime+stime of all its processes and threads from /proc over the run). Ratios are to the
direct backend and to the nginx proxy in the same shape, measured in the same run. Bounded:
each scenario runs a fixed number of seconds, traffic only to 127.0.0.1. HAProxy and Caddy
are skipped (with a note) when not installed.

Usage: bench/loadtest.py [seconds] [connections]   (TOLLGATE=path overrides the binary,
WRK_THREADS=n wrk's threads, default 2)
"""
import os, re, shutil, signal, socket, subprocess, sys, tempfile, time

from common import free_port  # noqa: F401  (bench scripts import it from here too)

SECS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
CONNS = int(sys.argv[2]) if len(sys.argv) > 2 else 50
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TG = os.environ.get("TOLLGATE") or os.path.join(ROOT, "target/release/tollgate")
TMP = tempfile.mkdtemp(prefix="tollgate-bench-")
TICK = os.sysconf("SC_CLK_TCK")
# wrk's threads (WRK_THREADS=1 with 16 connections is issue 43's "wrk -t1 -c16").
WRK_THREADS = os.environ.get("WRK_THREADS", "2")


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


def haproxy(name, body):
    """HAProxy in the foreground (-db), one process, one thread; returns the Popen."""
    conf = os.path.join(TMP, name + ".cfg")
    open(conf, "w").write(f"""global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  http-reuse always
{body}
""")
    return subprocess.Popen(["haproxy", "-db", "-f", conf], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def caddy(name, port, be_port, single_cpu=True):
    """Caddy (Go) with reverse_proxy only; GOMAXPROCS=1 for one worker's worth of CPU."""
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "Caddyfile")
    open(conf, "w").write(caddy_conf(port, be_port))
    env = dict(os.environ, XDG_DATA_HOME=d, XDG_CONFIG_HOME=d, HOME=d)
    if single_cpu:
        env["GOMAXPROCS"] = "1"
    return subprocess.Popen(["caddy", "run", "--config", conf, "--adapter", "caddyfile"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)


def probe(port, tries=300):
    """The first non-2xx status of up to `tries` back-to-back GETs on one connection: names the
    non-2xx responses wrk only counts (a limiter refills between runs, so one GET may pass)."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        for _ in range(tries):
            c.request("GET", "/bench")
            r = c.getresponse()
            r.read()
            if not 200 <= r.status < 400:
                return str(r.status)
        return "non-2xx"
    finally:
        c.close()


WRK_SCALE = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def load(port, measure_pids):
    """wrk -t WRK_THREADS -c CONNS for SECS seconds after a 1 s warm-up; CPU of measure_pids over the run."""
    url = f"http://127.0.0.1:{port}/bench"

    def cmd(secs):
        return ["wrk", "-t", WRK_THREADS, "-c", str(CONNS), "-d", f"{secs}s", "--timeout", "5s",
                "--latency", url]
    # Warm-up: connections, caches, the allocator.
    subprocess.run(cmd(1), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    c0 = cpu_seconds(measure_pids)
    out = subprocess.run(cmd(SECS), capture_output=True, text=True, timeout=SECS + 60).stdout
    c1 = cpu_seconds(measure_pids)
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s)", out)
    n = int(m.group(1))
    secs = float(m.group(2)) * WRK_SCALE[m.group(3)] / 1000
    lat = {q: float(v) * WRK_SCALE[u] for q, v, u in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)", out, re.M)}
    non2xx = int((re.search(r"Non-2xx or 3xx responses: (\d+)", out) or [0, 0])[1])
    errors = re.search(r"Socket errors: (.*)", out)
    codes = {"2xx": n - non2xx}
    if non2xx:
        codes[probe(port)] = non2xx        # wrk counts them without the status: one probe names it
    if errors:
        codes["sock-err " + errors.group(1).replace(" ", "")] = 0
    return {
        "rps": n / secs,
        "p50": lat.get("50", 0.0),
        "p99": lat.get("99", 0.0),
        "codes": {k: v for k, v in codes.items() if v or k.startswith("sock")},
        "cpu_us": (c1 - c0) / max(n, 1) * 1e6,
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


# HAProxy's equivalent of limit_req zone=ip (rate R r/s) burst=B nodelay, keyed on the client
# address. The stick table keeps, per source address, a rate counter over a sliding 1 s window;
# a request is refused with 429 when the counter says R requests were already admitted in the
# last second, else admitted and counted:
#   stick-table type ip ... store gpc0_rate(1s)
#   http-request track-sc0 src
#   http-request deny deny_status 429 if { sc_gpc0_rate(0) ge R }
#   http-request sc-inc-gpc0(0)
# The usual recipe, store http_req_rate(1s) and deny if { sc_http_req_rate(0) gt R }, counts
# every request tracked, the refused ones included: under a flood the window never drops below
# R and after the first R requests nothing is ever admitted again (measured: 0 admitted in 8 s
# where nginx admits 804). Counting only admitted requests (gpc0, incremented after the deny
# rule) gives nginx's shape: about R per second, up to R at once after a quiet second. It is
# still a sliding-window counter (HAProxy's freq_ctr: this period's count plus the previous
# period's weighted by the part of it still inside the window), not a leaky bucket: a full
# burst is R (nginx: B + 1 = 101) and admissions within a second bunch differently, so the
# admitted counts differ slightly from nginx's and Tollgate's.
def hap_conf(port, be_port, limits):
    lim = ""
    if limits:
        rate, _burst = SHAPES[limits]
        lim = f"""  stick-table type ip size 100k expire 10s store gpc0_rate(1s)
  http-request track-sc0 src
  http-request deny deny_status 429 if {{ sc_gpc0_rate(0) ge {rate} }}
  http-request sc-inc-gpc0(0)
"""
    return f"""frontend fe
  bind 127.0.0.1:{port}
{lim}  default_backend be
backend be
  server s1 127.0.0.1:{be_port}
"""


# Caddy: reverse_proxy only. Debian's caddy has no rate limiter (rate limiting is the
# third-party caddy-ratelimit module, not in the package), so Caddy appears without limits.
# Its HTTP transport keeps connections to the backend alive by default.
def caddy_conf(port, be_port):
    return f"""{{
  admin off
  auto_https off
}}
:{port} {{
  bind 127.0.0.1
  reverse_proxy 127.0.0.1:{be_port}
}}
"""


LABELS = {
    "b": "b. tollgate, no limits", "c": "c. tollgate, per-IP limit never denies",
    "d": "d. tollgate, limit denies most",
    "e": "e. nginx proxy, no limits", "f": "f. nginx limit_req never denies",
    "g": "g. nginx limit_req denies most",
    "h": "h. haproxy, no limits", "i": "i. haproxy stick-table never denies",
    "j": "j. haproxy stick-table denies most", "k": "k. caddy reverse_proxy, no limits",
    "l": "l. bare pingora (the floor), no limits",
    "m": "m. bare pingora refuses all (429 floor)",
}
# The nginx scenario each proxy's scenario is compared with.
PAIR = {"b": "e", "c": "f", "d": "g", "h": "e", "i": "f", "j": "g", "k": "e", "l": "e", "m": "g"}
BARE = os.environ.get("BARE") or os.path.join(ROOT, "target/release/bare-pingora")


# ONLY=d,g,j,m runs those scenarios (and the backend direct, the base of every ratio).
ONLY = set(filter(None, os.environ.get("ONLY", "").split(",")))


def want(tag):
    return not ONLY or tag in ONLY


def check_only():
    unknown = sorted(ONLY - set(LABELS))
    if unknown:
        sys.exit(f"ONLY: no scenario {', '.join(unknown)} (scenarios: {', '.join(sorted(LABELS))})")


def run(results, tag, proc, port, pids_of):
    try:
        assert wait_port(port), f"{LABELS[tag]} did not start"
        results.append((LABELS[tag], load(port, pids_of(proc))))
    finally:
        stop(proc)


def main():
    check_only()
    be_port = free_port()
    backend = nginx("backend", f"""
  server {{ listen 127.0.0.1:{be_port}; location / {{ return 200 "ok\\n"; }} }}""")
    assert wait_port(be_port), "backend did not start"
    results, notes = [], []
    try:
        results.append(("a. backend direct", load(be_port, children(backend.pid))))
        for tag, limits in [("b", None), ("c", "allow"), ("d", "deny")]:
            if not want(tag):
                continue
            port = free_port()
            run(results, tag, tollgate(f"tg-{tag}", tg_conf(port, be_port, limits)), port,
                lambda p: [p.pid])
        if os.path.exists(BARE):
            log = open(os.path.join(TMP, "bare.log"), "w")
            if want("l"):
                port = free_port()
                bare = subprocess.Popen([BARE, f"127.0.0.1:{port}", f"127.0.0.1:{be_port}"],
                                        stdout=log, stderr=log, start_new_session=True)
                run(results, "l", bare, port, lambda p: [p.pid])
            # Every request answered with a bodiless 429 head, connection kept: the
            # framework's floor for a refusal, beside (d) and nginx's (g).
            if want("m"):
                port = free_port()
                bare = subprocess.Popen([BARE, f"127.0.0.1:{port}", f"127.0.0.1:{be_port}", "/"],
                                        stdout=log, stderr=log, start_new_session=True)
                run(results, "m", bare, port, lambda p: [p.pid])
        elif want("l") or want("m"):
            notes.append(f"{BARE} not built: (l), (m) skipped (cargo build --release -p bare-pingora)")
        for tag, limits in [("e", None), ("f", "allow"), ("g", "deny")]:
            if not want(tag):
                continue
            port = free_port()
            run(results, tag, nginx(f"ngx-{tag}", ngx_proxy(port, be_port, limits)), port,
                lambda p: children(p.pid))
        if shutil.which("haproxy"):
            for tag, limits in [("h", None), ("i", "allow"), ("j", "deny")]:
                if not want(tag):
                    continue
                port = free_port()
                run(results, tag, haproxy(f"hap-{tag}", hap_conf(port, be_port, limits)), port,
                    lambda p: children(p.pid))
        elif any(want(t) for t in "hij"):
            notes.append("haproxy not installed: (h)-(j) skipped")
        if not want("k"):
            pass
        elif shutil.which("caddy"):
            port = free_port()
            run(results, "k", caddy("caddy-k", port, be_port), port, lambda p: children(p.pid))
        else:
            notes.append("caddy not installed: (k) skipped")
    finally:
        stop(backend)

    base = results[0][1]
    by = {r[0][0]: r[1] for r in results}
    print(f"\n{SECS}s per scenario, {CONNS} connections (wrk -t{WRK_THREADS}), one worker each, loopback, "
          f"2 cores shared with wrk\n")
    print(f"{'scenario':42} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'CPU s/100k':>10} {'vs a':>5} "
          f"{'req/s':>6} {'CPU':>5}  statuses")
    print(f"{'':42} {'':>8} {'':>7} {'':>7} {'':>10} {'':>5} {'vs nginx':>12}")
    for label, r in results:
        k = label[0]
        rps_n = cpu_n = ""
        if k in PAIR and PAIR[k] in by:
            n = by[PAIR[k]]
            rps_n, cpu_n = f"{r['rps'] / n['rps']:.2f}", f"{r['cpu_us'] / n['cpu_us']:.2f}"
        codes = ",".join(f"{c}:{n}" for c, n in r["codes"].items())
        # CPU seconds per 100k requests = microseconds per request / 10.
        print(f"{label:42} {r['rps']:8.0f} {r['p50']:7.2f} {r['p99']:7.2f} {r['cpu_us'] / 10:10.2f} "
              f"{r['rps'] / base['rps']:5.2f} {rps_n:>6} {cpu_n:>5}  {codes}")
    c, b = by.get("c"), by.get("b")
    if c and b:
        print(f"\n(c)/(b) throughput: {c['rps'] / b['rps']:.3f}  (target >= 0.97)")
    for t in "bcdhijklm":
        n = PAIR[t]
        if t in by and n in by:
            print(f"{LABELS[t][3:]:36} / nginx ({n}): CPU per request {by[t]['cpu_us'] / by[n]['cpu_us']:.2f}, "
                  f"req/s {by[t]['rps'] / by[n]['rps']:.2f}, p99 {by[t]['p99'] / max(by[n]['p99'], 1e-9):.2f}")
    for t, o in [("b", "h"), ("c", "i"), ("d", "j"), ("b", "k")]:
        if t in by and o in by:
            print(f"tollgate ({t}) / {LABELS[o][3:].split(',')[0].split(' ')[0]} ({o}): CPU per request "
                  f"{by[t]['cpu_us'] / by[o]['cpu_us']:.2f}")
    for t, o in [("b", "l"), ("c", "l"), ("d", "m")]:
        if t in by and o in by:
            print(f"tollgate ({t}) / bare pingora ({o}): CPU per request "
                  f"{by[t]['cpu_us'] / by[o]['cpu_us']:.2f}")
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
