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


def tls_pem(folder, cert, key):
    """The certificate and key in one file, as HAProxy's `crt` reads them."""
    pem = os.path.join(folder, "bench.pem")
    with open(pem, "w") as out:
        out.write(open(cert).read() + open(key).read())
    return pem


def nginx_h2_proxy(port, backend_port, cert, key):
    """nginx's http{} body: TLS with ALPN h2 on `port`, proxying over kept-alive HTTP/1.1."""
    return f"""
  upstream be {{ server 127.0.0.1:{backend_port}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port} ssl http2;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    http2_max_concurrent_streams 128;
    keepalive_requests 1000000;
    location / {{
      proxy_pass http://be;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}"""


def haproxy_h2_proxy(port, backend_port, pem):
    """HAProxy's frontend and backend: TLS with ALPN h2 and http/1.1 on `port`."""
    return f"""frontend fe
  bind 127.0.0.1:{port} ssl crt {pem} alpn h2,http/1.1
  default_backend be
backend be
  server s1 127.0.0.1:{backend_port}
"""
