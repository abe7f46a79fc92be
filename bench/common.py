"""Pieces the bench scripts share: free loopback ports, the ECDSA P-256 test certificate, and
the TLS Tollgate config that tls.py and callgrind_tls.py measure alike. Importing this module
has no side effects (no argv parsing, no folders made)."""
import os, socket, subprocess


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def certificate(folder):
    """A self-signed ECDSA P-256 certificate for bench.test and 127.0.0.1 in `folder`."""
    cert, key = os.path.join(folder, "bench.crt"), os.path.join(folder, "bench.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=bench.test",
                    "-addext", "subjectAltName=DNS:bench.test,IP:127.0.0.1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


def tollgate_tls_conf(plain_port, tls_port, backend_port, cert, key):
    """One thread, a plaintext and a TLS listener, one route to the backend, no limits."""
    return f"""[server]
listen = ["127.0.0.1:{plain_port}"]
tls_listen = ["127.0.0.1:{tls_port}"]
threads = 1
[tls]
certificates = [{{ cert = "{cert}", key = "{key}" }}]
[upstreams.be]
targets = ["127.0.0.1:{backend_port}"]
health_check = false
[[routes]]
name = "bench"
path_prefix = "/"
upstream = "be"
"""
