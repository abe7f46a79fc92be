//! The HTTP client auth asks with (JWKS documents, auth services): hyper's pooled HTTP/1.1
//! client on rustls with ring (no aws-lc-rs), system roots or a configured CA. Each exchange
//! has a deadline and a cap on the body it reads. A URL naming a Service port the cluster
//! places (`http://SVC.NS.svc.cluster.local:PORT/...`, under `run --kubernetes`) reaches its
//! ready endpoints in turn ([`Placed`]), as the pools do, with no cluster DNS needed; TLS
//! still verifies the name.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use std::time::Duration;

pub type HttpClient = Client<HttpsConnector<Placed>, Empty<Bytes>>;

/// hyper's connector, sending a name the cluster places ([`super::placed::CLUSTER`]) to one of
/// its endpoints in turn; every other name is resolved by DNS as before.
#[derive(Clone)]
pub struct Placed {
    inner: HttpConnector,
    next: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl tower_service::Service<http::Uri> for Placed {
    type Response = <HttpConnector as tower_service::Service<http::Uri>>::Response;
    type Error = <HttpConnector as tower_service::Service<http::Uri>>::Error;
    type Future = <HttpConnector as tower_service::Service<http::Uri>>::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, dst: http::Uri) -> Self::Future {
        let to = placed_uri(&dst, &self.next).unwrap_or(dst);
        self.inner.call(to)
    }
}

/// `dst` with its authority replaced by an endpoint of the Service port it names, when the
/// cluster places that name.
fn placed_uri(dst: &http::Uri, next: &std::sync::atomic::AtomicUsize) -> Option<http::Uri> {
    let host = dst.host()?;
    if !host.ends_with(".svc.cluster.local") {
        return None;
    }
    let port = dst
        .port_u16()
        .unwrap_or(if dst.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let (_, map) = super::placed::CLUSTER.current();
    let addrs = map.get(&format!("{host}:{port}"))?;
    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let addr = addrs.get(i % addrs.len().max(1))?;
    let mut parts = dst.clone().into_parts();
    parts.authority = addr.to_string().parse().ok();
    http::Uri::from_parts(parts).ok()
}

/// Why an exchange gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No answer within the deadline.
    Timeout,
    /// Not reached, or the connection failed.
    Unreachable(String),
    /// An answer whose body is over the cap.
    TooLarge,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Timeout => f.write_str("no answer in time"),
            Failure::Unreachable(e) => write!(f, "not reached: {e}"),
            Failure::TooLarge => f.write_str("the answer's body is over the cap"),
        }
    }
}

/// A client trusting `ca_pem`'s certificates, or the system's roots without one; `https_only`
/// refuses plain http:// URLs.
pub fn build(ca_pem: Option<&[u8]>, https_only: bool) -> Result<HttpClient, String> {
    build_for(ca_pem, https_only)
}

/// [`build`] for requests with a body of type `B` (an OTLP export's protobuf).
pub fn build_for<B>(
    ca_pem: Option<&[u8]>,
    https_only: bool,
) -> Result<Client<HttpsConnector<Placed>, B>, String>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut roots = rustls::RootCertStore::empty();
    match ca_pem {
        Some(pem) => {
            for c in CertificateDer::pem_slice_iter(pem) {
                let c = c.map_err(|e| format!("CA certificate: {e}"))?;
                roots.add(c).map_err(|e| format!("CA certificate: {e}"))?;
            }
        }
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
        }
    }
    // Without a root an https:// URL cannot verify (every call fails closed); an http:// one
    // needs none, so an image without system roots still serves plain auth services.
    if roots.is_empty() && https_only {
        return Err("no CA certificate to trust (none in the CA file, or no system roots)".into());
    }
    let tls = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(2)));
    let b = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls);
    let https = if https_only {
        b.https_only()
    } else {
        b.https_or_http()
    }
    .enable_http1()
    .wrap_connector(Placed {
        inner: http,
        next: Default::default(),
    });
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(32)
        .pool_timer(TokioTimer::new())
        .build(https))
}

/// Sends `req` and reads its answer's head and at most `max_body` bytes of body, all within
/// `deadline`.
pub async fn exchange<B>(
    client: &Client<HttpsConnector<Placed>, B>,
    req: http::Request<B>,
    deadline: Duration,
    max_body: usize,
) -> Result<(http::response::Parts, Bytes), Failure>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // A HEAD answer's Content-Length is its GET's: no body follows it.
    let head = req.method() == http::Method::HEAD;
    let call = async {
        let resp = client
            .request(req)
            .await
            .map_err(|e| Failure::Unreachable(error_chain(&e)))?;
        let (parts, body) = resp.into_parts();
        let bodiless = head || matches!(parts.status.as_u16(), 204 | 304);
        let too_large = !bodiless
            && parts
                .headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                .is_some_and(|n| n > max_body as u64);
        if too_large {
            return Err(Failure::TooLarge);
        }
        let bytes = Limited::new(body, max_body)
            .collect()
            .await
            .map_err(|e| {
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some()
                {
                    Failure::TooLarge
                } else {
                    Failure::Unreachable(e.to_string())
                }
            })?
            .to_bytes();
        Ok((parts, bytes))
    };
    match tokio::time::timeout(deadline, call).await {
        Ok(r) => r,
        Err(_) => Err(Failure::Timeout),
    }
}

/// An error and its sources, in one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// A client with a body of bytes for what the gateway sends on its own behalf (a route's
/// mirror copies, its error pages), built at its first use: a config that uses neither never
/// loads the system's roots for it. One per process, shared.
#[derive(Default)]
pub struct Side {
    cell: std::sync::OnceLock<Result<SideClient, String>>,
}

/// [`Side`]'s client.
pub type SideClient = Client<HttpsConnector<Placed>, http_body_util::Full<Bytes>>;

impl Side {
    /// The client (system roots, http and https), or why it could not be made (logged once).
    pub fn get(&self) -> Option<&SideClient> {
        self.cell
            .get_or_init(|| {
                build_for(None, false).inspect_err(
                    |e| tracing::warn!(error = %e, "no HTTP client for mirrors and error pages"),
                )
            })
            .as_ref()
            .ok()
    }
}
