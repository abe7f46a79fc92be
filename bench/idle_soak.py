#!/usr/bin/env python3
"""Idle-connection soak (issue 11): N idle connections against default settings.

Starts the release gateway with default settings (header_timeout 10s, threads = cores) and a
built-in `respond` route, then nginx with the same deadlines (when installed), and for each: a legitimate client's latency alone; N connections opened that send nothing, with
the gateway's RSS sampled every 50 ms; the legitimate client's latency during the attack; how
long each idle connection stayed open; RSS once all are closed. Loopback only, bounded in count
and time. Usage: bench/idle_soak.py [connections [floods]] (defaults 20000, 1). Needs `ulimit -n` above
N + 100 for the gateway; the idle clients are spread over processes of 9,000 each.
"""
import multiprocessing, os, resource, selectors, socket, statistics, subprocess, sys, tempfile, threading, time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
# Floods one after the other against the same server: does the second reuse the first's memory?
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 1
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "tollgate")


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def latencies(port, count, out):
    """`count` requests on one kept-alive connection; seconds each."""
    s = socket.create_connection(("127.0.0.1", port)); s.settimeout(10)
    req = b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"
    for _ in range(count):
        t = time.perf_counter(); s.sendall(req); buf = b""
        while not buf.endswith(b"ok"):
            d = s.recv(4096)
            if not d: raise RuntimeError("closed")
            buf += d
        out.append(time.perf_counter() - t)
        time.sleep(0.002)
    s.close()


def idle_clients(port, w, n, q):
    """Opens `n` connections that send nothing; reports how long each stayed open."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sel = selectors.DefaultSelector(); opened = {}
    for i in range(n):
        s = socket.socket(); s.setblocking(False)
        s.bind((f"127.{1 + w}.{i // 250 % 250}.{1 + i % 250}", 0))
        try: s.connect(("127.0.0.1", port))
        except BlockingIOError: pass
        opened[s.fileno()] = (s, time.time())
        sel.register(s, selectors.EVENT_READ)
    q.put(n)
    held = []; deadline = time.time() + 30
    while opened and time.time() < deadline:
        for key, _ in sel.select(timeout=0.5):
            s, t0 = opened.pop(key.fd)
            try: s.recv(1)
            except OSError: pass
            held.append(time.time() - t0); sel.unregister(s); s.close()
    q.put((held, len(opened)))


def p99(xs):
    return statistics.quantiles(xs, n=100)[98] * 1000


def start_tollgate(port, d):
    conf = os.path.join(d, "t.toml")
    with open(conf, "w") as f:
        f.write(f'[server]\nlisten = ["127.0.0.1:{port}"]\n'
                '[[routes]]\nname = "ok"\npath_prefix = "/"\nrespond = { status = 200, body = "ok" }\n')
    log = open(os.path.join(d, "tollgate.log"), "w")
    return subprocess.Popen([BIN, "run", "--config", conf], stdout=log, stderr=log)


def start_nginx(port, d):
    """nginx with the equivalent deadlines (client_header_timeout 10s, keepalive 60s), one
    worker per core as Tollgate's threads, answering `ok` itself."""
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 2; daemon off; master_process on; pid {d}/nginx.pid;
error_log {d}/nginx.err warn; worker_rlimit_nofile {N + 1000};
events {{ worker_connections {N + 1000}; }}
http {{ access_log off; client_header_timeout 10s; keepalive_timeout 60s;
  server {{ listen 127.0.0.1:{port} backlog=65535; location / {{ return 200 "ok"; }} }} }}
""")
    return subprocess.Popen(["nginx", "-c", conf, "-p", d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def tree_rss(pid):
    """RSS of a process and its children (nginx's workers), KiB."""
    total = rss_kib(pid)
    try:
        for child in open(f"/proc/{pid}/task/{pid}/children").read().split():
            total += rss_kib(int(child))
    except OSError:
        pass
    return total


def flood_once(name, proc, port, base, rss0, flood):
    """One flood of N idle connections; prints what it cost."""
    peak = [rss0]; stop = threading.Event()
    def sample():
        while not stop.is_set():
            try: peak[0] = max(peak[0], tree_rss(proc.pid))
            except OSError: pass
            time.sleep(0.05)
    threading.Thread(target=sample, daemon=True).start()
    # The idle clients: in worker processes (each has its own open-file limit).
    workers = max(1, -(-N // 9000))
    q = multiprocessing.Queue(); t_open = time.time()
    procs = [multiprocessing.Process(target=idle_clients, args=(port, w, N // workers + (w < N % workers), q))
             for w in range(workers)]
    for p in procs: p.start()
    ready = [q.get() for _ in procs]
    open_secs = time.time() - t_open
    during = []; lt = threading.Thread(target=latencies, args=(port, 1000, during)); lt.start()
    held = []; still_open = 0
    for _ in procs:
        h, left = q.get(); held += h; still_open += left
    for p in procs: p.join()
    lt.join()
    time.sleep(5.0)
    rss1 = tree_rss(proc.pid); stop.set()
    held.sort()
    print(f"{name}, flood {flood}: {sum(ready)} idle connections opened in {open_secs:.1f} s; open after 30 s: {still_open}")
    print(f"  held open: min {held[0]:.2f} s, median {statistics.median(held):.2f} s, "
          f"p99 {held[int(len(held) * 0.99)]:.2f} s, max {held[-1]:.2f} s (header timeout 10 s)")
    print(f"  RSS: start {rss0/1024:.1f} MiB, peak {peak[0]/1024:.1f} MiB "
          f"(+{(peak[0]-rss0)/N:.2f} KiB per idle connection), 5 s after the last close "
          f"{rss1/1024:.1f} MiB ({100*(rss1-rss0)/rss0:+.1f} %)")
    print(f"  legitimate client p99: {p99(base):.2f} ms alone, {p99(during):.2f} ms during the attack "
          f"({p99(during)/p99(base):.2f}x)")


def run(name, start):
    port = free_port()
    d = tempfile.mkdtemp(prefix=f"soak-{name}-")
    proc = start(port, d)
    try:
        for _ in range(100):
            try: socket.create_connection(("127.0.0.1", port)).close(); break
            except OSError: time.sleep(0.05)
        time.sleep(0.5)
        base = []; latencies(port, 1000, base)
        rss0 = tree_rss(proc.pid)
        for flood in range(1, ROUNDS + 1):
            flood_once(name, proc, port, base, rss0, flood)
    finally:
        proc.terminate(); proc.wait(10)


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < N + 100:
        sys.exit(f"the server needs {N + 100} open files; the hard limit is {hard} (ulimit -Hn)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    run("tollgate", start_tollgate)
    if subprocess.run(["which", "nginx"], capture_output=True).returncode == 0:
        run("nginx", start_nginx)


if __name__ == "__main__":
    main()
